"""Model handles: what student code is given in place of a model, a function or a trainer of the course's.

A handle holds a connection to the model process (grader/models/server.py) and the number the process gave the object
there; each call crosses to that process as a frame of grader/models/wire.py, tensors by value, and its answer comes
back the same way. No object, code or source of the course's enters this process: every handle of every entry is an
object of the same few classes of this module, holding a number. The calls are COURSE.md §12's:

    model(tokens) -> logits; model.eval(); model.train(); model.config; model.named_parameters();
    model.gradients(tokens, targets); make_batch(texts) -> (inputs, targets);
    trainer.new() -> run; trainer.load(path) -> run; run.step() -> float; run.save(path); run.parameters()

Whatever goes wrong in the model process reaches the caller as a RuntimeError in the grader's words (`ModelError`):
an exception of the model's own is named by its builtin type alone. `run.save(path)` writes at `path` a token that
names the state the model process saved and keeps; `trainer.load(path)` reads it back.

The connection is made before any student code runs, by the process that will run it (`attach`: the sandbox's
worker child, as root, before it drops its privileges; the plain route's child), and kept here for the probes.
"""

from __future__ import annotations

import os
import select
import socket
import subprocess
import sys
import time
import types
from typing import Any

import torch

from grader.models import wire

ANSWER_WAIT_S = 60.0   # past the model process's own per-call limit: a process that says nothing by then is lost
TOKEN_FILE_BYTES = 256
WAITS = sys.platform != "win32"   # whether select() can wait on the connection (a pipe, on Windows, it cannot)


class ModelError(RuntimeError):
    """A call the model process could not answer, said in the grader's words."""


class Connection:
    """One stream to the model process (a connected socket, or the pipes of a model process started here)."""

    def __init__(self, read_fd: int, write_fd: int, keep: Any = None):
        self.read_fd, self.write_fd, self.keep = read_fd, write_fd, keep
        self.broken = False

    def _read_exactly(self, n: int, deadline: float) -> bytes:
        chunks, left = [], n
        while left:
            wait = deadline - time.monotonic()
            # (Windows cannot wait on a pipe: there, on the plain route, a read waits as long as the answer takes)
            if WAITS and (wait <= 0 or not select.select([self.read_fd], [], [], wait)[0]):
                raise TimeoutError
            chunk = os.read(self.read_fd, min(left, 1 << 20))
            if not chunk:
                raise EOFError
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)

    def request(self, header: dict, tensors: list[torch.Tensor] | None = None) -> tuple[Any, list[torch.Tensor]]:
        """Send one request, return the answer's value (still packed) and its tensors; ModelError otherwise."""
        if self.broken:
            raise ModelError("the grader's model process is no longer reachable (an earlier call failed)")
        frame = wire.encode(header, tensors or [])
        deadline = time.monotonic() + ANSWER_WAIT_S
        try:
            view = memoryview(frame)
            while view:
                view = view[os.write(self.write_fd, view):]
            reply, got = wire.read_frame(lambda n: self._read_exactly(n, deadline))
        except (OSError, EOFError, TimeoutError, wire.WireError):
            self.broken = True
            raise ModelError("the grader's model process did not answer: this is the grader's fault, not yours") \
                from None
        if "refused" in reply:
            raise ModelError(f"the grader's model refused the call: {reply['refused']}")
        if "raised" in reply:
            raise ModelError(f"the model raised {reply['raised']} on this call (its message is not shown)")
        return reply.get("value"), got

    def count(self, group: str) -> int:
        value, _ = self.request({"op": "count", "group": group})
        return int(value)

    def open(self, group: str, index: int) -> Any:
        """Entry `index` of `group`, as the model process serves it: a handle."""
        value, _ = self.request({"op": "open", "group": group, "index": index})
        return self.handle(value)

    def handle(self, value: dict) -> Any:
        cls = HANDLES.get(str(value.get("kind"))) if isinstance(value, dict) else None
        if cls is None or not isinstance(value.get("$h"), int):
            raise ModelError("the grader's model process answered with something that is not a handle")
        return cls(self, value["$h"])

    def call(self, handle: int, method: str, *args: Any) -> Any:
        tensors: list[torch.Tensor] = []
        packed = wire.pack(list(args), tensors)
        value, got = self.request({"op": "call", "handle": handle, "method": method, "args": packed}, tensors)
        return wire.unpack(value, got, self.handle)


class _Handle:
    __slots__ = ("_connection", "_handle")
    _connection: Connection
    _handle: int

    def __init__(self, connection: Connection, handle: int):
        object.__setattr__(self, "_connection", connection)
        object.__setattr__(self, "_handle", handle)

    def _call(self, method: str, *args: Any) -> Any:
        return self._connection.call(self._handle, method, *args)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} handle>"


def _tensor(what: str, value: Any) -> torch.Tensor:
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"{what} must be a torch.Tensor, not {type(value).__name__}")
    return wire.to_plain(value)


class Model(_Handle):
    """A model of exercise 9's contract, in the model process."""

    __slots__ = ()

    def __call__(self, tokens: torch.Tensor) -> torch.Tensor:
        return self._call("forward", _tensor("tokens", tokens))

    def eval(self) -> Model:
        self._call("eval")
        return self

    def train(self) -> Model:
        self._call("train")
        return self

    @property
    def config(self) -> types.SimpleNamespace:
        return types.SimpleNamespace(**self._call("config"))

    def named_parameters(self) -> list[tuple[str, torch.Tensor]]:
        return [tuple(pair) for pair in self._call("named_parameters")]

    def gradients(self, tokens: torch.Tensor, targets: torch.Tensor) -> dict[str, torch.Tensor | None]:
        return self._call("gradients", _tensor("tokens", tokens), _tensor("targets", targets))


class Function(_Handle):
    """A function (`make_batch`), in the model process."""

    __slots__ = ()

    def __call__(self, *args: Any) -> Any:
        try:
            wire.pack(list(args), [])
        except wire.WireError as exc:
            raise TypeError(str(exc)) from None
        return self._call("call", *args)


class Trainer(_Handle):
    """A trainer: `new()` starts a run, `load(path)` resumes one that `run.save(path)` wrote."""

    __slots__ = ()

    def new(self) -> Run:
        return self._call("new")

    def load(self, path: str | os.PathLike) -> Run:
        with open(path, "rb") as fh:
            token = fh.read(TOKEN_FILE_BYTES).decode("ascii", "replace").strip()
        return self._call("load", token)


class Run(_Handle):
    """A trainer's run: `step()` takes one step and returns its loss."""

    __slots__ = ()

    def step(self) -> float:
        return float(self._call("step"))

    def save(self, path: str | os.PathLike) -> None:
        value = self._call("save")
        token = value.get("$file") if isinstance(value, dict) else None
        if not isinstance(token, str):
            raise ModelError("the grader's model process did not save the run")
        with open(path, "w", encoding="ascii") as fh:
            fh.write(token)

    def parameters(self) -> dict[str, torch.Tensor]:
        return self._call("parameters")


HANDLES: dict[str, type[_Handle]] = {"model": Model, "function": Function, "trainer": Trainer, "run": Run}

_connection: Connection | None = None


def connection() -> Connection | None:
    """The connection `attach` made in this process (None where the exercise has no model process)."""
    return _connection


def attach(job: dict, jail: dict | None = None) -> None:
    """Connect this process to the exercise's model process, when the job names one (`models`): a socket in the
    supervisor's folder (reached through its descriptor in the box, by path elsewhere), or, on the plain route, a
    model process started here with its setup. Called before any student code runs; an OSError is the grader's."""
    global _connection
    spec = job.get("models")
    if not spec:
        return
    if "spawn" in spec:
        from grader.sandbox.levels import run_module

        proc = subprocess.Popen([*run_module("grader.models.server"), "--stdio"], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=sys.stderr.fileno() if _has_fd(sys.stderr) else None)
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write((__import__("json").dumps(spec["spawn"]) + "\n").encode())
        proc.stdin.flush()
        _connection = Connection(proc.stdout.fileno(), proc.stdin.fileno(), keep=proc)
        return
    scratch_fd = (jail or {}).get("scratch_fd")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    if scratch_fd is None:
        sock.connect(_short(spec["socket"]))
    else:   # the box: the folder is outside its root, reached by its descriptor alone (no /proc path to it)
        here = os.open(".", os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fchdir(scratch_fd)
            sock.connect(spec["socket"])
        finally:
            os.fchdir(here)
            os.close(here)
    _connection = Connection(sock.fileno(), sock.fileno(), keep=sock)


def _has_fd(stream: Any) -> bool:
    try:
        stream.fileno()
        return True
    except (AttributeError, OSError, ValueError):
        return False


def _short(path: str) -> str:
    """A socket's path short enough for `sun_path` (108 bytes): through its folder's descriptor where it is longer
    (Linux; the descriptor stays open as long as the process)."""
    if len(path.encode()) < 100 or not sys.platform.startswith("linux"):
        return path
    folder = os.open(os.path.dirname(path), os.O_RDONLY | os.O_DIRECTORY)
    return f"/proc/self/fd/{folder}/{os.path.basename(path)}"
