"""Forbidden APIs, detected where no alias can go around them, and decided where student code cannot reach.

Two hooks, both active while the exercise's import and probes run:

- `ForbiddenOps`, a TorchDispatchMode: every aten operator that reaches the dispatcher passes through it,
  whichever Python name (F.gelu, torch.gelu, torch._C._VariableFunctions.gelu, torch.ops.aten.gelu) or file
  (code compiled under another file name) it came from. It sits below autograd, so with or without
  requires_grad it sees the same operators; composite operators (aten::linear, say) decompose before reaching
  it, so course.toml names what they decompose into.
- `ForbiddenCalls`, wrappers around Python-level classes and functions whose work leaves no operator of its
  own (nn.MultiheadAttention runs on ordinary matmuls and softmax).

Where the verdict comes from: each hook writes what it sees at once, as it happens, on the child's result pipe
(`op <operator>` for every operator dispatched, `call <name>` for every forbidden call) to the worker, a process
that never runs student code. The worker alone compares those names with the course's forbidden list (it holds
its own copy) and reports the forbidden ones it saw; the judge fails `no_forbidden_api` on them. So no state of
this process decides: a name once written cannot be taken back, and emptying a list, a set or a frame's locals
here changes nothing. What this process keeps (`OPERATORS`, the `Recorder`) only says at which line of the
student's file a forbidden call was made, for the message.

What stays possible in this process (see the README's out-of-scope list): code written against this module can
keep an operator from reaching the hook (torch's `_DisableTorchDispatch`, popping the mode and pushing it back
within one call) or speak the pipe's protocol itself. `bind` sets everything before the student's import, and the
runner's guard watches this module, the hooks' classes and the forbidden operators' objects, so that a patch left
in place after a call is caught as tampering.

What counts is everything recorded while the exercise runs, wherever the code says it was compiled: the
grader's own probe code issues no forbidden operator and builds no forbidden class (the reference solutions
pass `no_forbidden_api`, which proves it), and any attribution by frames would trust file names and globals
a submission chooses. Frames serve only the message: the student's line when one is on the stack.
"""

from __future__ import annotations

import importlib
import types
import os
import sys

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from grader.worker import protocol

# Bound once by `bind`, before the student's import, and then only read (the guard watches this module's names):
OPERATORS: frozenset[str] = frozenset()   # the course's forbidden aten operators: whose calls get a line noted
STREAM = -1                               # the result pipe's descriptor, where every operator's name is written
_write, _OP, _CALL, _NL = os.write, protocol.OP, protocol.CALL, b"\n"


class Recorder:
    """The forbidden calls of one import or probe, each call and place once: what the message names."""

    def __init__(self, student_file: str):
        self.student_file = student_file
        self.calls: list[dict] = []
        self._seen: set[tuple[str, str | None]] = set()   # each call and place once, found in constant time

    def note(self, call: str) -> None:
        where = self._student_line()
        if (call, where) not in self._seen:
            self._seen.add((call, where))
            self.calls.append({"call": call, "where": where})

    def take(self) -> list[dict]:
        calls, self.calls, self._seen = self.calls, [], set()
        return calls

    def _student_line(self) -> str | None:
        frame: types.FrameType | None = sys._getframe(2)
        while frame is not None:
            if os.path.abspath(frame.f_code.co_filename) == self.student_file:
                return f"{os.path.basename(self.student_file)}:{frame.f_lineno}"
            frame = frame.f_back
        return None


def bind(stream: int, operators: list[str]) -> None:
    """Before the student's import: where the hooks write, and which operators' calls get a line noted."""
    global STREAM, OPERATORS
    STREAM, OPERATORS = stream, frozenset(operators)


def watched(call, recorder: Recorder, *args):
    """`call(*args)` (student code, or a probe calling it) with every operator it dispatches written on the stream,
    when the exercise forbids any operator."""
    if not OPERATORS:
        return call(*args)
    with ForbiddenOps(recorder):
        return call(*args)


def operator_objects() -> list[tuple[str, dict]]:
    """The namespaces of the forbidden operators' Python objects (torch.ops.aten.<op> and its overloads), whose
    `_schema` says the name the hook writes: for the guard to watch."""
    spaces = []
    for name in sorted(OPERATORS):
        namespace, _, op = name.partition("::")
        try:
            packet = getattr(getattr(torch.ops, namespace), op)
        except (AttributeError, RuntimeError):
            continue   # an operator this torch does not have: nothing can call it
        spaces.append((f"torch.ops.{namespace}.{op}", vars(packet)))
        for overload in packet.overloads():
            spaces.append((f"torch.ops.{namespace}.{op}.{overload}", vars(getattr(packet, overload))))
    return spaces


class ForbiddenOps(TorchDispatchMode):
    """Writes the name of every aten operator that reaches the dispatcher on the stream; notes the student's line of
    each forbidden one (`aten::native_layer_norm`) for the message."""

    def __init__(self, recorder: Recorder):
        super().__init__()
        self.recorder = recorder

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func._schema.name
        _write(STREAM, _OP + name.encode() + _NL)   # first: whatever the call does next, the name is out
        if name in OPERATORS:
            self.recorder.note(name)
        return func(*args, **(kwargs or {}))


class ForbiddenCalls:
    """Wraps the course's forbidden Python-level APIs so that every call is written on the stream and noted (and
    still works)."""

    def __init__(self, dotted_names: list[str], recorder: Recorder):
        self.dotted_names = dotted_names
        self.recorder = recorder

    def install(self) -> None:
        for dotted in self.dotted_names:
            owner_name, attr = dotted.rsplit(".", 1)
            owner = importlib.import_module(owner_name)
            target = getattr(owner, attr)
            if isinstance(target, type):
                # a class: its __init__ is wrapped (getattr/setattr: mypy reads `target.__init__` as an instance's)
                setattr(target, "__init__", self._wrap(getattr(target, "__init__"), dotted))  # noqa: B009, B010
            else:
                setattr(owner, attr, self._wrap(target, dotted))

    def _wrap(self, fn, dotted: str):
        note, line, stream, write = self.recorder.note, _CALL + dotted.encode() + _NL, STREAM, _write

        # no functools.wraps: its __wrapped__ would hand the unrecorded original to whoever asks
        def recorded(*args, **kwargs):
            write(stream, line)
            note(dotted)
            return fn(*args, **kwargs)

        recorded.__name__ = getattr(fn, "__name__", dotted)
        return recorded
