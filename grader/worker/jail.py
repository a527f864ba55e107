"""The layers of the sandbox that the worker applies to itself and to each child it forks.

The supervisor starts the worker inside new namespaces (strict level). Here the worker, root inside them,
hides the grader's secrets behind empty mounts; each child then gets rlimits and drops to the unprivileged
user; after each child, everything it left running is killed.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import resource
import signal
import stat
import time

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_BIND = 1, 2, 4, 8, 4096
PR_SET_NO_NEW_PRIVS = 38
PR_SET_CHILD_SUBREAPER = 36
FILE_SIZE_LIMIT = 96 << 20  # observations are capped at 64 MiB a probe; nothing a probe writes needs more


def _libc():
    return ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)


def apply_jail(jail: dict) -> None:
    """Hide paths and give the worker private temporary folders, as the jail says.

    Only the strict level has `hide`, `private_tmp` and `user`; at the other levels this does nothing. The
    worker itself stays root inside its namespaces (it never runs student code): each child becomes the
    unprivileged user (`drop_privileges`), and the worker hands each exercise's folder to that user only
    while the exercise runs (`hand_over`), so that code of one exercise cannot change another's files.
    """
    libc = None
    private = jail.get("private_tmp")
    if private:  # first: the checkout itself may live under /tmp, and the hiding below must apply to it
        libc = _libc()
        _private_tmp(libc, private["keep"], private["folders"], private["size_mb"])
    for path in jail.get("hide", []):
        libc = libc or _libc()
        if os.path.isdir(path):
            _mount(libc, b"tmpfs", path, b"tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, b"size=4k,mode=0")
        elif os.path.exists(path):
            _mount(libc, b"/dev/null", path, None, MS_BIND, None)


def drop_privileges(jail: dict) -> None:
    """In a child about to run student code: become the unprivileged user for good (strict level)."""
    user = jail.get("user")
    if user:
        os.setgroups([])
        os.setresgid(user["gid"], user["gid"], user["gid"])
        os.setresuid(user["uid"], user["uid"], user["uid"])
        if _libc().prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "cannot set no_new_privs")


def hand_over(folder: str, jail: dict, to_user: bool) -> None:
    """Strict level: give an exercise's folder (and all in it) to the unprivileged user before its exercise
    runs; take it back after, owned by root and writable by nobody else, so that later exercises' code can
    neither change nor delete its observations (nor earlier code plant files in it). Links are never followed."""
    user = jail.get("user")
    if not user:
        return
    uid, gid = (user["uid"], user["gid"]) if to_user else (0, 0)
    for root, dirs, files in os.walk(folder):
        for path in [root, *(os.path.join(root, n) for n in dirs + files)]:
            try:
                os.lchown(path, uid, gid)
                mode = os.lstat(path).st_mode
                if not stat.S_ISLNK(mode):
                    os.chmod(path, stat.S_IMODE(mode) & ~(stat.S_IWGRP | stat.S_IWOTH | stat.S_ISUID | stat.S_ISGID))
            except FileNotFoundError:
                pass


def _mount(libc, source, target: str, fstype, flags: int, data) -> None:
    if libc.mount(source, target.encode(), fstype, flags, data) != 0:
        raise OSError(ctypes.get_errno(), f"cannot mount over {target}")


def _private_tmp(libc, keep: list[str], folders: list[str], size_mb: int) -> None:
    """Empty, size-capped tmpfs over /tmp and friends (so nothing written there outlives the namespace and
    no other submission's scratch folder is visible), with the folders in `keep` that lie under them (this
    submission's scratch folder; the grader's checkout and environment, when they were installed there)
    bound back in at their own paths."""
    inside = [p for p in dict.fromkeys(keep)
              if os.path.isdir(p) and any(p == f or p.startswith(f.rstrip("/") + "/") for f in folders)]
    fds = {p: os.open(p, os.O_PATH | os.O_DIRECTORY) for p in sorted(inside, key=len)}
    try:
        for folder in folders:
            if os.path.isdir(folder):
                _mount(libc, b"tmpfs", folder, b"tmpfs", MS_NOSUID | MS_NODEV, f"size={size_mb}m,mode=1777".encode())
        for path, fd in fds.items():  # parents first, so that a nested folder is bound into its parent's view
            os.makedirs(path, exist_ok=True)
            _mount(libc, f"/proc/self/fd/{fd}".encode(), path, None, MS_BIND, None)
    finally:
        for fd in fds.values():
            os.close(fd)


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


def become_subreaper() -> None:
    """Without a pid namespace (basic level), make orphans of the worker's children its own children, so
    that cleanup_strays still finds a grandchild that setsid()s out of its process group."""
    _libc().prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def cleanup_strays(pid: int, jail: dict) -> None:
    """Kill whatever the child left behind: in a pid namespace, every other process; otherwise its group,
    then every process re-parented to this worker (a subreaper) until none is left."""
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
    deadline = time.monotonic() + 2.0
    while time.monotonic() < deadline:
        orphans = _children()
        if not orphans:
            break
        for orphan in orphans:  # this worker's only children now are what the child left behind
            try:
                os.kill(orphan, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        _reap()
        time.sleep(0.005)
    _reap()


def _children() -> list[int]:
    """Processes whose parent is this one, zombies aside."""
    me, found = os.getpid(), []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", "rb") as fh:
                    state, ppid = fh.read().rsplit(b")", 1)[1].split()[:2]
            except (OSError, ValueError):
                continue
            if int(ppid) == me and state != b"Z":
                found.append(int(entry))
    return found


def _reap() -> None:
    while True:
        try:
            waited, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if waited == 0:
            return
