"""Copy the one file an exercise needs from a submission into a fresh scratch folder, refusing what is unsafe.

Only the exercise's contract file is copied (no conftest.py, sitecustomize.py, .pth or torch.py can come
along). A link in any component below the submission, oversized files and text that is not UTF-8 are
refused with a message instead of copied.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path

MAX_SOURCE_BYTES = 1 << 20


@dataclass(frozen=True)
class Staged:
    """The outcome of staging one exercise: a file ready in scratch, or a status and the reason."""

    path: Path | None
    status: str | None = None   # None when staged; `not_attempted` or `error` otherwise
    message: str = ""


def stage(submission: Path, exercise_id: str, filename: str, stub: Path, workdir: Path) -> Staged:
    shown = f"{exercise_id}/{filename}"
    try:
        data = _read_without_links(submission, exercise_id, filename)
    except _Refused as refused:
        return Staged(None, refused.status, refused.message)
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as exc:
        return Staged(None, "error", f"{shown} is not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start}); save it as UTF-8")
    if stub.is_file() and _same_code(data, stub.read_bytes()):
        return Staged(None, "not_attempted", f"{shown} is the unchanged stub")
    workdir.mkdir(parents=True, exist_ok=True)
    target = workdir / filename
    target.write_bytes(data)
    return Staged(target)


class _Refused(Exception):
    def __init__(self, status: str, message: str):
        super().__init__(message)
        self.status, self.message = status, message


def _read_without_links(submission: Path, exercise_id: str, filename: str) -> bytes:
    """The file's bytes, each component below the submission opened without following a link: a link anywhere
    on the way (`rope -> ../classmate/rope`, `rope -> /proc/self/cwd/solutions/rope`) is refused, never read."""
    shown = f"{exercise_id}/{filename}"
    try:
        root = os.open(submission, os.O_RDONLY | os.O_DIRECTORY)
    except OSError as exc:
        raise _Refused("error", f"the submission folder cannot be read: {exc.strerror}") from None
    fds = [root]
    try:
        for name, is_last in ((exercise_id, False), (filename, True)):
            shown_here = exercise_id if not is_last else shown
            try:
                info = os.lstat(name, dir_fd=fds[-1])
            except FileNotFoundError:
                raise _Refused("not_attempted", f"{shown} is not in the submission") from None
            except OSError as exc:
                raise _Refused("error", f"{shown_here} cannot be read: {exc.strerror}") from None
            if stat.S_ISLNK(info.st_mode):
                raise _Refused("error", f"`{shown_here}` is a symbolic link: submit plain files")
            wanted = stat.S_ISREG if is_last else stat.S_ISDIR
            if not wanted(info.st_mode):
                raise _Refused("error", f"{shown_here} is not a {'regular file' if is_last else 'folder'}")
            flags = os.O_RDONLY | os.O_NOFOLLOW | (0 if is_last else os.O_DIRECTORY) | os.O_NONBLOCK
            try:
                fds.append(os.open(name, flags, dir_fd=fds[-1]))
            except OSError as exc:  # swapped for a link (ELOOP) or something else since the lstat
                raise _Refused("error", f"{shown_here} cannot be opened as a plain "
                                        f"{'file' if is_last else 'folder'}: {exc.strerror}") from None
        info = os.fstat(fds[-1])
        if not stat.S_ISREG(info.st_mode):
            raise _Refused("error", f"{shown} is not a regular file")
        if info.st_size > MAX_SOURCE_BYTES:
            raise _Refused("error", f"{shown} is {info.st_size:,} bytes; a source file may be at most {MAX_SOURCE_BYTES:,}")
        with os.fdopen(os.dup(fds[-1]), "rb") as fh:
            data = fh.read(MAX_SOURCE_BYTES + 1)
        if len(data) > MAX_SOURCE_BYTES:
            raise _Refused("error", f"{shown} is larger than {MAX_SOURCE_BYTES:,} bytes; a source file may be at most that")
        return data
    finally:
        for fd in fds:
            os.close(fd)


def _same_code(a: bytes, b: bytes) -> bool:
    """Equal but for line endings and trailing white space."""
    def norm(x: bytes) -> list[bytes]:
        return [line.rstrip() for line in x.replace(b"\r\n", b"\n").strip().split(b"\n")]
    return norm(a) == norm(b)
