"""A control group per grading (strict level): an equal share of the CPU and a cap on its processes.

A fork bomb is hundreds of busy processes. The scheduler shares the CPU between threads, so next to one a
concurrent grading would get a few thousandths of a core and time out through no fault of its own. In a
group of its own each grading gets the same share as every other, however many processes it runs, and
`pids.max` caps those processes for the whole grading (RLIMIT_NPROC counts per uid, and remains as well).

Both cgroup versions are served: v2 (one unified hierarchy, usual on current distributions) and v1 (a
hierarchy per controller). Where neither can be written, grading goes on without this layer and the report's
`sandbox.layers.cpu_share` says so.
"""

from __future__ import annotations

import errno
import functools
import os
import time
from dataclasses import dataclass, field

ROOT = "/sys/fs/cgroup"
PARENT = "transformer-grader"
MAX_PIDS = 512
# The gradings together weigh as much as this many busy processes against the rest of the machine (a group
# weighs as one process by default, which would slow every grading down whenever anything else runs).
PARENT_WEIGHT_CPUS = os.cpu_count() or 1


@dataclass
class GradingGroup:
    """The groups (one per hierarchy) that the worker joins; `procs` are the files its pid is written to."""

    folders: list[str] = field(default_factory=list)

    @property
    def procs(self) -> list[str]:
        return [os.path.join(f, "cgroup.procs") for f in self.folders]

    def weigh(self, share: float) -> None:
        """Weigh the group as `share` of a grading (1: as much as every other grading) when the CPU is contended."""
        for folder in self.folders:
            for name, default, least in (("cpu.weight", 100, 1), ("cpu.shares", 1024, 2)):
                path = os.path.join(folder, name)
                if os.path.isfile(path):
                    _write(path, str(max(least, round(default * share))))

    def remove(self) -> None:
        """Remove the groups once the sandbox's processes are gone (a killed namespace takes a moment)."""
        deadline = time.monotonic() + 5.0
        for folder in self.folders:
            while True:
                try:
                    os.rmdir(folder)
                    break
                except FileNotFoundError:
                    break
                except OSError as exc:
                    if exc.errno != errno.EBUSY or time.monotonic() > deadline:
                        break
                    time.sleep(0.02)


@functools.cache
def available() -> bool:
    """Whether groups can be made here (root, with a writable cpu or pids controller)."""
    group = create("probe-%d" % os.getpid()) if os.geteuid() == 0 else None
    if group is None:
        return False
    group.remove()
    return True


def create(name: str) -> GradingGroup | None:
    """A group named `name` under PARENT in each hierarchy that has the cpu or pids controller, or None."""
    group = GradingGroup()
    try:
        if os.path.isfile(os.path.join(ROOT, "cgroup.controllers")):
            group.folders.append(_v2(name))
        else:
            group.folders += [f for f in (_v1("cpu", name), _v1("pids", name)) if f]
    except OSError:
        group.remove()
        return None
    return group if group.folders else None


def _v2(name: str) -> str:
    parent = os.path.join(ROOT, PARENT)
    available = _read(os.path.join(ROOT, "cgroup.controllers")).split()
    wanted = [c for c in ("cpu", "pids") if c in available]
    _write(os.path.join(ROOT, "cgroup.subtree_control"), " ".join(f"+{c}" for c in wanted))
    os.makedirs(parent, exist_ok=True)
    _write(os.path.join(parent, "cgroup.subtree_control"), " ".join(f"+{c}" for c in wanted))
    if "cpu" in wanted:
        _write(os.path.join(parent, "cpu.weight"), str(min(10000, 100 * PARENT_WEIGHT_CPUS)))
    folder = _fresh(parent, name)
    if "pids" in wanted:
        _write(os.path.join(folder, "pids.max"), str(MAX_PIDS))
    return folder


def _v1(controller: str, name: str) -> str | None:
    hierarchy = os.path.join(ROOT, controller)
    if not os.path.isfile(os.path.join(hierarchy, "cgroup.procs")):
        return None
    parent = os.path.join(hierarchy, PARENT)
    os.makedirs(parent, exist_ok=True)
    if controller == "cpu":
        _write(os.path.join(parent, "cpu.shares"), str(1024 * PARENT_WEIGHT_CPUS))
    folder = _fresh(parent, name)
    if controller == "pids":
        _write(os.path.join(folder, "pids.max"), str(MAX_PIDS))
    return folder


def _fresh(parent: str, name: str) -> str:
    """An empty group of that name: one a killed grading left behind is removed first."""
    folder = os.path.join(parent, name)
    try:
        os.rmdir(folder)
    except FileNotFoundError:
        pass
    os.mkdir(folder)
    return folder


def _read(path: str) -> str:
    with open(path) as fh:
        return fh.read()


def _write(path: str, text: str) -> None:
    with open(path, "w") as fh:
        fh.write(text)


def join(procs: list[str]) -> None:
    """Move this process into the groups (the box does so first: all it starts inherits them)."""
    for path in procs:
        _write(path, "0")   # "0": the writing process itself
