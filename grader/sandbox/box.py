"""The strict sandbox's root: `python -I -m grader.sandbox.box --plan-fd P -- WORKER ARGS`, run by the supervisor
inside new namespaces (`unshare --net --pid --ipc --uts --mount --fork --kill-child`), as root there.

It reads the plan (grader/sandbox/rootfs.py: host paths), builds a fresh root on a tmpfs that holds only
read-only binds of the allow-listed system folders and packages, a copy of the worker's code, a minimal /dev
and /etc, and empty mount points for the running exercise; pivots into it and detaches the host's root; then
execs a fresh interpreter for the worker (with `--serve`, for the fork server, grader/worker/spawn.py, which
forks a worker per submission). The exec is what keeps host paths out: nothing of this process's
memory (the plan included) survives into the worker, whose children run student code. There is no /proc
and no /sys (the mount table would name the host folders the binds come from), only copies of the
processor descriptions torch reads.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys

from grader.sandbox import cgroups, rootfs
from grader.worker.syscalls import (MNT_DETACH, MS_BIND, MS_NODEV, MS_NOSUID, MS_PRIVATE, MS_RDONLY, MS_REC,
                                     MS_REMOUNT, mount, pivot_root, umount)

# Started so (python -I -S -c BOOT ...): the worker imports only from the box's own folders.
BOOT = (f"import sys; sys.path[:0] = [{rootfs.LIB!r}, {rootfs.SITE!r}]; "
        "from grader.worker.__main__ import main; sys.exit(main())")
# `--serve`: the box runs the fork server (grader/worker/spawn.py) instead, which forks a worker per submission.
SERVER_BOOT = (f"import sys; sys.path[:0] = [{rootfs.LIB!r}, {rootfs.SITE!r}]; "
               "from grader.worker.spawn import serve; sys.exit(serve())")
CPU_FILES = ("/proc/cpuinfo", "/sys/devices/system/cpu/possible", "/sys/devices/system/cpu/present",
             "/sys/devices/system/cpu/online")
ENVIRONMENT = {"PATH": "/usr/bin:/bin", "HOME": "/tmp", "TMPDIR": "/tmp", "LANG": "C.UTF-8",
               "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PYTHONHASHSEED": "0",
               "PYTHONDONTWRITEBYTECODE": "1"}


def build(root: str, plan: dict, uid: int, exercises: list[str]) -> None:
    """Lay out the new root at `root` (an empty folder) as the plan says."""
    mount("tmpfs", root, "tmpfs", MS_NOSUID | MS_NODEV, "size=16m,nr_inodes=4096,mode=0755")
    for folder in plan["system"]:
        _bind(folder, root + folder)
    for name, entry in plan["top"].items():
        if "link" in entry:
            os.symlink(entry["link"], os.path.join(root, name))
        else:
            _bind(entry["bind"], os.path.join(root, name))
    for source, name in plan["site"]:
        _bind(source, os.path.join(root + rootfs.SITE, name))
    for source, name in plan["lib"]:
        target = os.path.join(root + rootfs.LIB, name)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.copyfile(source, target)
    _etc(root, plan["etc"], uid)
    _dev(root)
    _cpu(root)
    for path in ("/tmp", rootfs.SCRATCH, rootfs.SUBMISSION, *(f"{rootfs.SUBMISSION}/{e}" for e in exercises)):
        os.makedirs(root + path, mode=0o755, exist_ok=True)
    # The worker's own /tmp (torch._dynamo wants a writable one at import); each exercise gets its own on top.
    mount("tmpfs", root + "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, "size=16m,nr_inodes=1024,mode=1777")


def _bind(source: str, target: str) -> None:
    """A read-only, nosuid, nodev bind of `source` (a file or a folder) at `target`."""
    if os.path.isdir(source):
        os.makedirs(target, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(target), exist_ok=True)
        open(target, "w").close()
    mount(source, target, None, MS_BIND)
    mount(None, target, None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)


def _etc(root: str, files: list[str], uid: int) -> None:
    """The loader's cache and a passwd naming the grading user (getpass and friends look it up)."""
    os.makedirs(root + "/etc")
    for path in files:
        _bind(path, root + path)
    with open(root + "/etc/passwd", "w") as fh:
        fh.write(f"root:x:0:0::/root:/usr/sbin/nologin\nstudent:x:{uid}:{uid}::/tmp:/usr/sbin/nologin\n")
    with open(root + "/etc/group", "w") as fh:
        fh.write(f"root:x:0:\nstudent:x:{uid}:\n")


def _dev(root: str) -> None:
    """The character devices programs expect, bound from the host; /dev/shm is the exercise's, mounted later."""
    os.makedirs(root + "/dev/shm")
    for name in rootfs.DEVICES:
        target = f"{root}/dev/{name}"
        open(target, "w").close()
        mount(f"/dev/{name}", target, None, MS_BIND)


def _cpu(root: str) -> None:
    """Copies of the few processor descriptions torch's cpuinfo reads (it complains into every child's output
    without them); the box has no /proc or /sys of its own."""
    for path in CPU_FILES:
        try:
            with open(path, "rb") as fh:
                data = fh.read(1 << 20)
        except OSError:
            continue
        os.makedirs(os.path.dirname(root + path), exist_ok=True)
        with open(root + path, "wb") as fh:
            fh.write(data)


def enter(root: str) -> None:
    """Make `root` the root of this mount namespace, read-only, and detach the host's."""
    mount(None, root, None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)
    os.chdir(root)
    pivot_root(".", ".")   # the old root now sits under the new one, on the same mount point...
    umount(".", MNT_DETACH)  # ...and goes
    os.chdir("/")


def main() -> int:
    parser = argparse.ArgumentParser(prog="grader.sandbox.box")
    parser.add_argument("--plan-fd", type=int, required=True)
    parser.add_argument("--serve", action="store_true", help="run the fork server, not a worker")
    parser.add_argument("worker_args", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    with os.fdopen(args.plan_fd, encoding="utf-8") as fh:
        request = json.load(fh)
    cgroups.join(request["cgroups"])  # first: every process the worker and the student start inherits them
    mount(None, "/", None, MS_REC | MS_PRIVATE)  # nothing done here reaches the host's mount table
    build(request["root"], request["plan"], request["uid"], request["exercises"])
    enter(request["root"])
    worker = [a for a in args.worker_args if a != "--"]
    boot = SERVER_BOOT if args.serve else BOOT
    os.execve(request["plan"]["interpreter"], ["python3", "-I", "-S", "-c", boot, *worker], ENVIRONMENT)
    return 1  # not reached


if __name__ == "__main__":
    sys.exit(main())
