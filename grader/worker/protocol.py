"""Names and limits shared by the worker (which writes observations) and the judge (which reads them)."""

import os
import re
import stat

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
        dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError:
        return None
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=dir_fd)
    except OSError:
        return None
    finally:
        os.close(dir_fd)
    with os.fdopen(fd, "rb") as fh:
        info = os.fstat(fh.fileno())
        if not stat.S_ISREG(info.st_mode) or info.st_size > cap:
            return None
        return fh.read(cap + 1)
