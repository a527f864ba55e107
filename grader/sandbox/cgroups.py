"""A control group per grading (strict level): an equal share of the CPU, a cap on its processes, and a cap on
the memory the running exercise's processes use.

A fork bomb is hundreds of busy processes. The scheduler shares the CPU between threads, so next to one a
concurrent grading would get a few thousandths of a core and time out through no fault of its own. In a
group of its own each grading gets the same share as every other, however many processes it runs, and
`pids.max` caps those processes for the whole grading (RLIMIT_NPROC counts per uid, and remains as well).

Memory is capped by what is used, not by address space (the CUDA build of torch maps over 3 GB at import, most
of it never touched): each child that runs student code joins the grading's memory group before it drops to the
grading's uid, the worker having set that group's limit to the exercise's `memory_mb`. A child's pages that it
inherited from the worker stay charged where they were, so the limit counts what the exercise's processes add
(their allocations, the pages they copy on write, their page cache and scratch files), all of them together.
When they pass it the kernel kills one of them and counts it in the group's `oom_kill`, which the worker reads
to name the limit. The worker itself never sits in that group. The box has no /sys: the worker reaches the
group through three descriptors (`memory_files`), and the child closes them before student code runs.

Both cgroup versions are served: v2 (one unified hierarchy, usual on current distributions) and v1 (a
hierarchy per controller). In v2 a group whose children have controllers holds no process of its own, so there
the worker sits in a `worker` group beside `exercise`, both under the grading's. Where neither can be written,
grading goes on without this layer and the report's `sandbox.layers.cpu_share` and `memory_group` say so.
"""

from __future__ import annotations

from collections.abc import Sequence
import errno
import functools
import os
import time
from dataclasses import dataclass, field

ROOT = "/sys/fs/cgroup"
PARENT = "transformer-grader"
MAX_PIDS = 512
EXERCISE = "exercise"   # v2: the grading's subgroup for the running exercise's processes (memory capped)
WORKER = "worker"       # v2 with a memory group: the worker's subgroup beside it
# The files of the memory group the worker holds as descriptors: v1's and v2's name for each.
MEMORY_FILES = {1: {"procs": "cgroup.procs", "limit": "memory.limit_in_bytes", "events": "memory.oom_control"},
                2: {"procs": "cgroup.procs", "limit": "memory.max", "events": "memory.events"}}
# The gradings together weigh as much as this many busy processes against the rest of the machine (a group
# weighs as one process by default, which would slow every grading down whenever anything else runs).
PARENT_WEIGHT_CPUS = os.cpu_count() or 1


@dataclass
class GradingGroup:
    """The grading's groups (one per hierarchy), weighed and capped; `procs` are the files the worker's pid is
    written to. `memory`: the group the running exercise's processes join (None where memory cannot be capped)."""

    folders: list[str] = field(default_factory=list)
    memory: str | None = None
    version: int = 1
    worker: str | None = None   # v2 with a memory group: the worker's own subgroup

    @property
    def procs(self) -> list[str]:
        return [os.path.join(f, "cgroup.procs") for f in ([self.worker] if self.worker else self.folders)]

    def memory_files(self) -> dict[str, int]:
        """Descriptors of the memory group's files, for the worker: `procs` and `limit` to write (a child joins,
        the worker sets the exercise's limit), `events` to read (`oom_kill`). Empty without a memory group."""
        if self.memory is None:
            return {}
        opened: dict[str, int] = {}
        try:
            for key, name in MEMORY_FILES[self.version].items():
                opened[key] = os.open(os.path.join(self.memory, name), os.O_RDONLY if key == "events" else os.O_WRONLY)
        except OSError:
            for fd in opened.values():
                os.close(fd)
            raise
        return opened

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
        for folder in [f for f in (self.memory, self.worker) if f] + self.folders:   # subgroups first
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
def _layers() -> tuple[bool, bool]:
    """Whether groups can be made here (root, with a writable cpu or pids controller), and whether they cap
    memory."""
    group = create(f"probe-{os.getpid()}") if os.geteuid() == 0 else None
    if group is None:
        return False, False
    group.remove()
    return True, group.memory is not None


def available() -> bool:
    """Whether groups can be made here (root, with a writable cpu or pids controller)."""
    return _layers()[0]


def caps_memory() -> bool:
    """Whether the groups made here cap the running exercise's memory."""
    return _layers()[1]


def create(name: str) -> GradingGroup | None:
    """A group named `name` under PARENT in each hierarchy that has the cpu or pids controller (and its memory
    group, where the memory controller can be had), or None."""
    group = GradingGroup()
    try:
        if os.path.isfile(os.path.join(ROOT, "cgroup.controllers")):
            group.version = 2
            _v2(name, group)
        else:
            group.folders += [f for f in (_v1("cpu", name), _v1("pids", name)) if f]
            if group.folders:
                group.memory = _v1_memory(name)
    except OSError:
        group.remove()
        return None
    return group if group.folders else None


def _v2(name: str, group: GradingGroup) -> None:
    parent = os.path.join(ROOT, PARENT)
    available = _read(os.path.join(ROOT, "cgroup.controllers")).split()
    wanted = [c for c in ("cpu", "pids", "memory") if c in available]
    try:
        _enable(parent, wanted)
    except OSError:
        if "memory" not in wanted:
            raise
        wanted.remove("memory")   # not delegated here: the other layers still serve
        _enable(parent, wanted)
    if "cpu" in wanted:
        _write(os.path.join(parent, "cpu.weight"), str(min(10000, 100 * PARENT_WEIGHT_CPUS)))
    folder = _fresh(parent, name)
    group.folders.append(folder)
    if "pids" in wanted:
        _write(os.path.join(folder, "pids.max"), str(MAX_PIDS))
    if "memory" in wanted:
        _write(os.path.join(folder, "cgroup.subtree_control"), "+memory")   # before any process joins it
        group.worker = _fresh(folder, WORKER)
        memory = _fresh(folder, EXERCISE)
        group.memory = memory
        # A kill takes all the exercise's processes; over the limit is killed, not swapped.
        for setting, value in (("memory.oom.group", "1"), ("memory.swap.max", "0")):
            if os.path.isfile(os.path.join(memory, setting)):   # each only where the kernel has it
                _write(os.path.join(memory, setting), value)


def _enable(parent: str, controllers: Sequence[str]) -> None:
    """Hand `controllers` down from the root to PARENT's children."""
    for folder in (ROOT, parent):
        os.makedirs(folder, exist_ok=True)
        _write(os.path.join(folder, "cgroup.subtree_control"), " ".join(f"+{c}" for c in controllers))


def _v1_memory(name: str) -> str | None:
    """v1: the grading's group in the memory hierarchy, where only the exercise's processes go (None without
    that hierarchy). Its limit is set for each exercise; swapping is off, so over the limit is killed."""
    hierarchy = os.path.join(ROOT, "memory")
    if not os.path.isfile(os.path.join(hierarchy, "cgroup.procs")):
        return None
    parent = os.path.join(hierarchy, PARENT)
    try:
        os.makedirs(parent, exist_ok=True)
        folder = _fresh(parent, name)
    except OSError:
        return None   # not writable here: the other layers still serve
    _write(os.path.join(folder, "memory.swappiness"), "0")
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
    """An empty group of that name: one a killed grading left behind is removed first (its subgroups before it)."""
    folder = os.path.join(parent, name)
    for stale in (os.path.join(folder, EXERCISE), os.path.join(folder, WORKER), folder):
        try:
            os.rmdir(stale)
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
