"""The `grader` command's exit statuses, each defined once with what it means (`grader --help` lists them).

A fault of the machine (a full disk, an output folder that cannot be written, a gradebook another process holds or
that is damaged) ends a command in one sentence and a status of its own, so that a script can tell them apart; a
signal ends `grader batch` with 128 + its number, as a shell reports it.
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_BELOW_THRESHOLD = 1   # grader grade --fail-under: the total is below the threshold
EXIT_USAGE = 2             # bad arguments, an unreadable submission, a course that cannot be read
EXIT_INCOMPLETE = 3        # something is left to do again: a grader error, a repository or a grade not sent
EXIT_DISK_FULL = 4         # the disk under --out is full
EXIT_NOT_WRITABLE = 5      # --out cannot be written: a read-only file system, no permission, an I/O error
EXIT_BUSY = 6              # another process holds --out's gradebook (another grader batch, a database tool)
EXIT_CORRUPT = 7           # --out's gradebook.sqlite is damaged
EXIT_RATE_LIMITED = 8      # classroom sync: GitHub's rate limit stopped the run; the same command goes on later
EXIT_REDIRECT_REFUSED = 9  # lms canvas: Canvas's address redirected to another host; the push stopped
SIGNALLED = 128            # + the signal's number: stopped by it (130 Ctrl-C, 129 SIGHUP, 143 SIGTERM)

MEANINGS = {
    EXIT_OK: "done",
    EXIT_BELOW_THRESHOLD: "grade --fail-under: the total is below the threshold",
    EXIT_USAGE: "bad arguments, an unreadable submission or course",
    EXIT_INCOMPLETE: "left to do again: grade's grader error, classroom sync's repository, lms's grade not sent",
    EXIT_DISK_FULL: "the disk under --out is full: free space and run the same command",
    EXIT_NOT_WRITABLE: "--out cannot be written (read-only, no permission, I/O error)",
    EXIT_BUSY: "another process holds --out's gradebook: wait for it, then run the same command",
    EXIT_CORRUPT: "--out's gradebook.sqlite is damaged: restore it or move it aside",
    EXIT_RATE_LIMITED: "classroom sync: stopped at GitHub's rate limit; run the same command after the time it says",
    EXIT_REDIRECT_REFUSED: "lms canvas: Canvas redirected to another host; nothing was sent there",
    SIGNALLED: "+N: stopped by signal N (130 Ctrl-C, 129 SIGHUP, 143 SIGTERM); the same command resumes",
}


def epilog() -> str:
    """The exit statuses, as `grader --help` ends."""
    width = len(str(SIGNALLED))
    return "exit statuses:\n" + "\n".join(f"  {code:>{width}}  {meaning}" for code, meaning in MEANINGS.items())


class Fault(Exception):
    """A fault of the machine, not of any submission (grader.batch.faults tells them apart): `said`, one sentence
    saying what happened and what to do, and `status`, the exit status."""

    def __init__(self, status: int, said: str):
        super().__init__(said)
        self.status, self.said = status, said
