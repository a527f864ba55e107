"""Names and limits shared by the worker (which writes observations) and the judge (which reads them)."""

import os
import re
import stat

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
        return fh.read(info.st_size + 1)   # not cap + 1: that would allocate the whole cap for any file
