"""The trusted side of the sandbox: staging a submission, choosing the isolation level, supervising the worker."""
