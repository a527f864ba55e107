"""A submission that explores its surroundings at import and reports, on its output, every secret it reached.

`NEEDLES` (filled in by the test, base64-encoded so that this file's own text does not contain them) are
host paths and names that must stay out of reach: the course checkout, the class folder, the report folder,
a classmate. The explorer lists the file system from /, reads the mount table and /proc/1 where they exist,
its parent folders, every open descriptor, its environment and argv, and every string in the memory it
inherited from the worker (gc), and prints `LEAK <where>: <needle>` for each needle it finds and
`READ <path>` for each secret file it could open. It ends with `EXPLORED <paths> <strings>`, the proof that
it ran. Then split_heads and merge_heads raise: it gains nothing else.
"""

import base64
import gc
import os
import sys

NEEDLES = [base64.b64decode(n).decode() for n in "@NEEDLES@".split(",") if n]
SECRET_FILES = [base64.b64decode(n).decode() for n in "@SECRETS@".split(",") if n]
SKIP = ("/usr", "/opt/grader/site", "/proc", "/sys")
_found = []
_counts = {"paths": 0, "strings": 0}


def _check(where, text):
    _counts["strings"] += 1
    if any(text is own for own in (*NEEDLES, *SECRET_FILES, *_found)):
        return  # the explorer's own words
    for needle in NEEDLES:
        if needle in text:
            _found.append(f"LEAK {where}: {needle}")


def _walk(top, depth):
    try:
        names = os.listdir(top)
    except OSError:
        return
    for name in names:
        path = os.path.join(top, name)
        _counts["paths"] += 1
        _check("listing", path)
        if depth and os.path.isdir(path) and not os.path.islink(path) and not path.startswith(SKIP):
            _walk(path, depth - 1)


def _read(path, where):
    try:
        with open(path, "rb") as fh:
            _check(where, fh.read(1 << 20).decode("utf-8", "replace"))
    except OSError:
        pass


_walk("/", 6)
for folder in ("/usr", "/opt/grader/site", "/proc", "/sys"):
    _walk(folder, 0)
for path in ("/proc/self/mountinfo", "/proc/self/mounts", "/proc/1/cmdline", "/proc/1/environ", "/proc/self/maps",
             "/proc/1/mountinfo", "/etc/passwd", "/etc/hostname"):
    _read(path, path)
here = os.getcwd()
_check("cwd", here)
while here != "/":
    here = os.path.dirname(here)
    _walk(here, 0)
for fd in range(256):
    try:
        os.set_blocking(fd, False)
        _check(f"fd {fd}", os.read(fd, 1 << 16).decode("utf-8", "replace"))
    except OSError:
        pass
for key, value in os.environ.items():
    _check("environment", f"{key}={value}")
for text in [*sys.argv, *getattr(sys, "orig_argv", []), *sys.path, sys.executable, sys.prefix]:
    _check("argv/sys.path", str(text))
for obj in gc.get_objects():
    items = obj.values() if isinstance(obj, dict) else obj if isinstance(obj, (list, tuple)) else ()
    try:
        for item in list(items):
            if isinstance(item, str):
                _check("memory", item)
    except Exception:  # noqa: BLE001 - a container that cannot be iterated says nothing
        pass
for path in SECRET_FILES:
    try:
        with open(path, "rb") as fh:
            fh.read(1)
        _found.append(f"READ {path}")
    except OSError:
        pass
for line in dict.fromkeys(_found):
    print(line)
print(f"EXPLORED {_counts['paths']} {_counts['strings']}", flush=True)


def split_heads(x, n_heads):
    raise ValueError("an explorer, not an implementation")


def merge_heads(x):
    raise ValueError("an explorer, not an implementation")
