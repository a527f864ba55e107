"""Copy the one file an exercise needs from a submission into a fresh scratch folder, refusing what is unsafe.

Only the exercise's contract file is copied (no conftest.py, sitecustomize.py, .pth or torch.py can come
along). A link in any component below the submission, oversized files and text that is not UTF-8 are
refused with a message instead of copied.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from grader.nolinks import ABSENT, LINK, NOT_REGULAR, read_without_links

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
        # Read past the cap by one byte, so that a file grown since its size was taken is still caught.
        found = read_without_links(submission, (exercise_id, filename), MAX_SOURCE_BYTES + 1)
    except OSError as exc:
        return Staged(None, "error", f"{shown} cannot be read: {exc.strerror}")
    if found.kind == LINK:
        return Staged(None, "error", f"`{found.link}` is a symbolic link: submit plain files")
    if found.not_folder:
        return Staged(None, "error", f"{found.not_folder} is not a folder")
    if found.kind == ABSENT:
        return Staged(None, "not_attempted", f"{shown} is not in the submission")
    if found.kind == NOT_REGULAR:
        return Staged(None, "error", f"{shown} is not a regular file")
    if found.size > MAX_SOURCE_BYTES:
        return Staged(None, "error", f"{shown} is {found.size:,} bytes; a source file may be at most {MAX_SOURCE_BYTES:,}")
    data = found.data
    if len(data) > MAX_SOURCE_BYTES:
        return Staged(None, "error", f"{shown} is larger than {MAX_SOURCE_BYTES:,} bytes; a source file may be at most that")
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
