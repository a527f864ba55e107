"""Inside a child: import the student's file, run a group of probes, write one observation per probe."""

from __future__ import annotations

import functools
import hashlib
import importlib
import importlib.util
import os
import random
import sys
import time

import torch

from grader.worker import protocol
from grader.worker.probe import ProbeContext, describe_exception, probes_of, raised_in


def load_probe_groups(probes_module: str) -> list[list[str]]:
    """Probes split into the groups that share a child: consecutive plain probes, each isolated one alone."""
    groups: list[list[str]] = []
    current: list[str] = []
    for spec in probes_of(importlib.import_module(probes_module)):
        if spec.isolated:
            if current:
                groups.append(current)
                current = []
            groups.append([spec.name])
        else:
            current.append(spec.name)
    if current:
        groups.append(current)
    return groups


def probe_seed(course_seed: int, exercise: str, probe: str) -> int:
    """Each probe's own seed, derived from the course seed: stable, and different for every probe."""
    digest = hashlib.sha256(f"{course_seed}:{exercise}:{probe}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & ((1 << 62) - 1)


def run_probes(job: dict, names: list[str], course_seed: int, ack_fd: int | None = None, write_import: bool = True) -> None:
    """Import the student's file and run the probes `names`, writing one observation each. Each observation's
    digests go to `ack_fd`, the worker's proof that the grader, not student code, wrote that file."""
    os.chdir(job["workdir"])
    specs = {s.name: s for s in probes_of(importlib.import_module(job["probes_module"]))}
    student_file = os.path.abspath(job["student_file"])
    hooks = ForbiddenCalls(job.get("forbidden", []), student_file)
    hooks.install()
    guard = Guard(importlib.import_module(job["probes_module"]))

    started = time.perf_counter()
    student, status, error = import_student(student_file, job["module_name"])
    changed = guard.check()
    if changed:
        student, status, error = None, protocol.RAISED, tampering(changed)
    if write_import:  # the first child of the exercise records the import; later ones import it again
        ctx = ProbeContext(protocol.IMPORT_PROBE, 0, job["workdir"], student_file)
        acknowledge(ack_fd, ctx.name, ctx.write(job["obs_dir"], status, error, hooks.take(), time.perf_counter() - started))
    if student is None:
        return

    for name in names:
        seed = probe_seed(course_seed, job["id"], name)
        ctx = ProbeContext(name, seed, job["workdir"], student_file)
        torch.manual_seed(seed)
        random.seed(seed)
        status, error = protocol.OK, None
        started = time.perf_counter()
        try:
            specs[name].fn(student, ctx)
        except BaseException as exc:  # noqa: BLE001 - everything student code throws is an observation
            status, error = classify(exc, student_file)
        changed = guard.check()
        if changed:
            status, error = protocol.RAISED, tampering(changed)
        acknowledge(ack_fd, name, ctx.write(job["obs_dir"], status, error, hooks.take(), time.perf_counter() - started))


def acknowledge(ack_fd: int | None, name: str, digests: tuple[str, str | None]) -> None:
    if ack_fd is not None:
        os.write(ack_fd, f"{name} {digests[0]} {digests[1] or '-'}\n".encode())


def import_student(path: str, module_name: str):
    """Import the student's file under its own name (dataclasses need it in sys.modules)."""
    try:
        spec = importlib.util.spec_from_file_location(module_name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module
        spec.loader.exec_module(module)
    except BaseException as exc:  # noqa: BLE001
        sys.modules.pop(module_name, None)
        status, error = classify(exc, path)
        return None, status, error
    return module, protocol.OK, None


def classify(exc: BaseException, student_file: str) -> tuple[str, dict]:
    """`not_implemented` only when the student's own file raised NotImplementedError (an untouched stub)."""
    error = describe_exception(exc, student_file)
    if isinstance(exc, NotImplementedError) and raised_in(exc, student_file):
        return protocol.NOT_IMPLEMENTED, error
    return protocol.RAISED, error


_MISSING = object()
_gettrace, _getprofile, _settrace, _setprofile = sys.gettrace, sys.getprofile, sys.settrace, sys.setprofile


class Guard:
    """What probes measure with must stay what it was while student code runs next to them.

    A probe computes in the student's process (`float((a - b).abs().max())`), so a submission that replaces
    `builtins.float`, `torch.Tensor.max` or `torch.allclose` could make a wrong answer measure as right.
    The guard takes a snapshot of those namespaces before the student's module is imported and compares
    after the import and after each probe: anything replaced or removed (or, on a class, added) is put back,
    and the import or probe that ran is recorded as tampering instead of what it measured.

    It catches a submission that patches and leaves the patch in place; code written to patch and undo
    within one call, or to disable this guard, is beyond what an in-process check can stop.
    """

    IGNORED = frozenset({"__warningregistry__", "__slotnames__"})   # caches Python fills in (warnings, pickle)
    # torch replaces these itself when a submodule is first imported (torch._dynamo wraps manual_seed): a
    # wrapper of the original is accepted there, and nowhere else.
    SELF_WRAPPED = frozenset({"torch.manual_seed"})

    def __init__(self, probes_module):
        import builtins
        import json
        import math

        import safetensors.torch
        import torch.linalg
        import torch.nn.functional
        import torch.testing

        from grader.worker import probe as probe_module
        from grader.worker import protocol as protocol_module

        modules = [("builtins", builtins), ("math", math), ("json", json), ("os", os), ("os.path", os.path),
                   ("torch", torch), ("torch.nn", torch.nn), ("torch.nn.functional", torch.nn.functional),
                   ("torch.linalg", torch.linalg), ("torch.testing", torch.testing),
                   ("safetensors.torch", safetensors.torch), ("grader.worker.probe", probe_module),
                   ("grader.worker.protocol", protocol_module), ("grader.worker.runner", sys.modules[__name__]),
                   (probes_module.__name__, probes_module)]
        classes = [("torch.Tensor", torch.Tensor), ("torch.nn.Module", torch.nn.Module),
                   ("torch.nn.Parameter", torch.nn.Parameter), ("ProbeContext", ProbeContext), ("Guard", Guard)]
        self.spaces = [(label, m.__dict__, None, dict(m.__dict__)) for label, m in modules]
        self.spaces += [(label, c.__dict__, c, dict(c.__dict__)) for label, c in classes]

    def check(self) -> list[str]:
        """Dotted names changed since the snapshot (each one already put back); empty when none."""
        changed = []
        for label, now, cls, saved in self.spaces:
            for key, value in saved.items():
                if key not in self.IGNORED and now.get(key, _MISSING) is not value:
                    if f"{label}.{key}" in self.SELF_WRAPPED and getattr(now.get(key), "__wrapped__", None) is value:
                        saved[key] = now[key]
                        continue
                    changed.append(f"{label}.{key}")
                    if cls is None:
                        now[key] = value
                    else:
                        type.__setattr__(cls, key, value)
            if cls is not None:
                for key in [k for k in now if k not in saved and k not in self.IGNORED]:
                    changed.append(f"{label}.{key}")
                    type.__delattr__(cls, key)
        if _gettrace() is not None or _getprofile() is not None:
            changed.append("sys.settrace")
            _settrace(None)
            _setprofile(None)
        return changed


def tampering(changed: list[str]) -> dict:
    """The error recorded for an import or probe during which the student's code changed the guarded names."""
    shown = ", ".join(changed[:8]) + (f" and {len(changed) - 8} more" if len(changed) > 8 else "")
    return {"type": "Tampering", "message": f"replaced {shown}", "where": None, "frames": [], "tampered": changed[:40]}


class ForbiddenCalls:
    """Wraps the course's forbidden APIs so that a call made from the student's file is recorded (and still works)."""

    def __init__(self, dotted_names: list[str], student_file: str):
        self.dotted_names = dotted_names
        self.student_file = student_file
        self.calls: list[dict] = []

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
        @functools.wraps(fn)
        def recorded(*args, **kwargs):
            where = self._student_line()
            if where and not any(c["call"] == dotted and c["where"] == where for c in self.calls):
                self.calls.append({"call": dotted, "where": where})
            return fn(*args, **kwargs)

        return recorded

    def _student_line(self) -> str | None:
        frame = sys._getframe(2)
        while frame is not None:
            if os.path.abspath(frame.f_code.co_filename) == self.student_file:
                return f"{os.path.basename(self.student_file)}:{frame.f_lineno}"
            frame = frame.f_back
        return None

    def take(self) -> list[dict]:
        calls, self.calls = self.calls, []
        return calls
