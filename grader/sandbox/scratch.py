"""The grading's scratch folder on the host: made private, held by a lock while in use, and swept when stale.

A grading killed with -9 cannot remove its folder; the next grading on the machine can, once it sees that
no process holds that folder's lock any more (flock dies with its holder, whatever ends it).

At the basic level as root there is no box: the exercise folders stay on the host, and the worker hands each
one to the grading's uid while its exercise runs (grader/worker/jail.py `hand_over`). The scratch folder is
lent for the grading alone: its uid's group (a group of that uid's own) may pass through it, nobody may list
it, and every folder and file in it is its owner's only (`lend`); at the end it is closed again (`take_back`),
before that uid can serve another grading. A concurrent classmate's uid reaches none of it.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import time
from pathlib import Path

from grader.sandbox.private import OWNER_ONLY, seal

PREFIX = "grader-"
LOCK = ".lock"
# mkdtemp's names: the prefix and eight characters. `grader-ref-` folders (the reference runs) hold no lock.
STALE_NAME = re.compile(r"^grader-(ref-)?[a-z0-9_]{8}$")
UNLOCKED_GRACE_S = 600.0   # a folder without a lock is someone's only if it is younger than this
_held: dict[Path, int] = {}


def new_scratch() -> Path:
    """A fresh private folder under the temporary folder, locked until `remove_scratch`; stale ones go first."""
    import fcntl   # POSIX only: importing this module must work anywhere (`grader check` on Windows)

    sweep(Path(tempfile.gettempdir()))
    folder = Path(tempfile.mkdtemp(prefix=PREFIX))
    fd = os.open(folder / LOCK, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    _held[folder] = fd
    return folder


def lend(folder: Path, uid: int) -> None:
    """Lend the scratch `folder` to the grading's `uid` (whose group is its own): it may pass through (0710,
    group `uid`) to the exercise folder it is handed, and list nothing. Called before any of its code runs, so
    everything in the folder is still the grader's own, and made so (0700 folders, 0600 files)."""
    seal(folder)
    os.chown(folder, os.geteuid(), uid)
    os.chmod(folder, 0o710)


def take_back(folder: Path) -> None:
    """Close the scratch `folder` to every other uid again (a no-op unless it was lent): what an exercise killed
    halfway still leaves its uid's own becomes unreachable before that uid serves anyone else."""
    try:
        os.chown(folder, os.geteuid(), os.getegid())
        os.chmod(folder, OWNER_ONLY)
    except FileNotFoundError:   # already removed: nothing is left to reach
        pass


def remove_scratch(folder: Path) -> None:
    shutil.rmtree(folder, ignore_errors=True)
    fd = _held.pop(folder, None)
    if fd is not None:
        os.close(fd)


def sweep(parent: Path) -> list[Path]:
    """Remove this user's scratch folders that no living grading holds; return them."""
    removed: list[Path] = []
    try:
        names = os.listdir(parent)
    except OSError:
        return removed
    for name in names:
        folder = parent / name
        if not STALE_NAME.match(name) or folder in _held:
            continue
        try:
            info = os.lstat(folder)
        except OSError:
            continue
        if info.st_uid != os.geteuid() or not os.path.isdir(folder) or os.path.islink(folder):
            continue
        if _abandoned(folder, info.st_mtime):
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(folder)
    return removed


def _abandoned(folder: Path, mtime: float) -> bool:
    try:
        fd = os.open(folder / LOCK, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return time.time() - mtime > UNLOCKED_GRACE_S
    except OSError:
        return False
    import fcntl

    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False
    finally:
        os.close(fd)
