"""Names and limits shared by the worker (which writes observations) and the judge (which reads them), and by
everything between: the supervisor, the plain route, the report.

Every name that crosses a pipe or lands in a report is defined here once, as a `StrEnum`: its members are the
strings themselves (`Limit.TIME == "time"`, `json.dumps` writes `"time"`), so the JSON on every pipe and in every
report is what it was when they were plain strings. The worker imports this module inside the box: the standard
library only.
"""

from __future__ import annotations

import os
import re
import stat
from dataclasses import asdict, dataclass, fields
from enum import StrEnum
from typing import Any

# Open flags POSIX has and Windows lacks (0 there), and the one Windows needs so that a descriptor reads and
# writes bytes as they are (no line-ending translation); whether files can be opened relative to a folder's
# descriptor (not on Windows, where `grader check` runs the plain route on the student's own files).
NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
BINARY = getattr(os, "O_BINARY", 0)
RELATIVE_OPEN = os.open in os.supports_dir_fd and hasattr(os, "O_DIRECTORY")

# One probe's observation is `<probe>.json` (written last: its presence means the probe finished)
# and, when it recorded tensors, `<probe>.safetensors`.
JSON_SUFFIX = ".json"
TENSOR_SUFFIX = ".safetensors"
IMPORT_PROBE = "_import"

# The two pipes between the worker and each child it forks (grader/worker/__main__.py says why).
# Worker -> child, one line to start each step (the import's observation, then each probe), sent when the child asks
# (so that no step waits in the pipe while student code runs), and the pipe closed when no step is left:
#   <token> <probe> <seed>
# Child -> worker, lines, and after a result line exactly the bytes it announces:
STARTED = b"started"   # written right before the student's import: a child that ends abnormally without it failed
                       # in the grader's own code
NEXT = b"next"         # the child asks for its next step
OP = b"op "            # op <aten operator>: one reached torch's dispatcher (exercises with forbidden operators)
CALL = b"call "        # call <dotted name>: a forbidden Python-level API was called
RESULT = b"result "    # result <token> <json bytes> <tensor bytes>: the step's observation follows
MAX_LINE = 512         # a line longer than this is not the runner's

# Fork server -> supervisor (grader/worker/spawn.py, grader/sandbox/forkserver.py): its first word, then torch's
# version.
SERVER_READY = b"ready"


def hook_name(line: bytes) -> str | None:
    """The name an `op <name>` or `call <name>` line reports (a forbidden-API hook wrote it), None for any other
    line. The worker reads these lines on a child's result pipe, the plain route from its child's log."""
    if not line.startswith((OP, CALL)):
        return None
    return line.split(b" ", 1)[1].decode("ascii", "replace")


class Event(StrEnum):
    """What the worker reports on its control pipe, one JSON object a line, `{"event": <Event>, ...}`; the plain
    route's child reports READY and DONE the same way on its stdout."""

    READY = "ready"         # torch is imported: the worker waits for its exercises
    START = "start"         # an exercise's clock starts (`id`)
    CHILD = "child"         # a child was forked (`pid`): the supervisor kills its process group with the sandbox
    ACKS = "acks"           # after each probe group: the digests of the files written, the forbidden APIs seen
    DONE = "done"           # an exercise ended: exit status, signal, limit, output, resources
    FINISHED = "finished"   # every exercise of the request is done


class Limit(StrEnum):
    """The limit that ended an exercise's run (`Run.limit`) or a probe (its error's `limit`), as reports name it."""

    TIME = "time"             # the exercise's wall clock (`Limits.timeout_s`)
    CPU = "cpu"               # RLIMIT_CPU (SIGXCPU)
    OUTPUT = "output"         # it printed more than `Limits.output_kb`
    FILE_SIZE = "file_size"   # a file past FILE_SIZE_LIMIT (RLIMIT_FSIZE: SIGXFSZ, or EFBIG in Python)
    MEMORY = "memory"         # `Limits.memory_mb`: an allocation failed, or the memory group's limit killed it
    DISK = "disk"             # the exercise's scratch is full (`Limits.disk_mb`, `Limits.files`)


@dataclass(frozen=True)
class Limits:
    """What one exercise's run may take. course.toml's `[defaults]` and each `[[exercise]]` set any of these; the
    supervisor sends them to the worker as they are, and the judge phrases its messages from them."""

    timeout_s: float = 60.0   # wall-clock seconds for all probes of the exercise, its import included
    memory_mb: int = 3072     # what its code may add to the worker it is forked from (torch is there already)
    output_kb: int = 1024     # what its code may print before it is stopped (the report keeps the last 4 KB)
    disk_mb: int = 256        # its scratch (its folder, /tmp, /dev/shm): the size of its tmpfs
    files: int = 4096         # how many files and folders that scratch may hold

    @classmethod
    def from_table(cls, table: dict) -> Limits:
        """The limits a table names (course.toml's, or a request's), each as its field's type; the rest default.
        Raises TypeError or ValueError on a value that is not a number."""
        made: dict[str, Any] = {f.name: (float if f.type == "float" else int)(table[f.name]) for f in fields(cls)
                                if f.name in table}
        return cls(**made)

    def to_dict(self) -> dict:
        return asdict(self)


MAX_JSON_BYTES = 1 << 20          # one probe's JSON
MAX_TENSOR_BYTES = 64 << 20       # one probe's safetensors file
FILE_SIZE_LIMIT = 96 << 20        # any file student code writes (RLIMIT_FSIZE); no probe needs more
NAME_PATTERN = re.compile(r"^[A-Za-z0-9_.\-]{1,80}$")


class ProbeStatus(StrEnum):
    """A probe's `status` in its observation, written by the runner."""

    OK = "ok"                            # the probe ran to its end
    RAISED = "raised"                    # student code raised out of the probe
    NOT_IMPLEMENTED = "not_implemented"  # the student's function is still the stub's `raise NotImplementedError`
    GRADER_FAULT = "grader_fault"        # a probe raised on its own, in no student call: the grader's bug


FORBIDDEN_KEY = "forbidden_calls"


class Status(StrEnum):
    """A criterion's status in the report (an exercise's too, which may also be report.model.PARTIAL); schema.json's
    enum and every renderer's labels follow it."""

    PASSED = "passed"
    FAILED = "failed"                # the code ran, and did not do what the contract asks
    ERROR = "error"                  # the code raised where the contract asks it to return
    NOT_ATTEMPTED = "not_attempted"  # the stub is untouched, or the file is missing
    TIMEOUT = "timeout"              # the run's wall clock or CPU time ended before the criterion's probe did
    CRASHED = "crashed"              # the process died first (a signal, or its memory, output or disk limit)
    BLOCKED = "blocked"              # a criterion this one needs did not pass
    GRADER_ERROR = "grader_error"    # the grader, not the student, failed: no point taken, graded again


def read_capped(directory: str | os.PathLike, name: str, cap: int) -> bytes | None:
    """A regular file's bytes, opened without following links, or None when the name is not an observation's,
    or the file is absent, a link, not a regular file (a FIFO is opened without blocking), or too large. The
    worker copies observations out of the box with it and the judge reads them with it."""
    if not NAME_PATTERN.match(name):
        return None
    try:
        fd = _open_for_reading(directory, name)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as fh:
        info = os.fstat(fh.fileno())
        if not stat.S_ISREG(info.st_mode) or info.st_size > cap:
            return None
        return fh.read(info.st_size + 1)   # not cap + 1: that would allocate the whole cap for any file


def write_new(name: str, data: bytes, dir_fd: int | None = None) -> None:
    """Write a file that must not exist yet (nor be a link), relative to `dir_fd` when given: the worker writes
    observations into a folder it holds as a descriptor, the plain route by path, on any system."""
    fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | NOFOLLOW | BINARY, 0o644, dir_fd=dir_fd)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)


def _open_for_reading(directory: str | os.PathLike, name: str) -> int:
    """`name` in `directory`, neither of them a link, opened for reading (a FIFO without blocking)."""
    if not RELATIVE_OPEN:   # checked, then opened by path: no descriptor-relative open on this system
        path = os.path.join(directory, name)
        if os.path.islink(directory) or os.path.islink(path):
            raise OSError(f"{path} is a link")
        return os.open(path, os.O_RDONLY | BINARY)
    dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        return os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=dir_fd)
    finally:
        os.close(dir_fd)
