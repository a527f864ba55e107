"""Reading a file of a student's upload without ever following a symbolic link on the way.

A link anywhere in the path (`alice/ex1 -> ../bob/ex1`, `exercises -> /autograder/source/solutions`,
`ex1 -> /proc/self/cwd/solutions/ex1`) would make the grader read someone else's file as the student's.
Each component is opened relative to its parent's descriptor with O_NOFOLLOW, so a link swapped in between a
check and the open is refused too.
"""

from __future__ import annotations

import errno
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from grader.worker.protocol import BINARY, RELATIVE_OPEN

ABSENT, LINK, NOT_REGULAR, REGULAR = "absent", "link", "not_regular", "regular"


@dataclass(frozen=True)
class Lookup:
    """What lies at a relative path: `kind` is one of the four above; `link` names the first component that is
    a link; `not_folder` the component that should have been a folder and is not (the path is then absent);
    `data` holds at most the bytes asked for of a regular file, and `size` its size when opened."""

    kind: str
    link: str = ""
    data: bytes = b""
    size: int = 0
    not_folder: str = ""


def read_without_links(root: Path, parts: tuple[str, ...] | list[str], max_bytes: int) -> Lookup:
    """The file at root/parts[0]/.../parts[-1], read only when no component after `root` is a link."""
    if not RELATIVE_OPEN:
        return _read_by_path(root, parts, max_bytes)
    opened = [os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)]
    try:
        for i, name in enumerate(parts):
            shown = "/".join(parts[: i + 1])
            try:
                info = os.stat(name, dir_fd=opened[-1], follow_symlinks=False)
            except (FileNotFoundError, NotADirectoryError):
                return Lookup(ABSENT)
            if stat.S_ISLNK(info.st_mode):
                return Lookup(LINK, shown)
            last = i == len(parts) - 1
            if not last and not stat.S_ISDIR(info.st_mode):
                return Lookup(ABSENT, not_folder=shown)
            if last and not stat.S_ISREG(info.st_mode):
                return Lookup(NOT_REGULAR)
            # O_NONBLOCK: a FIFO swapped in after the check must not hang the open.
            flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | (os.O_NONBLOCK if last else os.O_DIRECTORY)
            try:
                opened.append(os.open(name, flags, dir_fd=opened[-1]))
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR):  # replaced by a link since the check
                    return Lookup(LINK, shown)
                raise
        info = os.fstat(opened[-1])
        if not stat.S_ISREG(info.st_mode):
            return Lookup(NOT_REGULAR)
        return Lookup(REGULAR, data=_read(opened[-1], max_bytes), size=info.st_size)
    finally:
        for fd in opened:
            os.close(fd)


def _read_by_path(root: Path, parts: tuple[str, ...] | list[str], max_bytes: int) -> Lookup:
    """The same, where the system opens nothing relative to a folder's descriptor (Windows): each component is
    checked, then the file is opened by its path. A link swapped in between the two goes unseen; this serves
    `grader check` on a student's own machine, where the files at stake are the student's own."""
    path = Path(root)
    is_junction = getattr(os.path, "isjunction", lambda _: False)   # Windows' folder links (Python 3.12+)
    for i, name in enumerate(parts):
        shown = "/".join(parts[: i + 1])
        path = path / name
        try:
            info = os.lstat(path)
        except (FileNotFoundError, NotADirectoryError):
            return Lookup(ABSENT)
        if stat.S_ISLNK(info.st_mode) or is_junction(path):
            return Lookup(LINK, shown)
        last = i == len(parts) - 1
        if not last and not stat.S_ISDIR(info.st_mode):
            return Lookup(ABSENT, not_folder=shown)
        if last and not stat.S_ISREG(info.st_mode):
            return Lookup(NOT_REGULAR)
    fd = os.open(path, os.O_RDONLY | BINARY)
    try:
        return Lookup(REGULAR, data=_read(fd, max_bytes), size=os.fstat(fd).st_size)
    finally:
        os.close(fd)


def _read(fd: int, max_bytes: int) -> bytes:
    chunks, left = [], max_bytes
    while left > 0 and (chunk := os.read(fd, min(left, 1 << 16))):
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def links_under(root: Path) -> list[str]:
    """Every link below `root` (relative, in walk order), none of them followed."""
    found = []
    for folder, dirs, files in os.walk(root):  # os.walk lists links to folders but does not enter them
        for name in sorted(dirs) + sorted(files):
            if os.path.islink(os.path.join(folder, name)):
                found.append(os.path.relpath(os.path.join(folder, name), root))
    return found
