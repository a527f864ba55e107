"""The supervisor's end of a fork server (grader/worker/spawn.py): start it in a strict box, and ask it for a worker.

A strict sandbox started afresh pays torch's import (about 2 s of CPU) for every submission. A fork server pays it
once per grading process: it is a strict box like any other (new namespaces, a root that holds only the allow-list,
no host path in its memory) whose process, instead of the worker, is the server; each submission's worker is forked
from it into fresh namespaces of its own, with the submission's uid, groups and descriptors, and runs the same loop
a fresh worker runs. `ForkedWorker` stands for that worker's process where the supervisor holds a Popen for a
fresh one. Where namespaces are missing (the basic level) workers are started as before.
"""

from __future__ import annotations

import json
import os
import select
import socket
import subprocess
import threading
import time

from grader.sandbox import rootfs
from grader.sandbox.levels import Sandbox
from grader.sandbox.scratch import new_scratch, remove_scratch
from grader.sandbox.supervisor import STARTUP_SECONDS
from grader.worker.protocol import SERVER_READY as READY

PLACEHOLDER_UID = 65534   # the server's passwd names this uid; each worker's names its grading's
LOG_TAIL_BYTES = 2000
CLOSE_SECONDS = 5.0       # for the server to exit once told to


class ForkServerUnavailable(Exception):
    """The fork server would not start, or has died; the message says why."""


class ForkServer:
    """A fork server for one sandbox level (strict) and the modules the probe code imports (`preload`). Its process
    dies with the thread that started it (a parent-death signal), and every worker it forked with it: start it from
    a thread that outlives its use. Thread-safe."""

    def __init__(self, sandbox: Sandbox, preload: list[str]):
        if sandbox.level != "strict":
            raise ValueError("a fork server needs the strict level's namespaces")
        self.sandbox = sandbox
        self._lock = threading.Lock()
        self.scratch = new_scratch()
        self.log_path = self.scratch / "server.log"
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self._socket = ours
        root = self.scratch / ".root"
        root.mkdir(mode=0o700)
        plan = json.dumps({"root": str(root), "plan": rootfs.plan(), "uid": PLACEHOLDER_UID, "exercises": [],
                           "cgroups": []}).encode()
        plan_read, plan_write = os.pipe()
        os.write(plan_write, plan)   # the plan is a few kilobytes: it fits in the pipe
        os.close(plan_write)
        command = sandbox.server_command(plan_read, ["--socket-fd", str(theirs.fileno()),
                                                     "--preload", json.dumps(preload)])
        env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(self.scratch), "TMPDIR": str(self.scratch),
               "LANG": "C.UTF-8"}
        try:
            with open(self.log_path, "wb") as log:
                self.proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                             pass_fds=[plan_read, theirs.fileno()], cwd=self.scratch, env=env,
                                             start_new_session=True)
        except BaseException:
            ours.close()
            remove_scratch(self.scratch)
            raise
        finally:
            os.close(plan_read)
            theirs.close()
        self._ready = False   # it said so (its first spawn waits for that: a grading need not wait before it)
        self._broken = ""     # why it serves no more

    def _wait_ready(self) -> None:
        ready, _, _ = select.select([self._socket], [], [], STARTUP_SECONDS)
        said = self._socket.recv(256) if ready else b""
        if not said.startswith(READY):
            self._broken = f"the fork server did not start: {self.log_tail() or 'no output'}"
            raise ForkServerUnavailable(self._broken)
        self._ready = True

    def alive(self) -> bool:
        return not self._broken and self.proc.poll() is None

    def spawn(self, argv: list[str], passed: list[int], log: int, groups: list[int], uid: int | None,
              exercises: list[str]) -> ForkedWorker:
        """Fork a worker that runs with `argv` and finds each of `passed` at the same number as here, its output
        in `log`, in the control groups whose `cgroup.procs` are `groups`, for `uid` and `exercises`."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        request = json.dumps({"argv": argv, "targets": passed, "groups": len(groups), "uid": uid,
                              "exercises": exercises}).encode()
        try:
            with self._lock:
                if self._broken:
                    raise ForkServerUnavailable(self._broken)
                if not self._ready:
                    self._wait_ready()
                try:
                    socket.send_fds(self._socket, [request], [theirs.fileno(), log, *groups, *passed])
                except OSError as exc:
                    self._broken = f"the fork server is gone: {exc}; {self.log_tail()}"
                    raise ForkServerUnavailable(self._broken) from None
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        return ForkedWorker(ours)

    def close(self) -> None:
        """End the server (and, with its pid namespace, every worker it forked) and remove its scratch folder. Told
        by the end of its socket, it exits on its own, waited for, so that its time (its keepers' and workers'
        included) is counted where its grading process's is; killed when it does not within CLOSE_SECONDS."""
        self._socket.close()
        try:
            self.proc.wait(CLOSE_SECONDS)
        except subprocess.TimeoutExpired:
            pass
        try:
            os.killpg(self.proc.pid, 9)
        except (ProcessLookupError, PermissionError):
            pass
        self.proc.wait()
        remove_scratch(self.scratch)

    def log_tail(self) -> str:
        try:
            with open(self.log_path, "rb") as fh:
                fh.seek(0, os.SEEK_END)
                fh.seek(max(0, fh.tell() - LOG_TAIL_BYTES))
                return fh.read().decode("utf-8", "replace").strip()
        except OSError:
            return ""


class ForkedWorker:
    """A worker forked by a fork server, seen through its keeper's `life` socket: closing our end kills it, and the
    keeper writes its exit status (as Popen's returncode: negative for a signal) before it closes its end."""

    def __init__(self, life: socket.socket):
        self.life = life
        self.returncode: int | None = None
        self._said = b""

    def poll(self) -> int | None:
        if self.returncode is None:
            self._read(0.0)
        return self.returncode

    def kill(self) -> None:
        try:
            self.life.shutdown(socket.SHUT_WR)
        except OSError:
            pass

    def wait(self, timeout: float | None = None) -> int | None:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.returncode is None:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                break
            self._read(left)
        return self.returncode

    def _read(self, timeout: float | None) -> None:
        ready, _, _ = select.select([self.life], [], [], timeout)
        if not ready:
            return
        try:
            chunk = self.life.recv(64)
        except OSError:
            chunk = b""
        if chunk:
            self._said += chunk
            return
        # The keeper is gone: its last word is the worker's status (none: the server died, and the worker with it).
        text = self._said.decode("ascii", "replace").strip()
        self.returncode = int(text) if text.lstrip("-").isdigit() else -9
        self.life.close()

