"""What the strict sandbox's root holds: an allow-list, computed on the host, of the few things the worker needs.

The box (grader/sandbox/box.py) builds a fresh root from this plan: the system folders the interpreter and
its shared libraries live in, read-only; the packages the worker imports (torch, safetensors, numpy and
what they require), each bound read-only under one neutral folder; and a copy of the grader's worker code
(copied, not bound: nothing of the grader's checkout, its criteria or its compiled files goes in). No probe
module is in it: each exercise's child loads its own exercise's probe code, staged outside the box
(grader/sandbox/probe_plan.py), so no exercise's code can read another exercise's hidden probes.
Everything else of the host (the course, the class, the gradebook, /home, /srv, /run, other checkouts) is
simply absent. The plan names host paths; only the box reads it, before it pivots into the new root.
"""

from __future__ import annotations

import functools
import importlib.metadata
import importlib.util
import os
import re
import sys
from pathlib import Path

# Where things appear inside the box.
SITE = "/opt/grader/site"            # the worker's packages
LIB = "/opt/grader/lib"              # the grader's worker and probe code
SUBMISSION = "/submission"           # /submission/<exercise>/<file>.py while that exercise runs
SCRATCH = "/.scratch"                # the running exercise's capped tmpfs, bound to its folder, /tmp, /dev/shm
DEVICES = ("null", "zero", "full", "random", "urandom")
# Top-level system names that are symlinks into /usr on merged-/usr systems, or folders of their own.
SYSTEM_TOP = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")
WORKER_PACKAGES = ("torch", "safetensors", "numpy")
# what the worker imports of the grader package: the model handles and their wire format (grader/models), never the
# model process's code, which runs outside the box
GRADER_CODE = ("__init__.py", "worker", "probes/__init__.py", "models/__init__.py", "models/handles.py",
               "models/wire.py")


@functools.cache
def plan() -> dict:
    """The box's contents, for this interpreter and environment (the same for every grading of a process)."""
    interpreter = os.path.realpath(sys.executable)
    system = ["/usr"]
    base = os.path.realpath(sys.base_prefix)
    if not _under(base, "/usr"):
        system.append(base)  # an interpreter built elsewhere (/opt/python3.11, say): bound at its own path
    if not _under(interpreter, *system):
        system.append(os.path.dirname(interpreter))
    top = {}
    for name in SYSTEM_TOP:
        path = os.path.join("/", name)
        if os.path.islink(path):
            top[name] = {"link": os.readlink(path)}
        elif os.path.isdir(path):
            top[name] = {"bind": path}
    return {
        "interpreter": interpreter,
        "system": system,
        "top": top,
        "etc": [p for p in ("/etc/ld.so.cache",) if os.path.isfile(p)],
        "site": _package_entries(),
        "lib": _grader_code(),
    }


def _under(path: str, *folders: str) -> bool:
    return any(path == f or path.startswith(f.rstrip("/") + "/") for f in folders)


def _package_entries() -> list[list[str]]:
    """[source, name] of every top-level file or folder of the worker's packages and their requirements."""
    entries: dict[str, str] = {}
    seen: set[str] = set()
    todo = list(WORKER_PACKAGES)
    while todo:
        name = todo.pop()
        key = re.sub(r"[-_.]+", "-", name).lower()
        if key in seen:
            continue
        seen.add(key)
        try:
            dist = importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            continue
        for requirement in dist.requires or []:
            if "extra ==" not in requirement:  # other markers are kept: a package too many does no harm
                todo.append(re.split(r"[\s;<>=!~\[(]", requirement, maxsplit=1)[0])
        # RECORD's first path components, read as text: `dist.files` builds an object per file (torch has
        # thousands), which cost half a second a grading.
        record = dist.read_text("RECORD") or ""
        for first in {re.split(r"[/,]", line, maxsplit=1)[0] for line in record.splitlines() if line}:
            if first in ("..", "__pycache__") or first.endswith(".pth") or first.startswith("__editable__"):
                continue
            source = os.path.realpath(str(dist.locate_file(first)))
            if os.path.exists(source):
                entries.setdefault(first, source)
    return [[source, name] for name, source in sorted(entries.items())]


def _grader_code() -> list[list[str]]:
    """[source file, path inside LIB] of the grader's worker sources and the empty probes package (no compiled
    files, no probe module)."""
    spec = importlib.util.find_spec("grader")
    assert spec is not None and spec.origin is not None   # this very package
    package = Path(spec.origin).resolve().parent
    files = []
    for name in GRADER_CODE:
        path = package / name
        sources = [path] if path.is_file() else sorted(path.glob("*.py"))
        files += [[str(p), f"grader/{p.relative_to(package).as_posix()}"] for p in sources]
    return files
