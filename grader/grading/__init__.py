"""One submission graded: staged, probed in the sandbox, judged, reported; and `grader check`."""
