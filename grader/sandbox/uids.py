"""One uid per concurrent grading, from a configured range (as ioi/isolate gives each box its own uid).

Processes, RLIMIT_NPROC and files of one grading then never meet another's: a fork bomb in one submission
spends only its own uid's process budget. A uid is held through an flock on a file of its own, released
when the holder exits, however it exits; uids that name an account on this machine are skipped.
"""

from __future__ import annotations

import os
import signal
from dataclasses import dataclass

LOCK_FOLDERS = ("/run/lock/transformer-grader", "/tmp/transformer-grader-uids")
DEFAULT_UIDS = (61000, 61999)   # course.toml's `[sandbox] uids` when it names none: a thousand concurrent gradings


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
        fd = _lock(folder, uid)
        if fd is None:
            continue
        if uid in _running_uids():   # held by nobody until now: whatever runs as it is left over
            _kill_all_of(uid)
        return UidClaim(uid, fd)
    raise NoFreeUid(f"all {last - first + 1} grading uids ({first}-{last}) are in use; widen [sandbox] "
                    "uids in course.toml")


def sweep(first: int, last: int) -> None:
    """Kill what runs as any uid of [first, last] that no grading holds: a grading killed with -9 (or its warm
    process) may have left student processes there that nothing else ends."""
    try:
        folder = _lock_folder()
    except NoFreeUid:
        return
    for uid in _running_uids() & set(range(first, last + 1)):
        fd = _lock(folder, uid)
        if fd is None:
            continue   # a grading holds it: its processes are its own
        try:
            _kill_all_of(uid)
        finally:
            os.close(fd)


def _lock(folder: str, uid: int) -> int | None:
    """The uid's lock file, held by this process from now on; None when another process holds it."""
    import fcntl   # POSIX only: importing this module must work anywhere (`grader check` on Windows)

    fd = os.open(os.path.join(folder, f"{uid}.lock"), os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def _kill_all_of(uid: int) -> None:
    """Kill every process running as `uid`, which the caller holds. As in isolate, a process of that uid does it
    (kill -1 from it reaches every process of the uid at once, a forking one included), not a scan that forks
    could outrun."""
    pid = os.fork()
    if pid == 0:   # only system calls here: the caller may have threads, which the child does not inherit
        try:
            os.setgroups([])
            os.setresgid(uid, uid, uid)
            os.setresuid(uid, uid, uid)
            os.kill(-1, signal.SIGKILL)   # every process this uid may signal, never the caller itself
        finally:
            os._exit(0)
    os.waitpid(pid, 0)


def _running_uids() -> set[int]:
    """The real uids of this machine's live processes (in this pid namespace; zombies are already dead)."""
    found = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/status", "rb") as fh:
                    fields = dict(line.split(b":", 1) for line in fh if line[:4] in (b"Stat", b"Uid:"))
                if not fields[b"State"].strip().startswith(b"Z"):
                    found.add(int(fields[b"Uid"].split()[0]))
            except (OSError, ValueError, IndexError, KeyError):
                continue
    return found


def _lock_folder() -> str:
    """A root-only folder for the lock files (only root switches uids, so only root needs it)."""
    for folder in LOCK_FOLDERS:
        parent = os.path.dirname(folder)
        if not os.path.isdir(parent):
            continue
        os.makedirs(folder, mode=0o700, exist_ok=True)
        info = os.lstat(folder)
        if (info.st_uid == os.geteuid() and not info.st_mode & 0o077 and os.path.isdir(folder)
                and not os.path.islink(folder)):
            return folder
    raise NoFreeUid("no private folder for the grading uids' lock files (tried " + ", ".join(LOCK_FOLDERS) + ")")


def _is_account(uid: int) -> bool:
    import pwd

    try:
        pwd.getpwuid(uid)
        return True
    except KeyError:
        return False
