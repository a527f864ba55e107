"""Which isolation a machine allows, and how the worker is started at each level.

- `strict`: root. New network, pid and mount namespaces (`unshare`); inside them the worker hides the
  grader's secrets behind empty mounts, drops to `nobody`, and kills every stray process after each child.
- `basic`: any user. A separate process group started with `python -I`, rlimits on each child.
- `none`: trusted code only (the reference solutions): a separate process, no limits but the wall clock.
"""

from __future__ import annotations

import functools
import os
import pwd
import shutil
import stat
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

LEVELS = ("strict", "basic", "none")
UNPRIVILEGED_USER = "nobody"
# World-writable folders: each worker gets empty ones of its own. /run/lock (also /var/lock) is world-writable
# on Debian and Ubuntu: without it here a submission could leave files on the host there.
PRIVATE_FOLDERS = ("/tmp", "/var/tmp", "/dev/shm", "/run/lock")


@dataclass(frozen=True)
class Sandbox:
    level: str
    layers: dict[str, bool]
    note: str = ""
    hide: tuple[str, ...] = field(default=())

    def command(self, worker_args: list[str]) -> list[str]:
        python = [sys.executable, "-I", "-m", "grader.worker", *worker_args]
        if self.level == "strict":
            return ["unshare", "--net", "--pid", "--fork", "--kill-child", "--mount-proc", "--", *python]
        return python

    def jail(self, scratch: Path) -> dict:
        if self.level == "strict":
            user = pwd.getpwnam(UNPRIVILEGED_USER)
            return {"level": "strict", "hide": list(self.hide), "user": {"uid": user.pw_uid, "gid": user.pw_gid},
                    "kill_all": True, "nproc": 256,
                    "private_tmp": {"keep": [str(scratch), *_grader_locations()], "folders": list(PRIVATE_FOLDERS),
                                    "size_mb": 256}}
        nproc = None if os.geteuid() == 0 else _process_count(os.getuid()) + 256
        return {"level": self.level, "hide": [], "user": None, "kill_all": False, "nproc": nproc}

    def describe(self) -> dict:
        return {"level": self.level, "layers": self.layers, "note": self.note}


class SandboxUnavailable(Exception):
    """The level asked for cannot be had here; the message says why."""


def choose(requested: str, hide: list[str]) -> Sandbox:
    """The sandbox at the requested level, or SandboxUnavailable saying what is missing."""
    if requested == "strict":
        missing = strict_missing()
        if missing:
            raise SandboxUnavailable(f"the strict sandbox is unavailable: {missing}")
        layers = dict(process=True, rlimits=True, other_user=True, network_namespace=True,
                      pid_namespace=True, hidden_paths=True)
        return Sandbox("strict", layers, "", tuple(hide))
    if requested == "basic":
        layers = dict(process=True, rlimits=True, other_user=False, network_namespace=False,
                      pid_namespace=False, hidden_paths=False)
        why = strict_missing()
        note = (f"weaker than strict ({why}): student code runs as the grading user, can read what that user "
                "can read, and reach the network") if why else "basic chosen explicitly: no other user, no namespaces"
        return Sandbox("basic", layers, note)
    if requested == "none":
        layers = dict(process=True, rlimits=False, other_user=False, network_namespace=False,
                      pid_namespace=False, hidden_paths=False)
        return Sandbox("none", layers, "no isolation beyond a separate process: for trusted code only")
    raise ValueError(f"unknown sandbox level {requested!r}; choose one of {', '.join(LEVELS)}")


@functools.cache
def strict_missing() -> str:
    """Empty when the strict level works here; otherwise what is missing, in words."""
    if os.geteuid() != 0:
        return "it needs root (to switch to another user and create namespaces)"
    if shutil.which("unshare") is None:
        return "the `unshare` command (util-linux) is not installed"
    try:
        pwd.getpwnam(UNPRIVILEGED_USER)
    except KeyError:
        return f"there is no `{UNPRIVILEGED_USER}` user"
    unreadable = [str(p) for p in _worker_code_paths() if not _world_readable(p)]
    if unreadable:
        return (f"{unreadable[0]} is not readable by `{UNPRIVILEGED_USER}`: build the environment from a "
                "system Python in a world-readable folder (see README)")
    probe = subprocess.run(["unshare", "--net", "--pid", "--fork", "--kill-child", "--mount-proc", "--", "true"],
                           capture_output=True, timeout=30)
    if probe.returncode != 0:
        return "namespaces cannot be created here: " + probe.stderr.decode(errors="replace").strip()[:200]
    return ""


def _grader_locations() -> list[str]:
    """Where the worker's code lives: the environment and the checkout of the grader package."""
    import importlib.util

    package = Path(importlib.util.find_spec("grader").origin).resolve().parent
    return [sys.prefix, os.path.realpath(sys.prefix), str(package.parent)]


def _worker_code_paths() -> list[Path]:
    """What the worker imports, located without importing it (importing torch here would cost a second)."""
    import importlib.util

    packages = [Path(importlib.util.find_spec(name).origin).parent for name in ("grader", "torch", "safetensors")]
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
