"""What stops a `grader batch` that no submission caused: a fault of the machine, or a signal.

Each ends the batch in one sentence (what happened, and what to do) and an exit status of its own (grader/exits.py),
with nothing lost: the gradebook stores each submission in one transaction, so whatever was stored before stays, and
the same command grades what is left. A fault is told apart by what SQLite or the system said, not by its words.
"""

from __future__ import annotations

import errno
import signal
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from grader.exits import EXIT_BUSY, EXIT_CORRUPT, EXIT_DISK_FULL, EXIT_NOT_WRITABLE, SIGNALLED, Fault

# SQLite's primary result codes (an extended code holds one in its low byte)
_SQLITE_STATUS = {
    13: EXIT_DISK_FULL,                                # SQLITE_FULL
    3: EXIT_NOT_WRITABLE, 8: EXIT_NOT_WRITABLE,        # SQLITE_PERM, SQLITE_READONLY
    10: EXIT_NOT_WRITABLE, 14: EXIT_NOT_WRITABLE,      # SQLITE_IOERR, SQLITE_CANTOPEN
    5: EXIT_BUSY, 6: EXIT_BUSY,                        # SQLITE_BUSY, SQLITE_LOCKED
    11: EXIT_CORRUPT, 26: EXIT_CORRUPT,                # SQLITE_CORRUPT, SQLITE_NOTADB
}
_ERRNO_STATUS = {
    errno.ENOSPC: EXIT_DISK_FULL, errno.EDQUOT: EXIT_DISK_FULL,
    errno.EROFS: EXIT_NOT_WRITABLE, errno.EACCES: EXIT_NOT_WRITABLE, errno.EPERM: EXIT_NOT_WRITABLE,
    errno.EIO: EXIT_NOT_WRITABLE,
}
_WHAT_TO_DO = {
    EXIT_DISK_FULL: "the disk holding {out} is full ({detail}): free some space and run the same command; what was "
                    "graded is kept",
    EXIT_NOT_WRITABLE: "{out} cannot be written ({detail}): make it writable, or pass another --out, and run the same "
                       "command; what was graded is kept",
    EXIT_BUSY: "another process holds {out}/gradebook.sqlite ({detail}): wait for it to end (or stop it) and run the "
               "same command; what was graded is kept",
    EXIT_CORRUPT: "{out}/gradebook.sqlite is damaged ({detail}): restore it from a copy, or move it aside to grade "
                  "the class again from scratch",
}


def machine_fault(exc: BaseException, out: Path) -> Fault | None:
    """The Fault `exc` is (a full disk, an output folder that cannot be written, a gradebook held or damaged),
    said of the output folder `out`; None when it is none of these."""
    status = None
    if isinstance(exc, sqlite3.Error):
        code = getattr(exc, "sqlite_errorcode", None)
        status = _SQLITE_STATUS.get(code & 0xFF) if isinstance(code, int) else None
        detail = str(exc)
    elif isinstance(exc, OSError):
        status = _ERRNO_STATUS.get(exc.errno) if exc.errno is not None else None
        detail = exc.strerror or str(exc)
        if exc.filename is not None:
            detail += f": {exc.filename}"
    if status is None:
        return None
    return Fault(status, _WHAT_TO_DO[status].format(out=out, detail=detail))


class Stopped(BaseException):
    """A signal asked the batch to stop: raised in its main thread wherever it was (as KeyboardInterrupt is), so
    that no `except Exception` takes it for a submission's failure; `signum`, the signal."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum

    @property
    def status(self) -> int:
        return SIGNALLED + self.signum


STOPPING = tuple(getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name))


@contextmanager
def stopped_by_signals() -> Iterator[None]:
    """Within: the first SIGINT, SIGTERM or SIGHUP raises Stopped in the main thread; any after it is ignored, the
    stop being under way. A SIGINT ignored by whoever started the process (a background job of a script) stops it
    all the same; a SIGHUP ignored (nohup) stays ignored. The handlers before are put back at the end."""
    raised: list[int] = []

    def stop(signum, frame) -> None:
        if not raised:
            raised.append(signum)
            raise Stopped(signum)

    previous = {}
    for signum in STOPPING:
        if signum == getattr(signal, "SIGHUP", None) and signal.getsignal(signum) == signal.SIG_IGN:
            continue
        previous[signum] = signal.signal(signum, stop)
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler if handler is not None else signal.SIG_DFL)


def stopped_line(done: int, total: int) -> str:
    """What a stopped batch says."""
    if not total:
        return "stopped before any submission was graded; the same command resumes"
    return f"stopped after {done} of {total}; the same command resumes"
