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
from grader.worker.probe import ProbeContext, describe_exception, probes_of


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


def run_probes(job: dict, names: list[str], course_seed: int) -> None:
    os.chdir(job["workdir"])
    specs = {s.name: s for s in probes_of(importlib.import_module(job["probes_module"]))}
    student_file = os.path.abspath(job["student_file"])
    hooks = ForbiddenCalls(job.get("forbidden", []), student_file)
    hooks.install()

    started = time.perf_counter()
    student, status, error = import_student(student_file, job["module_name"])
    import_marker = os.path.join(job["obs_dir"], protocol.IMPORT_PROBE + protocol.JSON_SUFFIX)
    if not os.path.exists(import_marker):
        ctx = ProbeContext(protocol.IMPORT_PROBE, 0, job["workdir"], student_file)
        ctx.write(job["obs_dir"], status, error, hooks.take(), time.perf_counter() - started)
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
        ctx.write(job["obs_dir"], status, error, hooks.take(), time.perf_counter() - started)


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
    if isinstance(exc, NotImplementedError) and _raised_in(exc, student_file):
        return protocol.NOT_IMPLEMENTED, error
    return protocol.RAISED, error


def _raised_in(exc: BaseException, student_file: str) -> bool:
    tb = exc.__traceback__
    last = None
    while tb is not None:
        last = tb
        tb = tb.tb_next
    return last is not None and os.path.abspath(last.tb_frame.f_code.co_filename) == student_file


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
