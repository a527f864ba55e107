"""One uid per concurrent grading, from a configured range (as ioi/isolate gives each box its own uid).

Processes, RLIMIT_NPROC and files of one grading then never meet another's: a fork bomb in one submission
spends only its own uid's process budget. A uid is held through an flock on a file of its own, released
when the holder exits, however it exits; uids that name an account on this machine are skipped.

What the kernel keeps per uid outlives a grading's namespaces (its keyrings above all): each uid is cleared
(grader/sandbox/reclaim.py) when it is claimed, so that a grading killed with -9 leaves nothing to its uid's next
one either, and again when it is released. A uid that cannot be cleared is quarantined: a file beside its lock says
why, the grading process says so on its standard error, and no grading is given it again until that file goes
(the lock folder is on a tmpfs, emptied at the machine's restart, which also clears the kernel's keyrings).
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass

LOCK_FOLDERS = ("/run/lock/transformer-grader", "/tmp/transformer-grader-uids")
DEFAULT_UIDS = (61000, 61999)   # course.toml's `[sandbox] uids` when it names none: a thousand concurrent gradings


QUARANTINED = ".quarantined"   # `<uid>.quarantined` beside `<uid>.lock`: what of the uid could not be cleared
_announced: set[int] = set()   # the quarantined uids this process has named on its standard error


class NoFreeUid(Exception):
    """Every uid of the range is held by another grading (or quarantined)."""


@dataclass
class UidClaim:
    uid: int
    fd: int
    folder: str = ""
    shared: bool = True   # its grading shares this machine's folders and IPC namespace (no box): cleared as well

    def release(self) -> None:
        """Clear what the grading left in the uid's name (quarantining the uid if some of it stays), then free it."""
        try:
            _clear_or_quarantine(self.folder, self.uid, self.shared)
        finally:
            os.close(self.fd)


def claim(first: int, last: int, shared: bool = True) -> UidClaim:
    """Hold the first free uid in [first, last] until `release` (or this process's end). `shared`: the grading
    shares this machine's world-writable folders and IPC namespace (the basic level), where what the uid owns is
    cleared too; a strict grading sees neither, and a basic one clears them before it runs."""
    folder = _lock_folder()
    set_aside = 0
    for uid in range(first, last + 1):
        if _is_account(uid):
            continue
        if os.path.exists(_quarantine_file(folder, uid)):
            set_aside += 1
            continue
        fd = _lock(folder, uid)
        if fd is None:
            continue
        try:
            # Held by nobody until now: whatever runs as it, or it owns, is left over (a grading killed with -9).
            cleared = _clear_or_quarantine(folder, uid, shared)
        except BaseException:
            os.close(fd)
            raise
        if cleared:
            return UidClaim(uid, fd, folder, shared)
        os.close(fd)
        set_aside += 1
    quarantine = (f" ({set_aside} of them quarantined, as {os.path.join(folder, '<uid>' + QUARANTINED)} says why)"
                  if set_aside else "")
    raise NoFreeUid(f"all {last - first + 1} grading uids ({first}-{last}) are in use{quarantine}; widen [sandbox] "
                    "uids in course.toml")


def sweep(first: int, last: int) -> None:
    """Kill what runs as any uid of [first, last] that no grading holds, and clear what it owns: a grading killed
    with -9 (or its warm process) may have left student processes there that nothing else ends. Then name the
    quarantined uids of the range not named yet by this process (a batch sweeps as its grading processes end: its
    gradings' own standard error is not the terminal's)."""
    try:
        folder = _lock_folder()
    except NoFreeUid:
        return
    from grader.sandbox.reclaim import running_uids   # Linux only: importing this module must work anywhere

    for uid in running_uids() & set(range(first, last + 1)):
        fd = _lock(folder, uid)
        if fd is None:
            continue   # a grading holds it: its processes are its own
        try:
            _clear_or_quarantine(folder, uid)
        finally:
            os.close(fd)
    for uid, reason in quarantined(first, last).items():
        if uid not in _announced:
            _announced.add(uid)
            _say(uid, reason, _quarantine_file(folder, uid))


def quarantined(first: int, last: int) -> dict[int, str]:
    """The quarantined uids of [first, last], each with what of it could not be cleared."""
    try:
        folder = _lock_folder()
    except NoFreeUid:
        return {}
    found = {}
    for uid in range(first, last + 1):
        try:
            with open(_quarantine_file(folder, uid), encoding="utf-8", errors="replace") as fh:
                found[uid] = fh.read(4096).strip()
        except OSError:
            continue
    return found


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


def _clear_or_quarantine(folder: str, uid: int, shared: bool = True) -> bool:
    """Clear what `uid` (held by the caller) left (grader/sandbox/reclaim.py); where something stays, quarantine the
    uid and say so. Whether it was cleared."""
    if not folder:
        return True   # a claim made without a lock folder: nothing to record
    from grader.sandbox import reclaim   # Linux only: importing this module must work anywhere

    left = reclaim.clear(uid, shared)
    if not left:
        return True
    reason = "; ".join(left)
    path = _quarantine_file(folder, uid)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(reason + "\n")
    _announced.add(uid)
    _say(uid, reason, path)
    return False


def _say(uid: int, reason: str, path: str) -> None:
    print(f"grader: grading uid {uid} is quarantined, no grading gets it again ({reason}); remove {path} once "
          "that is cleared", file=sys.stderr, flush=True)


def _quarantine_file(folder: str, uid: int) -> str:
    return os.path.join(folder, f"{uid}{QUARANTINED}")


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
