"""Inside a child: load the exercise's probe code, import the student's file, and run the steps the worker asks
for, handing the worker each step's observation (the worker writes the files; grader/worker/__main__.py)."""

from __future__ import annotations

import importlib.util
import marshal
import os
import random
import select
import sys
import tempfile
import time
import traceback
import types
from collections.abc import Sequence
from itertools import repeat
from typing import cast
from operator import is_
from types import FunctionType

import torch

from grader.worker import forbidden, protocol
from grader.worker.forbidden import ForbiddenCalls, ForbiddenOps, Recorder
from grader.worker.probe import (GraderBug, ProbeContext, describe_exception, is_stub_raise, probes_of,
                                 raised_by_grader)

# Bound before any student import: the channel never looks these up again.
_read, _write, _select, _join = os.read, os.write, select.select, b"".join
_RESULT, _NEXT, _NL = protocol.RESULT, protocol.NEXT + b"\n", b"\n"


def read_probe_code(job: dict, jail: dict) -> list[tuple[str, bytes]]:
    """The compiled code of the exercise's probe module and of the probe modules it imports, as the supervisor
    staged it for this exercise alone: read in the child before it drops its privileges (the files are root's) and
    before it lets go of the supervisor's folder (strict level), so that no other exercise's probe code is reachable."""
    code = []
    for module, name in job["probe_code"]:
        fd = os.open(f"{job['probe_code_dir']}/{name}", os.O_RDONLY | os.O_NOFOLLOW, dir_fd=jail.get("scratch_fd"))
        with os.fdopen(fd, "rb") as fh:
            code.append((module, fh.read()))
    return code


def load_probe_code(code: list[tuple[str, bytes]]):
    """Make the staged modules importable under their names, in order (the course model before the probes that
    import it); return the last one, the exercise's probe module."""
    import grader.probes

    module = None
    for name, data in code:
        compiled = marshal.loads(data)
        module = types.ModuleType(name)
        module.__package__ = grader.probes.__name__
        module.__file__ = compiled.co_filename
        module.__spec__ = importlib.util.spec_from_loader(name, None, origin=compiled.co_filename)
        sys.modules[name] = module   # first: dataclasses look their module up while the body runs
        exec(compiled, module.__dict__)
        setattr(grader.probes, name.rsplit(".", 1)[1], module)
    return module


class Channel:
    """The child's end of its two pipes to the worker: the steps it is asked to run, the observations it hands back.

    Student code runs in this process and can write on the result pipe too; what it gains by that is said in
    grader/worker/__main__.py (`Results`): a step's observation counts only with the step's own token, which the
    worker sends when it asks for that step, so nothing written can claim another step."""

    def __init__(self, steps: int, results: int):
        self.steps, self.results = steps, results
        self.pending = b""

    def started(self) -> None:
        _write(self.results, protocol.STARTED + _NL)

    def next_step(self) -> tuple[str, str, int] | None:
        """(token, probe, seed) of the step the worker gives next, asked for now; None when no step is left."""
        if _NL not in self.pending:
            _write(self.results, _NEXT)
        while _NL not in self.pending:
            try:
                chunk = _read(self.steps, 4096)
            except BlockingIOError:   # student code made the pipe non-blocking: wait for the line all the same
                _select([self.steps], [], [])
                continue
            if not chunk:
                return None
            self.pending += chunk
        line, self.pending = self.pending.split(_NL, 1)
        token, name, seed = line.decode("ascii").split(" ")
        return token, name, int(seed)

    def answer(self, token: str, observation: tuple[bytes, bytes | None]) -> None:
        text, tensors = observation
        tensors = tensors or b""
        data = _join([_RESULT, f"{token} {len(text)} {len(tensors)}".encode("ascii"), _NL, text, tensors])
        view = memoryview(data)
        while view:
            view = view[_write(self.results, view):]


def run_probes(job: dict, channel: Channel, probes_module, write_import: bool = True) -> None:
    """Import the student's file, then run the steps the worker asks for on `channel`, one at a time: the import's
    observation first when `write_import` (the exercise's first child), then probes of `probes_module`."""
    os.chdir(job["workdir"])
    # Python's temporary folder is chosen anew, by and for the student's uid: one chosen before (by the worker as
    # root, or by the fork server it was forked from) may be a folder of the grader's that this uid cannot write.
    tempfile.tempdir = None
    specs = {s.name: s for s in probes_of(probes_module)}
    student_file = os.path.abspath(job["student_file"])
    recorder = Recorder(student_file)
    # The forbidden lists are bound here, before the student's import, into names the guard watches; the verdict
    # is not theirs but the worker's, from the names the hooks write as they go (grader/worker/forbidden.py).
    forbidden.bind(channel.results, [name for name in job.get("forbidden", []) if "::" in name])
    ForbiddenCalls([name for name in job.get("forbidden", []) if "::" not in name], recorder).install()
    guard = Guard(probes_module, forbidden.operator_objects())
    # The guard verifies everything else; its own code is verified here, in this frame, whose code a
    # submission cannot swap while it runs.
    check = guard.check
    own_code = [(f, f.__code__, f.__defaults__) for f in (cast(types.MethodType, check).__func__, _parts, _same)]

    def verified_check() -> list[str]:
        for f, code, defaults in own_code:
            if f.__code__ is not code or f.__defaults__ is not defaults:
                return [f"grader.worker.runner.{f.__name__}"]
        return check()

    started = time.perf_counter()
    channel.started()   # from here on, what goes wrong may be the student's doing
    student, status, error = forbidden.watched(import_student, recorder, student_file, job["module_name"])
    changed = verified_check()
    if changed:
        student, status, error = None, protocol.ProbeStatus.RAISED, tampering(changed)
    seconds = time.perf_counter() - started
    if write_import:  # the first child of the exercise records the import; later ones import it again
        step = channel.next_step()
        if step is None:
            return
        token, name, _ = step
        if name != protocol.IMPORT_PROBE:
            raise RuntimeError(f"the worker asked for {name!r} before the import's observation")
        ctx = ProbeContext(protocol.IMPORT_PROBE, 0, job["workdir"], student_file)
        channel.answer(token, ctx.encoded(status, error, recorder.take(), seconds))
    if student is None:
        return

    while (step := channel.next_step()) is not None:
        token, name, seed = step
        ctx = ProbeContext(name, seed, job["workdir"], student_file)
        torch.manual_seed(seed)
        random.seed(seed)
        status, error = protocol.ProbeStatus.OK, None
        started = time.perf_counter()
        if not guard.lasting:  # a change that could not be put back: no later probe of this process measures
            try:
                forbidden.watched(specs[name].fn, recorder, student, ctx)
            except BaseException as exc:  # noqa: BLE001 - everything student code throws is an observation
                status, error = classify(exc, student_file, student)
            changed = verified_check()
        if changed:
            status, error = protocol.ProbeStatus.RAISED, tampering(changed)
        channel.answer(token, ctx.encoded(status, error, recorder.take(), time.perf_counter() - started))


def import_student(path: str, module_name: str):
    """Import the student's file under its own name (dataclasses need it in sys.modules)."""
    try:
        spec = importlib.util.spec_from_file_location(module_name, path)
        if spec is None or spec.loader is None:
            raise ImportError(f"no loader for {path}")
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module
        spec.loader.exec_module(module)
    except BaseException as exc:  # noqa: BLE001
        sys.modules.pop(module_name, None)
        status, error = classify(exc, path)
        return None, status, error
    return module, protocol.ProbeStatus.OK, None


def classify(exc: BaseException, student_file: str, student=None) -> tuple[str, dict]:
    """`not_implemented` only when a `raise NotImplementedError` of the student's own file raised it (an untouched
    stub; not torch raising NotImplementedError on a student's line); `grader_fault` when a probe (given the imported
    `student`) raised on its own, with no student call running."""
    error = describe_exception(exc, student_file)
    if is_stub_raise(exc, student_file):
        return protocol.ProbeStatus.NOT_IMPLEMENTED, error
    if student is not None and raised_by_grader(exc, student_file, student):
        error["grader_where"] = grader_frame(exc)
        return protocol.ProbeStatus.GRADER_FAULT, error
    return protocol.ProbeStatus.RAISED, error


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

    def __init__(self, probes_module, objects: Sequence[tuple[str, dict]] = ()):
        """`objects`: more namespaces to watch, (label, their dict): names may be changed, never added there."""
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
                   ("Guard", Guard), ("Channel", Channel), ("Recorder", Recorder), ("ForbiddenOps", ForbiddenOps),
                   ("ForbiddenCalls", ForbiddenCalls),
                   # the names a record carries (a probe's status, a limit it hit) are members of these classes
                   ("ProbeStatus", protocol_module.ProbeStatus), ("Limit", protocol_module.Limit)]
        # (label, the live namespace, whether a name added to it counts: on a class or an instance it hides
        # what the class below defines)
        spaces = ([(label, m.__dict__, False) for label, m in modules]
                  + [(label, c.__dict__, True) for label, c in classes])
        # json.dumps calls its encode
        spaces.append(("json._default_encoder", vars(vars(json)["_default_encoder"]), True))
        spaces += [(label, namespace, False) for label, namespace in objects]
        self.spaces = []
        for label, now, additions in spaces:
            saved = {k: _parts(v) for k, v in now.items()}
            # most names hold a builtin, a class or a constant, compared by identity in C in one pass; the
            # Python functions among them (`deep`) need their parts compared one by one
            shallow = [(k, parts[0]) for k, parts in saved.items() if len(parts) == 1]
            deep = {k: parts for k, parts in saved.items() if len(parts) > 1}
            self.spaces.append((label, now, additions, saved, tuple(k for k, _ in shallow),
                                tuple(v for _, v in shallow), deep))
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
