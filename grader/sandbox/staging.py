"""Copy the one file an exercise needs from a submission into a fresh scratch folder, refusing what is unsafe.

Only the exercise's contract file is copied (no conftest.py, sitecustomize.py, .pth or torch.py can come
along). Links, oversized files and text that is not UTF-8 are refused with a message instead of copied.
"""

from __future__ import annotations

import os
import shutil
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
    source = submission / exercise_id / filename
    shown = f"{exercise_id}/{filename}"
    try:
        info = os.lstat(source)
    except FileNotFoundError:
        return Staged(None, "not_attempted", f"{shown} is not in the submission")
    except OSError as exc:
        return Staged(None, "error", f"{shown} cannot be read: {exc.strerror}")
    if stat.S_ISLNK(info.st_mode):
        return Staged(None, "error", f"{shown} is a symbolic link; submit the file itself")
    if not stat.S_ISREG(info.st_mode):
        return Staged(None, "error", f"{shown} is not a regular file")
    if info.st_size > MAX_SOURCE_BYTES:
        return Staged(None, "error", f"{shown} is {info.st_size:,} bytes; a source file may be at most {MAX_SOURCE_BYTES:,}")
    fd = os.open(source, os.O_RDONLY | os.O_NOFOLLOW)
    with os.fdopen(fd, "rb") as fh:
        data = fh.read(MAX_SOURCE_BYTES + 1)
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


def _same_code(a: bytes, b: bytes) -> bool:
    """Equal but for line endings and trailing white space."""
    def norm(x: bytes) -> list[bytes]:
        return [line.rstrip() for line in x.replace(b"\r\n", b"\n").strip().split(b"\n")]
    return norm(a) == norm(b)


def remove_tree(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)
