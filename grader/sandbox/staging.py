"""Copy the one file an exercise needs from a submission into a fresh scratch folder, refusing what is unsafe.

Only the exercise's contract file is copied (no conftest.py, sitecustomize.py, .pth or torch.py can come
along). A link in any component below the submission, oversized files and text that is not UTF-8 are
refused with a message instead of copied. Where that file is missing or still the stub, a notebook holding the
exercise's code (grader/grading/notebooks.py) is staged as that file instead. `graded_code` is that choice, made
once: the content hash and the similarity check read the code it takes, whichever file it came from.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from grader.i18n import Text, t, verbatim
from grader.nolinks import ABSENT, LINK, NOT_REGULAR, read_without_links
from grader.worker.protocol import BINARY, NOFOLLOW, Status

MAX_SOURCE_BYTES = 1 << 20


@dataclass(frozen=True)
class Staged:
    """The outcome of staging one exercise: a file ready in scratch, or a status and the reason."""

    path: Path | None
    status: Status | None = None   # None when staged; `not_attempted` or `error` otherwise
    message: Text | None = None


@dataclass(frozen=True)
class Graded:
    """The code an exercise is graded on (`data`) and where it was taken from (`source`, as the student names it:
    the exercise's file or a notebook), or the status and the reason why nothing of it is graded."""

    source: str
    data: bytes | None
    status: Status | None = None
    message: Text | None = None

    @property
    def from_notebook(self) -> bool:
        from grader.grading.notebooks import SUFFIX

        return self.source.endswith(SUFFIX)


def stage(submission: Path, exercise_id: str, filename: str, stub: Path, workdir: Path) -> Staged:
    graded = graded_code(submission, exercise_id, filename, stub)
    if graded.data is None:
        return Staged(None, graded.status, graded.message)
    return _write(graded.data, workdir, filename)


def graded_code(submission: Path, exercise_id: str, filename: str, stub: Path) -> Graded:
    """What staging takes for an exercise, and all that it takes: the one source of the code graded, which the
    content hash and the similarity check read too."""
    shown = f"{exercise_id}/{filename}"

    def refused(status: Status, message: Text) -> Graded:
        return Graded(shown, None, status, message)

    try:
        # Read past the cap by one byte, so that a file grown since its size was taken is still caught.
        found = read_without_links(submission, (exercise_id, filename), MAX_SOURCE_BYTES + 1)
    except OSError as exc:
        return refused(Status.ERROR, t("{file} cannot be read: {error}", file=shown, error=verbatim(exc.strerror)))
    if found.kind == LINK:
        return refused(Status.ERROR, t("`{link}` is a symbolic link: submit plain files", link=found.link))
    if found.not_folder:
        return refused(Status.ERROR, t("{path} is not a folder", path=found.not_folder))
    if found.kind == ABSENT:
        return (_from_notebook(submission, exercise_id, stub)
                or refused(Status.NOT_ATTEMPTED, t("{file} is not in the submission", file=shown)))
    if found.kind == NOT_REGULAR:
        return refused(Status.ERROR, t("{file} is not a regular file", file=shown))
    if found.size > MAX_SOURCE_BYTES:
        return refused(Status.ERROR, t("{file} is {size:,} bytes; a source file may be at most {most:,}",
                                       file=shown, size=found.size, most=MAX_SOURCE_BYTES))
    data = found.data
    if len(data) > MAX_SOURCE_BYTES:
        return refused(Status.ERROR, t("{file} is larger than {most:,} bytes; a source file may be at most that",
                                       file=shown, most=MAX_SOURCE_BYTES))
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as exc:
        return refused(Status.ERROR, t("{file} is not UTF-8 text (byte 0x{byte:02x} at offset {offset}); save it as "
                                       "UTF-8", file=shown, byte=data[exc.start], offset=exc.start))
    if stub.is_file() and _same_code(data, stub.read_bytes()):
        return (_from_notebook(submission, exercise_id, stub)
                or refused(Status.NOT_ATTEMPTED, t("{file} is the unchanged stub", file=shown)))
    return Graded(shown, data)


def _write(data: bytes, workdir: Path, filename: str) -> Staged:
    # The grader's own until the worker hands the folder to the grading's uid: at the basic level the scratch is
    # on the host, and a classmate's code must not read it (the modes are set whatever the umask).
    workdir.mkdir(parents=True, exist_ok=True)
    os.chmod(workdir, 0o700)
    target = workdir / filename
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | NOFOLLOW | BINARY, 0o600)
    with os.fdopen(fd, "wb") as fh:
        if hasattr(os, "fchmod"):   # not on Windows, whose modes say nothing of other users
            os.fchmod(fd, 0o600)
        fh.write(data)
    return Staged(target)


def _from_notebook(submission: Path, exercise_id: str, stub: Path) -> Graded | None:
    """The exercise's code from a notebook of the submission; None when no notebook has it."""
    from grader.grading.notebooks import notebook_code

    found = notebook_code(submission, exercise_id)
    if found is None:
        return None
    if found.problem is not None:
        return Graded(found.source, None, Status.ERROR, found.problem)
    data = found.code or b""
    if not data.strip():
        return Graded(found.source, None, Status.NOT_ATTEMPTED, t("{file} holds no code for `{id}`",
                                                                  file=found.source, id=exercise_id))
    if len(data) > MAX_SOURCE_BYTES:
        return Graded(found.source, None, Status.ERROR,
                      t("the code cells of {file} are {size:,} bytes; a source file may be at most {most:,}",
                        file=found.source, size=len(data), most=MAX_SOURCE_BYTES))
    if stub.is_file() and _same_code(data, stub.read_bytes()):
        return Graded(found.source, None, Status.NOT_ATTEMPTED, t("{file} holds the unchanged stub",
                                                                  file=found.source))
    return Graded(found.source, data)


def _same_code(a: bytes, b: bytes) -> bool:
    """Equal but for line endings and trailing white space."""
    def norm(x: bytes) -> list[bytes]:
        return [line.rstrip() for line in x.replace(b"\r\n", b"\n").strip().split(b"\n")]
    return norm(a) == norm(b)
