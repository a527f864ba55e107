"""Which isolation a machine allows, and how the worker is started at each level.

- `strict`: root. New network, pid, IPC, UTS and mount namespaces (`unshare`); inside them the box
  (grader/sandbox/box.py) pivots into a fresh root holding only the allow-listed system folders, the worker's
  packages and code; children run as the grading's own uid with capped scratch, and every stray process is
  killed after each child.
- `basic`: any user. A separate process group started with `python -I`, rlimits on each child; run as root
  (Gradescope's containers without namespaces), children still drop to the grading's own uid.
- `none`: trusted code only (the reference solutions): a separate process, no limits but the wall clock.
"""

from __future__ import annotations

import functools
import os
import shutil
import stat
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

LEVELS = ("strict", "basic", "none")
# The folder holding this grader package. `python -I` ignores the working folder, so `-m grader...` would run
# whichever grader is installed, not this one (a checkout next to an installed copy): the worker and the box are
# started from this package, with that folder on the path only while `grader` itself is imported (submodules are
# then found through the package, and nothing else of the checkout is importable).
PACKAGE_PARENT = str(Path(__file__).resolve().parents[2])


def _run_module(module: str) -> list[str]:
    """`python -I` running `module` of this grader package as `__main__` (its arguments follow)."""
    boot = (f"import sys, runpy; sys.path.insert(0, {PACKAGE_PARENT!r}); import grader; "
            f"sys.path.remove({PACKAGE_PARENT!r}); runpy.run_module({module!r}, run_name='__main__', alter_sys=True)")
    return [sys.executable, "-I", "-c", boot]


run_module = _run_module   # the same, for what starts a grader process outside this module (the model process)
NAMESPACES = ("--net", "--pid", "--ipc", "--uts", "--mount")
# The sandbox's first process is killed when the thread that started it dies, however it dies (kill -9 of a
# warm grading process included); in strict mode `unshare --kill-child` then takes the pid namespace with it.
_DIE_WITH_PARENT = ("setpriv", "--pdeathsig", "KILL") if shutil.which("setpriv") else ()


def _boxed(plan_fd: int | None, box_args: list[str], args: list[str]) -> list[str]:
    """The strict box (grader/sandbox/box.py, in new namespaces) running the worker, or with `--serve` the server."""
    return [*_DIE_WITH_PARENT, "unshare", *NAMESPACES, "--propagation", "private", "--fork", "--kill-child",
            "--", *_run_module("grader.sandbox.box"), "--plan-fd", str(plan_fd), *box_args, "--", *args]


NPROC = 256   # processes (threads) of one grading's uid: enough for torch, too few for a fork bomb to matter


@dataclass(frozen=True)
class Sandbox:
    level: str
    layers: dict[str, bool]
    note: str = ""

    def command(self, control_fd: int, request_fd: int, plan_fd: int | None) -> list[str]:
        worker = ["--control-fd", str(control_fd), "--request-fd", str(request_fd)]
        if self.level == "strict":
            return _boxed(plan_fd, [], worker)
        return [*_DIE_WITH_PARENT, *_run_module("grader.worker"), *worker]

    def server_command(self, plan_fd: int, server_args: list[str]) -> list[str]:
        """A strict box running the fork server (grader/worker/spawn.py) with `server_args` instead of a worker."""
        if self.level != "strict":
            raise ValueError("a fork server needs the strict level's namespaces")
        return _boxed(plan_fd, ["--serve"], server_args)

    def jail(self, uid: int | None, scratch_fd: int | None, memory_group: dict[str, int] | None = None) -> dict:
        """What the worker applies: the user children become, the process limit, how strays are killed, and (strict,
        with control groups) the descriptors of the memory group its children join (cgroups.memory_files)."""
        user = {"uid": uid, "gid": uid} if uid is not None else None
        if self.level == "strict":
            return {"level": "strict", "box": True, "user": user, "kill_all": True, "nproc": NPROC,
                    "scratch_fd": scratch_fd, "memory_group": memory_group or None}
        if self.level == "basic" and user:
            return {"level": "basic", "user": user, "kill_all": False, "nproc": NPROC}
        nproc = None if os.geteuid() == 0 else _process_count(os.getuid()) + NPROC
        return {"level": self.level, "user": None, "kill_all": False, "nproc": nproc}

    @property
    def own_uid(self) -> bool:
        """Whether children run as a uid of the grading's own (root is needed to switch)."""
        return self.level in ("strict", "basic") and os.geteuid() == 0

    def describe(self) -> dict:
        return {"level": self.level, "layers": self.layers, "note": self.note}


class SandboxUnavailable(Exception):
    """The level asked for cannot be had here; the message says why."""


def choose(requested: str) -> Sandbox:
    """The sandbox at the requested level, or SandboxUnavailable saying what is missing."""
    if requested == "strict":
        missing = strict_missing()
        if missing:
            raise SandboxUnavailable(f"the strict sandbox is unavailable: {missing}")
        from grader.sandbox import cgroups

        layers = dict(process=True, rlimits=True, own_uid=True, network_namespace=True, pid_namespace=True,
                      ipc_namespace=True, allow_listed_root=True, capped_scratch=True, cpu_share=cgroups.available(),
                      memory_group=cgroups.caps_memory())
        note = ("" if layers["memory_group"] else
                "no memory control group here: memory is capped per process (what it maps), not for all the "
                "exercise's processes together" if layers["cpu_share"] else
                "no control groups here: concurrent gradings share the CPU by process, and memory is capped per "
                "process (what it maps)")
        return Sandbox("strict", layers, note)
    if requested == "basic":
        root = os.geteuid() == 0
        layers = dict(process=True, rlimits=True, own_uid=root, network_namespace=False, pid_namespace=False,
                      ipc_namespace=False, allow_listed_root=False, capped_scratch=False, cpu_share=False,
                      memory_group=False)
        why = strict_missing()
        if root:
            note = (f"weaker than strict ({why}): student code runs as a uid of its own and can read what every "
                    "user can read (keep hidden files root-only), and reach the network") if why else \
                "basic chosen explicitly: student code runs as a uid of its own, with no namespaces"
        else:
            note = (f"weaker than strict ({why}): student code runs as the grading user, can read what that user "
                    "can read, and reach the network") if why else \
                "basic chosen explicitly: no other user, no namespaces"
        return Sandbox("basic", layers, note)
    if requested == "none":
        layers = dict(process=True, rlimits=False, own_uid=False, network_namespace=False, pid_namespace=False,
                      ipc_namespace=False, allow_listed_root=False, capped_scratch=False, cpu_share=False,
                      memory_group=False)
        return Sandbox("none", layers, "no isolation beyond a separate process: for trusted code only")
    raise ValueError(f"unknown sandbox level {requested!r}; choose one of {', '.join(LEVELS)}")


@functools.cache
def strict_missing() -> str:
    """Empty when the strict level works here; otherwise what is missing, in words."""
    if os.geteuid() != 0:
        return "it needs root (to create namespaces and switch to another user)"
    if shutil.which("unshare") is None:
        return "the `unshare` command (util-linux) is not installed"
    unreadable = [str(p) for p in _worker_code_paths() if not _world_readable(p)]
    if unreadable:
        return (f"{unreadable[0]} is not readable by other users: build the environment from a system Python in a "
                "world-readable folder (see README)")
    probe = subprocess.run(["unshare", *NAMESPACES, "--propagation", "private", "--fork", "--kill-child", "--", "true"],
                           capture_output=True, timeout=30)
    if probe.returncode != 0:
        return "namespaces cannot be created here: " + probe.stderr.decode(errors="replace").strip()[:200]
    return ""


def _worker_code_paths() -> list[Path]:
    """What the worker imports, located without importing it (importing torch here would cost a second)."""
    import importlib.util

    specs = [importlib.util.find_spec(name) for name in ("grader", "torch", "safetensors")]
    packages = [Path(spec.origin).parent for spec in specs if spec is not None and spec.origin is not None]
    return [Path(sys.executable), Path(os.path.realpath(sys.executable)), *packages]


def _world_readable(path: Path) -> bool:
    """Every folder on the way can be entered by others, and the thing itself can be read by them."""
    path = path.absolute()
    for parent in reversed(path.parents):
        if not os.stat(parent).st_mode & stat.S_IXOTH:
            return False
    mode = os.stat(path).st_mode
    return bool(mode & stat.S_IROTH) and (not stat.S_ISDIR(mode) or bool(mode & stat.S_IXOTH))


def _process_count(uid: int) -> int:
    """Threads the user runs now: RLIMIT_NPROC counts threads, so the child's limit starts above them."""
    count = 0
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.stat(f"/proc/{entry}").st_uid == uid:
                    count += len(os.listdir(f"/proc/{entry}/task"))
            except OSError:
                pass
    return count
