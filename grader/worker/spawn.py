"""The fork server: a process in the strict box that has imported torch and the worker's code once, and forks one
worker per submission into namespaces of the submission's own.

Theory of operation. The server is started like a strict sandbox (grader/sandbox/box.py builds the box's root,
pivots into it and execs this instead of the worker), so it imports torch from the box's own folders and no host
path is in its memory. It imports what every worker imports (`start_up`: torch with one thread, what the probe
code imports such as torch._dynamo, the worker's code) and never a probe module: each exercise's child still loads
its own exercise's probe code, staged for it alone. It never runs student code, never reads a request's exercises
or seeds (those go from the supervisor to the worker on a pipe the server only passes on), and keeps nothing of
one spawn for the next: what it receives per submission is a few descriptors and where to dup them, the grading's
uid and its exercises' names.

Per submission (`_spawn`) the forked child joins the grading's control groups (descriptors opened by the
supervisor), takes fresh mount, network, IPC and UTS namespaces and a fresh pid namespace, whose first process
(pid 1, as a fresh sandbox's worker is) becomes the worker: over the server's read-only root it mounts a fresh
/tmp, a /submission holding only that submission's exercise folders and an /etc/passwd naming its uid, puts the
supervisor's descriptors at the numbers the request names, closes every other one, resets the environment and
the random state to a fresh interpreter's, and runs the worker's loop (grader/worker/__main__.py), exactly as a
fresh worker would. The child that forked it stays outside that pid namespace, as its keeper: when the supervisor
closes its end of the `life` socket it kills the worker (and with it the whole namespace), and it writes the
worker's exit status there when the worker ends. Nothing of a submission's outlives its namespaces: their
mounts, processes and IPC objects go with them, and the server's own memory was never theirs to write.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import select
import signal
import socket
import sys

from grader.worker.syscalls import (CLONE_NEWIPC, CLONE_NEWNET, CLONE_NEWNS, CLONE_NEWPID, CLONE_NEWUTS, MNT_DETACH,
                                    MS_BIND, MS_NODEV, MS_NOSUID, MS_PRIVATE, MS_RDONLY, MS_REC, MS_REMOUNT,
                                    PR_SET_PDEATHSIG, mount, prctl, umount, unshare)
from grader.worker.protocol import SERVER_READY as READY
from grader.worker import jail

NAMESPACES = CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS | CLONE_NEWPID
MAX_FDS = 32              # descriptors one spawn request may carry
MAX_REQUEST = 1 << 16     # bytes of one spawn request
SUBMISSION, SCRATCH = "/submission", "/.scratch"   # grader/sandbox/rootfs.py's, where the box puts them


def serve(argv: list[str] | None = None) -> int:
    """Run the server on the socket the supervisor started it with, until the supervisor closes it."""
    parser = argparse.ArgumentParser(prog="grader.worker.spawn")
    parser.add_argument("--socket-fd", type=int, required=True)
    parser.add_argument("--preload", default="[]", help="JSON list of the modules the probe code imports")
    args = parser.parse_args(argv)
    from grader.worker.__main__ import start_up

    environment = dict(os.environ)   # the box's, as a fresh worker gets it
    server = socket.socket(fileno=args.socket_fd)
    version = start_up(json.loads(args.preload))
    # Its keepers are reaped as they end, never waited for: reaped (not left to the kernel), each one's CPU and its
    # worker's reach this process's children's time, and so the grading process's (`getrusage`, `time`).
    signal.signal(signal.SIGCHLD, lambda signum, frame: jail.reap_ended())   # keepers are its only children
    server.sendall(READY + b" " + version.encode())
    while True:
        try:
            data, fds, _, _ = socket.recv_fds(server, MAX_REQUEST, MAX_FDS)
        except InterruptedError:
            continue
        if not data:
            # The supervisor is gone: so is every worker, with this pid namespace. No interpreter teardown (torch's
            # modules freed one by one): the box has nothing left to flush.
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(0)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            code = 4
            try:
                server.close()   # the server's socket is the supervisor's word alone
                code = _spawn(json.loads(data), fds, environment)
            except BaseException:  # noqa: BLE001 - said into the submission's log, which the supervisor reads
                _say(fds[1] if len(fds) > 1 else 2)
            finally:
                os._exit(code)
        for fd in fds:
            os.close(fd)


def _spawn(request: dict, fds: list[int], environment: dict[str, str]) -> int:
    """The keeper: join the groups, take the namespaces, fork the worker, and watch it (see the module's docstring).
    `fds`: the life socket, the log, the groups' `cgroup.procs`, then the worker's descriptors."""
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    life, log, *rest = fds
    groups, passed = rest[:request["groups"]], rest[request["groups"]:]
    for fd in groups:   # first: every process the worker and the student start inherits them
        os.write(fd, b"0")
        os.close(fd)
    unshare(NAMESPACES)
    pid = os.fork()
    if pid == 0:
        code = 3
        try:
            os.close(life)
            os.dup2(log, 1)   # the submission's log from here on, as a fresh worker's output is
            os.dup2(log, 2)
            prctl(PR_SET_PDEATHSIG, signal.SIGKILL)   # the keeper's end is the worker's
            _enter(request)
            code = _become_worker(request, log, passed, environment)
        except BaseException:  # noqa: BLE001 - it must never return into the server's loop
            _say(2)
        finally:
            os._exit(code)
    for fd in (log, *passed):
        os.close(fd)
    return _keep(pid, life)


def _keep(pid: int, life: int) -> int:
    """Wait for the worker's end, or kill it when the supervisor closes its end of `life`; say how it ended."""
    pidfd = os.pidfd_open(pid)
    try:
        while True:
            ready, _, _ = select.select([life, pidfd], [], [])
            if pidfd in ready:
                break
            try:
                said = os.read(life, 64)
            except OSError:
                said = b""
            if not said:   # the supervisor closed it: the worker goes, and its pid namespace with it
                os.kill(pid, signal.SIGKILL)
                break
        _, status = os.waitpid(pid, 0)
    finally:
        os.close(pidfd)
    try:
        os.write(life, f"{os.waitstatus_to_exitcode(status)}\n".encode())
    except OSError:
        pass
    return 0


def _enter(request: dict) -> None:
    """The submission's own view of the server's root: a fresh /tmp, its exercises' folders, its uid's name."""
    mount(None, "/", None, MS_REC | MS_PRIVATE)   # nothing done here reaches the server's mount table
    mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, "size=16m,nr_inodes=1024,mode=1777")
    mount("tmpfs", SUBMISSION, "tmpfs", MS_NOSUID | MS_NODEV, "size=64k,nr_inodes=256,mode=0755")
    for exercise in request["exercises"]:
        os.mkdir(f"{SUBMISSION}/{exercise}", 0o755)
    mount(None, SUBMISSION, None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)
    uid = request["uid"]
    # The box's passwd and group name the server's placeholder uid: the grading's are laid over them, from a
    # tmpfs that is unmounted once they are bound (the binds keep their files).
    mount("tmpfs", SCRATCH, "tmpfs", MS_NOSUID | MS_NODEV, "size=64k,nr_inodes=16,mode=0755")
    files = {"passwd": f"root:x:0:0::/root:/usr/sbin/nologin\nstudent:x:{uid}:{uid}::/tmp:/usr/sbin/nologin\n",
             "group": f"root:x:0:\nstudent:x:{uid}:\n"}
    for name, text in files.items():
        with open(f"{SCRATCH}/{name}", "w") as fh:
            fh.write(text)
        mount(f"{SCRATCH}/{name}", f"/etc/{name}", None, MS_BIND)
        mount(None, f"/etc/{name}", None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)
    umount(SCRATCH, MNT_DETACH)
    os.chdir("/")


def _become_worker(request: dict, log: int, passed: list[int], environment: dict[str, str]) -> int:
    """Put the supervisor's descriptors where the request says, close every other one, and run the worker."""
    targets = request["targets"]
    if len(targets) != len(passed):
        raise ValueError("a spawn request names as many descriptors as it carries")
    above = max([2, log, *targets, *passed]) + 1
    moved = [os.dup2(fd, above + i) for i, fd in enumerate(passed)]   # out of the way of every target
    # Every other descriptor goes: the server's and the keeper's below them, anything above.
    os.closerange(3, above)
    os.closerange(above + len(moved), resource.getrlimit(resource.RLIMIT_NOFILE)[0])
    for fd, target in zip(moved, targets, strict=True):
        os.dup2(fd, target)   # inheritable, as a fresh worker's are
        os.close(fd)
    os.environ.clear()
    os.environ.update(environment)
    random.seed()   # a fresh interpreter's state, not the server's
    sys.argv = [sys.argv[0], *request["argv"]]   # as a fresh worker's (`-c` and its arguments)
    from grader.worker.__main__ import main

    code = main(request["argv"])
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except OSError:
        pass
    return code


def _say(fd: int) -> None:
    """The exception being handled, into `fd` (a submission's log): the supervisor shows its tail."""
    import traceback

    try:
        os.write(fd, traceback.format_exc().encode())
    except OSError:
        pass


if __name__ == "__main__":
    sys.exit(serve())
