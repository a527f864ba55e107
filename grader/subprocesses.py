"""Ending a long-lived helper process (a warm grading process, a judging server) that reads requests on its input."""
from __future__ import annotations

import subprocess


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
