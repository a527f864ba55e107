"""Forbidden APIs, detected where no alias can go around them.

Two hooks, both recording while the exercise's import and probes run:

- `ForbiddenOps`, a TorchDispatchMode: every aten operator that reaches the dispatcher passes through it,
  whichever Python name (F.layer_norm, torch.native_layer_norm, torch._C._VariableFunctions.embedding,
  torch.ops.aten.embedding) or file (code compiled under another file name) it came from. It sits below
  autograd, so with or without requires_grad it sees the same operators; composite operators such as
  aten::layer_norm decompose before reaching it, so course.toml names what they decompose into
  (aten::native_layer_norm).
- `ForbiddenCalls`, wrappers around Python-level classes and functions whose work leaves no operator of its
  own (nn.MultiheadAttention runs on ordinary matmuls and softmax).

What counts is everything recorded while the exercise runs, wherever the code says it was compiled: the
grader's own probe code issues no forbidden operator and builds no forbidden class (the reference solutions
pass `no_forbidden_api`, which proves it), and any attribution by frames would trust file names and globals
a submission chooses. Frames serve only the message: the student's line when one is on the stack.
"""

from __future__ import annotations

import importlib
import os
import sys

from torch.utils._python_dispatch import TorchDispatchMode


class Recorder:
    """The forbidden calls of one import or probe: each call and place once."""

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
        frame = sys._getframe(2)
        while frame is not None:
            if os.path.abspath(frame.f_code.co_filename) == self.student_file:
                return f"{os.path.basename(self.student_file)}:{frame.f_lineno}"
            frame = frame.f_back
        return None


class ForbiddenOps(TorchDispatchMode):
    """Records the course's forbidden aten operators (`aten::native_layer_norm`) as they reach the dispatcher."""

    def __init__(self, operators: list[str], recorder: Recorder):
        super().__init__()
        self.operators = frozenset(operators)
        self.recorder = recorder
        self.verdicts: dict = {}   # OpOverload -> forbidden or not, so that each operator is named once

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        forbidden = self.verdicts.get(func)
        if forbidden is None:
            forbidden = self.verdicts[func] = func._schema.name in self.operators
        if forbidden:
            self.recorder.note(func._schema.name)
        return func(*args, **(kwargs or {}))


class ForbiddenCalls:
    """Wraps the course's forbidden Python-level APIs so that every call is recorded (and still works)."""

    def __init__(self, dotted_names: list[str], recorder: Recorder):
        self.dotted_names = dotted_names
        self.recorder = recorder

    def install(self) -> None:
        for dotted in self.dotted_names:
            owner_name, attr = dotted.rsplit(".", 1)
            owner = importlib.import_module(owner_name)
            target = getattr(owner, attr)
            if isinstance(target, type):
                target.__init__ = self._wrap(target.__init__, dotted)
            else:
                setattr(owner, attr, self._wrap(target, dotted))

    def _wrap(self, fn, dotted: str):
        note = self.recorder.note

        # no functools.wraps: its __wrapped__ would hand the unrecorded original to whoever asks
        def recorded(*args, **kwargs):
            note(dotted)
            return fn(*args, **kwargs)

        recorded.__name__ = getattr(fn, "__name__", dotted)
        return recorded
