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
        return fh.read(info.st_size + 1)   # not cap + 1: that would allocate the whole cap for any file


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
