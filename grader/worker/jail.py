"""The layers of the sandbox that the worker applies to itself and to each child it forks.

The supervisor starts the worker inside new namespaces (strict level). Here the worker, still root inside
them, hides the grader's secrets behind empty mounts and drops to the unprivileged user; each child then
gets rlimits; after each child, everything it left running is killed.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import resource
import signal
import time

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_BIND = 1, 2, 4, 8, 4096
PR_SET_NO_NEW_PRIVS = 38
FILE_SIZE_LIMIT = 96 << 20  # observations are capped at 64 MiB a probe; nothing a probe writes needs more


def _libc():
    return ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)


def apply_jail(jail: dict) -> None:
    """Hide paths and drop privileges, as the jail description says. A no-op at the `none` level."""
    libc = None
    for path in jail.get("hide", []):
        libc = libc or _libc()
        if os.path.isdir(path):
            rc = libc.mount(b"tmpfs", path.encode(), b"tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, b"size=4k,mode=0")
        elif os.path.exists(path):
            rc = libc.mount(b"/dev/null", path.encode(), None, MS_BIND, None)
        else:
            continue
        if rc != 0:
            raise OSError(ctypes.get_errno(), f"cannot hide {path}")
    user = jail.get("user")
    if user:
        os.setgroups([])
        os.setresgid(user["gid"], user["gid"], user["gid"])
        os.setresuid(user["uid"], user["uid"], user["uid"])
        libc = libc or _libc()
        if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "cannot set no_new_privs")


def child_limits(job: dict, jail: dict) -> None:
    """rlimits for a child about to run student code: memory, CPU time, file size, no core dumps, processes."""
    if jail.get("level") == "none":
        return
    memory = job["memory_mb"] << 20
    resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    cpu = int(job["timeout_s"]) + 1
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    resource.setrlimit(resource.RLIMIT_FSIZE, (FILE_SIZE_LIMIT, FILE_SIZE_LIMIT))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    nproc = jail.get("nproc")
    if nproc:
        resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))


def cleanup_strays(pid: int, jail: dict) -> None:
    """Kill whatever the child left behind: in a pid namespace, every other process; otherwise its group."""
    if jail.get("kill_all"):
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline:
            try:
                os.kill(-1, signal.SIGKILL)  # never reaches this process nor pid 1 (which this process is)
            except ProcessLookupError:
                break
            _reap()
            time.sleep(0.005)
        _reap()
        return
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _reap() -> None:
    while True:
        try:
            waited, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if waited == 0:
            return
