"""One uid per concurrent grading, from a configured range (as ioi/isolate gives each box its own uid).

Processes, RLIMIT_NPROC and files of one grading then never meet another's: a fork bomb in one submission
spends only its own uid's process budget. A uid is held through an flock on a file of its own, released
when the holder exits, however it exits; uids that name an account on this machine are skipped.
"""

from __future__ import annotations

import fcntl
import os
import pwd
from dataclasses import dataclass

LOCK_FOLDERS = ("/run/lock/transformer-grader", "/tmp/transformer-grader-uids")


class NoFreeUid(Exception):
    """Every uid of the range is held by another grading."""


@dataclass
class UidClaim:
    uid: int
    fd: int

    def release(self) -> None:
        os.close(self.fd)


def claim(first: int, last: int) -> UidClaim:
    """Hold the first free uid in [first, last] until `release` (or this process's end)."""
    folder = _lock_folder()
    for uid in range(first, last + 1):
        if _is_account(uid):
            continue
        fd = os.open(os.path.join(folder, f"{uid}.lock"), os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        return UidClaim(uid, fd)
    raise NoFreeUid(f"all {last - first + 1} grading uids ({first}-{last}) are in use; widen [sandbox] uids in course.toml")


def _lock_folder() -> str:
    """A root-only folder for the lock files (only root switches uids, so only root needs it)."""
    for folder in LOCK_FOLDERS:
        parent = os.path.dirname(folder)
        if not os.path.isdir(parent):
            continue
        os.makedirs(folder, mode=0o700, exist_ok=True)
        info = os.lstat(folder)
        if info.st_uid == os.geteuid() and not info.st_mode & 0o077 and os.path.isdir(folder) and not os.path.islink(folder):
            return folder
    raise NoFreeUid("no private folder for the grading uids' lock files (tried " + ", ".join(LOCK_FOLDERS) + ")")


def _is_account(uid: int) -> bool:
    try:
        pwd.getpwuid(uid)
        return True
    except KeyError:
        return False
