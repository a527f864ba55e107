"""Helper processes' lifetimes: ending a long-lived one (a warm grading process, a judging server) that reads
requests on its input, and a child that must not outlive its parent."""
from __future__ import annotations

import os
import signal
import subprocess
import sys


def end_by_closing_input(proc: subprocess.Popen, seconds: float) -> None:
    """Close the process's input, which tells it to end what it started and exit, and wait for it, so that its
    time is counted where its caller's is; killed (and waited for) when it has not ended within `seconds`."""
    try:
        if proc.stdin is not None:
            proc.stdin.close()
        proc.wait(seconds)
    except (OSError, subprocess.TimeoutExpired):
        proc.kill()
        proc.wait()


def die_with_parent(parent: int | None = None) -> None:
    """On Linux, this process is killed when its parent ends. With `parent` (the pid it was forked from), it exits
    at once if that parent has already ended, before the signal was asked for."""
    if sys.platform != "linux":
        return
    from grader.worker.syscalls import PR_SET_PDEATHSIG, prctl

    prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if parent is not None and os.getppid() != parent:
        os._exit(1)
