"""The layers of the sandbox that the worker applies to each exercise and to each child it forks.

Strict level: the worker runs in the box (grader/sandbox/box.py), root inside its namespaces. Each exercise
gets a size- and inode-capped tmpfs of its own, bound to its folder under /submission, to /tmp and to
/dev/shm while it runs (`ExerciseBox`), and goes after it. Observations are not written there: the worker writes
them itself into the supervisor's folder, reached through a descriptor the box was started with and no child
holds. Each child gets rlimits and drops to the grading's own uid; after each child, everything it left running
is killed.
Basic level run as root: no box, but children still drop to the grading's uid (`hand_over` lends them the
exercise's folder, all but its observations).
"""

from __future__ import annotations

import errno
import mmap
import os
import resource
import signal
import stat
import sys
import time

from grader.worker import protocol
from grader.worker.syscalls import (KEYCTL_JOIN_SESSION_KEYRING, MNT_DETACH, MS_BIND, MS_NODEV, MS_NOSUID,
                                    PR_SET_CHILD_SUBREAPER, PR_SET_NO_NEW_PRIVS, PR_SET_PDEATHSIG, keyctl, mount, prctl,
                                    refuse_request_key, umount)

SCRATCH = "/.scratch"
PROT_NONE = 0  # mmap has no name for it
LINUX = sys.platform.startswith("linux")
OBSERVATIONS = "obs"        # the exercise folder's observations, written by the worker alone (supervisor.Job)


class ExerciseBox:
    """Strict level: the exercise's capped scratch, mounted for the time it runs.

    Its folder (the student's file, the observations, whatever the code writes), /tmp and /dev/shm are three
    folders of one tmpfs of `disk_mb` MB and `files` inodes, so a submission cannot fill the host's disk
    nor leave anything for the next exercise or grading.
    """

    def __init__(self, job: dict, jail: dict):
        self.job = job
        self.uid = jail["user"]["uid"]
        self.gid = jail["user"]["gid"]
        self.scratch_fd = jail["scratch_fd"]
        self.mounts: list[str] = []

    def __enter__(self) -> ExerciseBox:
        job = self.job
        mount("tmpfs", SCRATCH, "tmpfs", MS_NOSUID | MS_NODEV,
              f"size={job['disk_mb']}m,nr_inodes={job['files']},mode=0711")
        self.mounts.append(SCRATCH)
        for name, mode, owner in (("work", 0o700, self.uid), ("tmp", 0o1777, 0), ("shm", 0o1777, 0)):
            path = f"{SCRATCH}/{name}"
            os.mkdir(path)
            os.chmod(path, mode)
            os.chown(path, owner, self.gid if owner else 0)
        for source, target in ((f"{SCRATCH}/work", job["workdir"]), (f"{SCRATCH}/tmp", "/tmp"),
                               (f"{SCRATCH}/shm", "/dev/shm")):
            mount(source, target, None, MS_BIND)
            self.mounts.append(target)
        fd = os.open(job["staged"], os.O_RDONLY | os.O_NOFOLLOW, dir_fd=self.scratch_fd)
        with os.fdopen(fd, "rb") as src, open(job["student_file"], "xb") as dst:
            dst.write(src.read())
        return self

    def disk_full(self) -> bool:
        """Whether the code used up the exercise's space or inodes (a write then failed with ENOSPC)."""
        info = os.statvfs(SCRATCH)
        return info.f_bavail * info.f_frsize < 64 << 10 or info.f_favail < 4

    def __exit__(self, *exc) -> None:
        for path in reversed(self.mounts):
            try:
                umount(path, MNT_DETACH)
            except OSError as error:
                if error.errno != errno.EINVAL:
                    raise
        self.mounts.clear()


def drop_privileges(jail: dict, worker: int) -> None:
    """In a child about to run student code: take a session keyring of its own, become the grading's own uid for
    good, with no groups and no way back (no_new_privs) and no request_key(2) (its upcall runs as root outside every
    namespace), and die with the worker `worker` (its pid). Nothing here forks or writes a file."""
    user = jail.get("user")
    own_session_keyring()
    if user:
        os.setgroups([])
        os.setresgid(user["gid"], user["gid"], user["gid"])
        os.setresuid(user["uid"], user["uid"], user["uid"])
        prctl(PR_SET_NO_NEW_PRIVS, 1)
        if LINUX:
            refuse_request_key()
    # After the uid change, which clears it. Without a pid namespace (basic level) nothing else would end a
    # child whose worker was killed; what the child starts itself is its grading uid's, swept when that uid is
    # next claimed (grader.sandbox.uids).
    prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != worker:   # the worker died before the signal was asked for
        os._exit(1)


def own_session_keyring() -> None:
    """Join a fresh, anonymous session keyring (still root: the student can neither re-permit nor re-own it), so that
    keys the student code adds to its session keyring stay in this child's process tree and die with it, instead of
    landing in the one it inherits (a container's or a login's, which every grading would share). Where the key
    system calls are refused (a seccomp profile, as Docker's default), the student cannot make keys either."""
    if not LINUX:
        return
    try:
        keyctl(KEYCTL_JOIN_SESSION_KEYRING, None)
    except OSError as error:
        if error.errno not in (errno.ENOSYS, errno.EPERM):
            raise


def hand_over(folder: str, jail: dict, to_user: bool) -> None:
    """Basic level as root (no box): give an exercise's folder (and all in it but its observations, which the worker
    alone writes) to the grading's uid before its exercise runs; take it back after, owned by root and writable by
    nobody else, so that later exercises' code can plant nothing in it. Links are never followed."""
    user = jail.get("user")
    if not user:
        return
    uid, gid = (user["uid"], user["gid"]) if to_user else (0, 0)
    for root, dirs, files in os.walk(folder):
        if root == folder and OBSERVATIONS in dirs:
            dirs.remove(OBSERVATIONS)   # the worker's: root's, 0755, never lent
        for path in [root, *(os.path.join(root, n) for n in dirs + files)]:
            try:
                os.lchown(path, uid, gid)
                mode = os.lstat(path).st_mode
                if not stat.S_ISLNK(mode):
                    os.chmod(path, stat.S_IMODE(mode) & ~(stat.S_IWGRP | stat.S_IWOTH | stat.S_ISUID | stat.S_ISGID))
            except FileNotFoundError:
                pass


def child_limits(job: dict, jail: dict) -> None:
    """Limits for a child about to run student code (still root): memory, CPU time, file size, no core dumps,
    processes.

    Memory (`memory_mb`) counts what the child adds to the worker it is forked from, never what it inherits:
    torch's libraries, and the address space the CUDA build reserves at import (over 3 GB, nearly none of it
    touched), are the worker's. Where the grading has a memory group (strict, with control groups) the child
    joins it under the exercise's limit, which caps what all its processes use together (cgroups.py). In every
    case the child's own address space and its private writable memory (RLIMIT_AS, RLIMIT_DATA) may each grow
    by `memory_mb` past what it maps at fork: an allocation beyond fails where it is made (MemoryError), and
    the address-space cap also covers shared mappings, which the data cap does not count.
    """
    if jail.get("level") == "none":
        return
    memory = job["memory_mb"] << 20
    group = jail.get("memory_group")
    if group:
        try:
            os.write(group["limit"], str(memory).encode())   # the group holds no process now
            os.write(group["procs"], b"0")   # this process, and so all it starts
        finally:
            for fd in group.values():   # the worker's alone: no student code holds them
                os.close(fd)
    # Linux only: elsewhere (a student's Mac running `grader check`) the kernel does not hold mappings to these
    # limits, and the bisection in `mapped` would find nothing to measure.
    caps = zip((resource.RLIMIT_AS, resource.RLIMIT_DATA), mapped(), strict=True) if LINUX else ()
    for limit, used in caps:
        hard = resource.getrlimit(limit)[1]
        cap = used + memory if hard == resource.RLIM_INFINITY else min(used + memory, hard)
        resource.setrlimit(limit, (cap, cap))
    cpu = int(job["timeout_s"]) + 1
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    resource.setrlimit(resource.RLIMIT_FSIZE, (protocol.FILE_SIZE_LIMIT, protocol.FILE_SIZE_LIMIT))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    nproc = jail.get("nproc")
    if nproc:
        resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))


def mapped() -> tuple[int, int]:
    """What this process maps now, in bytes: its address space and its private writable memory, as the kernel
    counts them against RLIMIT_AS and RLIMIT_DATA (VmSize and VmData)."""
    try:
        with open("/proc/self/status", "rb") as fh:
            fields = dict(line.split(b":", 1) for line in fh.read().splitlines() if b":" in line)
        return int(fields[b"VmSize"].split()[0]) << 10, int(fields[b"VmData"].split()[0]) << 10
    except (OSError, KeyError, ValueError):   # the box has no /proc: ask the kernel itself
        return (_counted(resource.RLIMIT_AS, PROT_NONE),
                _counted(resource.RLIMIT_DATA, mmap.PROT_READ | mmap.PROT_WRITE))


def _counted(limit: int, prot: int) -> int:
    """What the kernel counts against `limit` now, without /proc: a new private page of `prot` may be mapped
    exactly while the count plus that page stays within the limit, so the least limit that allows it, found by
    bisection, is the count plus one page. The limit is as it was afterwards."""
    page = mmap.PAGESIZE
    soft, hard = resource.getrlimit(limit)
    low, high = 0, 1 << 35   # in pages: nothing maps 128 TiB
    if hard != resource.RLIM_INFINITY:
        high = min(high, hard // page)
    try:
        while high - low > 1:   # the page fits under a limit of `high` pages and not under `low`
            middle = (low + high) // 2
            resource.setrlimit(limit, (middle * page, hard))
            try:
                mmap.mmap(-1, page, flags=mmap.MAP_PRIVATE, prot=prot).close()
                high = middle
            except (OSError, MemoryError):
                low = middle
    finally:
        resource.setrlimit(limit, (soft, hard))
    return (high - 1) * page


def oom_kills(jail: dict) -> int:
    """How many processes the kernel has killed in the grading's memory group for passing its limit (0 without
    one). The worker reads it before a child and while it runs: a kill there ends the exercise for memory."""
    group = jail.get("memory_group")
    if not group:
        return 0
    for line in os.pread(group["events"], 4096, 0).splitlines():
        key, _, value = line.partition(b" ")
        if key == b"oom_kill":
            return int(value)
    return 0


def become_subreaper() -> None:
    """Without a pid namespace (basic level), make orphans of the worker's children its own children, so
    that cleanup_strays still finds a grandchild that setsid()s out of its process group."""
    prctl(PR_SET_CHILD_SUBREAPER, 1)


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
            reap_ended()
            time.sleep(0.005)
        reap_ended()
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
        reap_ended()
        time.sleep(0.005)
    reap_ended()


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


def reap_ended() -> None:
    """Reap every child of this process that has ended, without waiting for one that has not."""
    while True:
        try:
            waited, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if waited == 0:
            return
