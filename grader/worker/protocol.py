"""Names and limits shared by the worker (which writes observations) and the judge (which reads them)."""

import os
import re
import stat

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
# What a child's runner writes on its acknowledgement pipe right before it imports the student's file: a child
# that ends abnormally without it failed in the grader's own code.
STARTED = b"started"

MAX_JSON_BYTES = 1 << 20          # one probe's JSON
MAX_TENSOR_BYTES = 64 << 20       # one probe's safetensors file
FILE_SIZE_LIMIT = 96 << 20        # any file student code writes (RLIMIT_FSIZE); no probe needs more
NAME_PATTERN = re.compile(r"^[A-Za-z0-9_.\-]{1,80}$")

# Probe status values written by the worker.
OK = "ok"                         # the probe ran to its end
RAISED = "raised"                 # student code raised out of the probe
NOT_IMPLEMENTED = "not_implemented"
GRADER_FAULT = "grader_fault"      # a probe raised on its own, in no student call: the grader's bug
FORBIDDEN_KEY = "forbidden_calls"


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
        return fh.read(cap + 1)


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
