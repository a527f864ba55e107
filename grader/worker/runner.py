"""Inside a child: import the student's file, run a group of probes, write one observation per probe."""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import os
import random
import sys
import time
import traceback
from itertools import repeat
from operator import is_
from types import FunctionType

import torch

from grader.worker import protocol
from grader.worker.forbidden import ForbiddenCalls, ForbiddenOps, Recorder
from grader.worker.probe import (GraderBug, ProbeContext, describe_exception, is_stub_raise, probes_of,
                                 raised_by_grader)

_write = os.write  # bound before any student import: the acknowledgement never looks os.write up again


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
    forbidden = Recorder(student_file)
    operators = [name for name in job.get("forbidden", []) if "::" in name]   # aten::native_layer_norm
    ForbiddenCalls([name for name in job.get("forbidden", []) if "::" not in name], forbidden).install()
    guard = Guard(importlib.import_module(job["probes_module"]))
    # The guard verifies everything else; its own code is verified here, in this frame, whose code a
    # submission cannot swap while it runs.
    check = guard.check
    own_code = [(f, f.__code__, f.__defaults__) for f in (check.__func__, _parts, _same)]

    def verified_check() -> list[str]:
        for f, code, defaults in own_code:
            if f.__code__ is not code or f.__defaults__ is not defaults:
                return [f"grader.worker.runner.{f.__name__}"]
        return check()

    def watched(call):
        """Run `call` (student code, or a probe calling it) with the forbidden operators recorded, if any."""
        if not operators:
            return call()
        with ForbiddenOps(operators, forbidden):
            return call()

    started = time.perf_counter()
    if ack_fd is not None:
        os.write(ack_fd, protocol.STARTED + b"\n")  # from here on, what goes wrong may be the student's doing
    student, status, error = watched(lambda: import_student(student_file, job["module_name"]))
    changed = verified_check()
    if changed:
        student, status, error = None, protocol.RAISED, tampering(changed)
    if write_import:  # the first child of the exercise records the import; later ones import it again
        ctx = ProbeContext(protocol.IMPORT_PROBE, 0, job["workdir"], student_file)
        acknowledge(ack_fd, ctx.name, ctx.write(job["obs_dir"], status, error, forbidden.take(), time.perf_counter() - started))
    if student is None:
        return

    for name in names:
        seed = probe_seed(course_seed, job["id"], name)
        ctx = ProbeContext(name, seed, job["workdir"], student_file)
        torch.manual_seed(seed)
        random.seed(seed)
        status, error = protocol.OK, None
        started = time.perf_counter()
        if not guard.lasting:  # a change that could not be put back: no later probe of this process measures
            try:
                watched(lambda: specs[name].fn(student, ctx))
            except BaseException as exc:  # noqa: BLE001 - everything student code throws is an observation
                status, error = classify(exc, student_file, student)
            changed = verified_check()
        if changed:
            status, error = protocol.RAISED, tampering(changed)
        acknowledge(ack_fd, name, ctx.write(job["obs_dir"], status, error, forbidden.take(), time.perf_counter() - started))


def acknowledge(ack_fd: int | None, name: str, digests: tuple[str, str | None]) -> None:
    if ack_fd is not None:
        _write(ack_fd, f"{name} {digests[0]} {digests[1] or '-'}\n".encode())


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


def classify(exc: BaseException, student_file: str, student=None) -> tuple[str, dict]:
    """`not_implemented` only when a `raise NotImplementedError` of the student's own file raised it (an untouched
    stub; not torch raising NotImplementedError on a student's line); `grader_fault` when a probe (given the imported
    `student`) raised on its own, with no student call running."""
    error = describe_exception(exc, student_file)
    if is_stub_raise(exc, student_file):
        return protocol.NOT_IMPLEMENTED, error
    if student is not None and raised_by_grader(exc, student_file, student):
        error["grader_where"] = grader_frame(exc)
        return protocol.GRADER_FAULT, error
    return protocol.RAISED, error


def grader_frame(exc: BaseException) -> str | None:
    """Where in grader code an exception of the grader's own was raised: its innermost frame in `grader/`."""
    found = None
    origin = exc.__cause__ if isinstance(exc, GraderBug) and exc.__cause__ is not None else exc
    for frame in traceback.extract_tb(origin.__traceback__):
        if f"{os.sep}grader{os.sep}" in frame.filename:
            found = f"{frame.filename.rsplit(os.sep + 'grader' + os.sep, 1)[1]}:{frame.lineno} in {frame.name}"
    return found


_MISSING = object()
_gettrace, _getprofile, _settrace, _setprofile = sys.gettrace, sys.getprofile, sys.settrace, sys.setprofile
_function_modes, _pop_function_mode = torch._C._len_torch_function_stack, torch._C._pop_torch_function_stack
_dispatch_modes, _pop_dispatch_mode = torch._C._len_torch_dispatch_stack, torch._C._pop_torch_dispatch_stack
_WRAPPERS = (staticmethod, classmethod)


# The guard's own functions take every global and builtin they use as a default, bound now: a submission that
# replaces builtins.all or runner._MISSING must not change how the guard looks.
def _parts(value, type=type, tuple=tuple, property=property, FunctionType=FunctionType, _WRAPPERS=_WRAPPERS,
           ValueError=ValueError) -> tuple:
    """The objects a patch can swap behind a name without changing what the name holds: a function's code,
    defaults and closure (and, one level down, those of the functions its closure holds: torch wraps many
    Tensor methods), a property's accessors, the function inside a staticmethod or classmethod."""
    parts, pending = [], [(value, 0)]
    while pending:
        item, depth = pending.pop()
        parts.append(item)
        kind = type(item)
        if kind in _WRAPPERS:
            pending.append((item.__func__, depth))
        elif kind is property:
            pending += [(item.fget, depth), (item.fset, depth), (item.fdel, depth)]
        elif kind is FunctionType and depth < 2:
            parts += [item.__code__, item.__defaults__]
            kwdefaults = item.__kwdefaults__
            if kwdefaults:
                parts += [*kwdefaults.keys(), *kwdefaults.values()]
            for cell in item.__closure__ or ():
                try:
                    pending.append((cell.cell_contents, depth + 1))
                except ValueError:  # an empty cell
                    parts.append(None)
    return tuple(parts)


def _same(a: tuple, b: tuple, len=len, zip=zip) -> bool:
    """Identity, part for part: never ==, which a planted object could answer."""
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        if x is not y:
            return False
    return True


class Guard:
    """What probes measure with, and the path from their results to the files, must stay what it was while
    student code runs next to them.

    A probe computes in the student's process (`float((a - b).abs().max())`), so a submission that replaces
    `builtins.float`, `torch.Tensor.max`, the code of a method torch.Tensor defines in Python, or a class
    attribute of a serialiser, could make a wrong answer measure as right. The guard takes a snapshot of
    those namespaces (module dicts, class dicts, and the code, defaults and closures of every Python function
    in them) before the student's module is imported, and compares after the import and after each probe:
    anything replaced, removed or (on a class) added is put back and the import or probe that ran is recorded
    as tampering instead of what it measured; a function changed in place (its code, defaults or closure) is
    not put back, so every later probe of the process is recorded as tampering too. Tracing hooks and torch
    modes left behind are removed, so that nothing of the student's runs while the observation is written.

    It catches a submission that patches and leaves the patch in place; code written to patch and undo
    within one probe, or to disable this guard, is beyond what an in-process check can stop.
    """

    IGNORED = frozenset({"__warningregistry__", "__slotnames__"})   # caches Python fills in (warnings, pickle)
    # torch replaces these itself when a submodule is first imported (torch._dynamo wraps manual_seed): a
    # wrapper of the original is accepted there, and nowhere else.
    SELF_WRAPPED = frozenset({"torch.manual_seed"})

    def __init__(self, probes_module):
        import builtins
        import json
        import json.encoder
        import math

        import safetensors.torch
        import torch._tensor
        import torch.functional
        import torch.linalg
        import torch.nn.functional
        import torch.testing
        import torch.utils._python_dispatch as python_dispatch

        from grader.worker import forbidden as forbidden_module
        from grader.worker import probe as probe_module
        from grader.worker import protocol as protocol_module

        modules = [("builtins", builtins), ("math", math), ("json", json), ("json.encoder", json.encoder),
                   ("os", os), ("os.path", os.path), ("torch", torch), ("torch._C", torch._C),
                   ("torch._C._nn", torch._C._nn), ("torch._tensor", torch._tensor),
                   ("torch.functional", torch.functional), ("torch.nn", torch.nn),
                   ("torch.nn.functional", torch.nn.functional), ("torch.linalg", torch.linalg),
                   ("torch.testing", torch.testing), ("torch.utils._python_dispatch", python_dispatch),
                   ("safetensors.torch", safetensors.torch), ("grader.worker.probe", probe_module),
                   ("grader.worker.protocol", protocol_module), ("grader.worker.forbidden", forbidden_module),
                   ("grader.worker.runner", sys.modules[__name__]), (probes_module.__name__, probes_module)]
        classes = [("torch.Tensor", torch.Tensor), ("torch.nn.Module", torch.nn.Module),
                   ("torch.nn.Parameter", torch.nn.Parameter), ("json.JSONEncoder", json.JSONEncoder),
                   ("TorchDispatchMode", python_dispatch.TorchDispatchMode), ("ProbeContext", ProbeContext),
                   ("Guard", Guard), ("Recorder", Recorder), ("ForbiddenOps", ForbiddenOps),
                   ("ForbiddenCalls", ForbiddenCalls)]
        # (label, the live namespace, whether a name added to it counts: on a class or an instance it hides
        # what the class below defines)
        spaces = [(label, m.__dict__, False) for label, m in modules] + [(label, c.__dict__, True) for label, c in classes]
        spaces.append(("json._default_encoder", vars(json._default_encoder), True))   # json.dumps calls its encode
        self.spaces = []
        for label, now, additions in spaces:
            saved = {k: _parts(v) for k, v in now.items()}
            # most names hold a builtin, a class or a constant, compared by identity in C in one pass; the
            # Python functions among them (`deep`) need their parts compared one by one
            shallow = [(k, parts[0]) for k, parts in saved.items() if len(parts) == 1]
            deep = {k: parts for k, parts in saved.items() if len(parts) > 1}
            self.spaces.append((label, now, additions, saved, tuple(k for k, _ in shallow), tuple(v for _, v in shallow), deep))
        self.classes = dict(classes)
        self.modes = (_function_modes(), _dispatch_modes())
        self.lasting = False   # a change check() could not put back

    def check(self, _parts=_parts, _same=_same, all=all, map=map, is_=is_, repeat=repeat, len=len, type=type,
              dict=dict, getattr=getattr, FunctionType=FunctionType, _MISSING=_MISSING, _gettrace=_gettrace,
              _getprofile=_getprofile, _settrace=_settrace, _setprofile=_setprofile, _function_modes=_function_modes,
              _dispatch_modes=_dispatch_modes, _pop_function_mode=_pop_function_mode,
              _pop_dispatch_mode=_pop_dispatch_mode, setattr=type.__setattr__, delattr=type.__delattr__) -> list[str]:
        """Dotted names changed since the snapshot (each replaced or added name already put back); empty when none."""
        changed = []
        for label, now, additions, saved, keys, values, deep in self.spaces:
            owner = now if type(now) is dict else None   # a class's mappingproxy is changed through the class
            intact = all(map(is_, map(now.get, keys, repeat(_MISSING)), values)) and len(now) == len(saved)
            for key, parts in (deep if intact else saved).items():
                value = now.get(key, _MISSING)
                if key in self.IGNORED or (value is parts[0] and _same(_parts(value), parts)):
                    continue
                if (f"{label}.{key}" in self.SELF_WRAPPED and type(value) is FunctionType
                        and getattr(value, "__wrapped__", None) is parts[0]):
                    saved[key] = _parts(value)
                    continue
                changed.append(f"{label}.{key}")
                if value is parts[0]:
                    self.lasting = True
                elif owner is not None:
                    owner[key] = parts[0]
                else:
                    setattr(self.classes[label], key, parts[0])
            if additions and not intact:
                for key in [k for k in now if k not in saved and k not in self.IGNORED]:
                    changed.append(f"{label}.{key}")
                    if owner is not None:
                        del owner[key]
                    else:
                        delattr(self.classes[label], key)
        if _gettrace() is not None or _getprofile() is not None:
            changed.append("sys.settrace")
            _settrace(None)
            _setprofile(None)
        if (_function_modes(), _dispatch_modes()) != self.modes:
            changed.append("torch's mode stack")
            while _function_modes() > self.modes[0]:
                _pop_function_mode()
            while _dispatch_modes() > self.modes[1]:
                _pop_dispatch_mode()
        return changed


def tampering(changed: list[str]) -> dict:
    """The error recorded for an import or probe during which the student's code changed the guarded names."""
    shown = ", ".join(changed[:8]) + (f" and {len(changed) - 8} more" if len(changed) > 8 else "")
    return {"type": "Tampering", "message": f"replaced {shown}", "where": None, "frames": [], "tampered": changed[:40]}
