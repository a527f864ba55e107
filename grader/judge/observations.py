"""Reading what a worker wrote: JSON and safetensors only, sizes checked, links refused, nothing executed.

Every way an observation can be absent becomes a verdict the report can show: the file was not
submitted, the import failed, the stub raised NotImplementedError, the run was killed before the probe
finished (and which limit killed it), or the student's code raised.
"""

from __future__ import annotations

import hashlib
import json
import math
import signal
import struct
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load as load_safetensors

from grader.i18n import Text, known_template, placeholders, rendered, t, verbatim
from grader.judge.limits import ensure_room
from grader.judge.verdicts import (Crashed, CriterionFailed, GraderFault, ImportFailed, NotAttempted, StudentRaised,
                                   TimedOut, Verdict)
from grader.worker import protocol
from grader.worker.protocol import FILE_SIZE_LIMIT, Limit, Limits, ProbeStatus, Status, read_capped

# What the judge reads of one probe's record, checked in one pass before anything computes with it. A correct
# submission's record is the reference solution's in size; each cap is many times the largest of those.
MAX_DEPTH = 16                   # nesting of lists and dicts (the references: 7)
MAX_ITEMS = 4096                 # entries of one list (the references: 120, a loss curve)
MAX_KEYS = 4096                  # keys of one dict (the references: 29)
MAX_TENSOR_DIMS = 8              # axes of one tensor (the references: 4)
MAX_TENSOR_ELEMENTS = 1 << 24    # values of one tensor (the references: 32,768): 64 MiB of float32
SAFETENSORS_DTYPES = {"BOOL", "U8", "I8", "I16", "U16", "I32", "U32", "I64", "U64", "F16", "BF16", "F32", "F64",
                      "F8_E4M3", "F8_E5M2", "C64"}


@dataclass
class ProbeObservation:
    """What one probe recorded."""

    exercise: str
    name: str
    values: dict[str, Any]
    not_tensors: dict[str, str]
    tensor_names: list[str]
    directory: Path
    forbidden_calls: list[dict] = field(default_factory=list)
    tensor_digest: str | None = None     # the digest the worker reported, when the run's files are checked
    verify: bool = False
    _tensors: dict[str, torch.Tensor] | None = None
    # the tensors pinned by the judging server (the references'): each one a criterion reads is copied for it then
    _shared: dict[str, torch.Tensor] | None = None

    def value(self, key: str) -> Any:
        if key not in self.values:
            raise GraderFault(t("probe `{probe}` recorded no `{key}`, which the criterion reads: this is the grader's "
                                "fault, no point is taken for it", probe=self.name, key=key))
        return self.values[key]

    def has(self, key: str) -> bool:
        return key in self.values

    def tensor(self, key: str) -> torch.Tensor:
        if key in self.not_tensors:
            raise CriterionFailed(t("expected a tensor, but your code returned a {kind}", kind=self.not_tensors[key]),
                                  returned=self.not_tensors[key])
        if self._shared is not None:
            tensors = self._tensors = {} if self._tensors is None else self._tensors
            if key in self._shared and key not in tensors:
                tensors[key] = self._shared[key].clone()
        else:
            tensors = self._load()
        if key not in tensors:
            raise GraderFault(t("probe `{probe}` recorded no tensor `{key}`, which the criterion reads: this is the "
                                "grader's fault, no point is taken for it", probe=self.name, key=key))
        return tensors[key]

    def _load(self) -> dict[str, torch.Tensor]:
        if self._shared is not None:
            return {k: v.clone() for k, v in self._shared.items()}
        if self._tensors is None:
            tensors: dict[str, torch.Tensor] = {}
            if self.tensor_names:
                data = read_capped(self.directory, self.name + protocol.TENSOR_SUFFIX, protocol.MAX_TENSOR_BYTES)
                if data is None:
                    raise Crashed(t("the tensors of probe `{probe}` are missing or larger than allowed",
                                    probe=self.name))
                if self.verify and hashlib.sha256(data).hexdigest() != self.tensor_digest:
                    raise Crashed(t("the tensors of probe `{probe}` were changed after the probe wrote them "
                                    "(not by the grader), so they were ignored", probe=self.name))
                ensure_room(self._check_header(data))
                try:
                    loaded = load_safetensors(data)
                except Exception as exc:  # noqa: BLE001 - any malformed file is the same verdict
                    if out_of_memory(exc):
                        raise
                    raise Crashed(t("the tensors of probe `{probe}` are malformed: {error}", probe=self.name,
                                    error=verbatim(exc))) from None
                except BaseException as exc:
                    if type(exc).__name__ != "PanicException":   # the loader's own failure (Rust), not ours
                        raise
                    raise Crashed(t("the tensors of probe `{probe}` are malformed: {error}", probe=self.name,
                                    error=verbatim(exc))) from None
                del data
                tensors = {k: v for k, v in loaded.items() if k in self.tensor_names}
            self._tensors = tensors
        return self._tensors

    def _check_header(self, data: bytes) -> int:
        """Each tensor's real shape and dtype, as the file stores them, checked before any of it is loaded (what
        a tensor reported of itself in the student's process is never what the judge goes by); returns the bytes
        the tensors will take."""
        header = _safetensors_header(data)
        if header is None:
            raise Crashed(t("the tensors of probe `{probe}` are malformed: {error}", probe=self.name,
                            error=verbatim("unreadable header")))
        for name, entry in header.items():
            if name == "__metadata__":
                continue
            shape = entry.get("shape") if isinstance(entry, dict) else None
            if (not isinstance(shape, list) or not all(isinstance(n, int) and n >= 0 for n in shape)
                    or entry.get("dtype") not in SAFETENSORS_DTYPES):
                raise Crashed(t("the tensors of probe `{probe}` are malformed: {error}", probe=self.name,
                                error=verbatim(f"tensor {name!r} has no valid shape or dtype")))
            if len(shape) > MAX_TENSOR_DIMS or math.prod(shape) > MAX_TENSOR_ELEMENTS:
                raise CriterionFailed(t("your code returned a tensor of shape {shape} ({count} values), recorded by "
                                        "probe `{probe}` as `{key}`; the grader judges tensors of at most {dims} "
                                        "axes and {most} values, far more than the exercise asks for",
                                        shape=shape, count=math.prod(shape), probe=self.name, key=verbatim(name),
                                        dims=MAX_TENSOR_DIMS, most=MAX_TENSOR_ELEMENTS), shape=shape)
        return len(data) - 8


def _safetensors_header(data: bytes) -> dict | None:
    """The JSON header of a safetensors file (8 bytes of little-endian length, then the header), or None."""
    if len(data) < 8:
        return None
    (length,) = struct.unpack("<Q", data[:8])
    if length > len(data) - 8:
        return None
    try:
        header = json.loads(data[8:8 + length])
    except (ValueError, RecursionError):
        return None
    return header if isinstance(header, dict) else None


def out_of_memory(exc: BaseException) -> bool:
    """Whether an exception is an allocation that failed: Python's MemoryError, or torch's CPU allocator refusing
    (a RuntimeError naming ENOMEM), as happens when the judge's memory limit is reached."""
    return isinstance(exc, MemoryError) or (isinstance(exc, RuntimeError) and (
        "can't allocate memory" in str(exc) or "Cannot allocate memory" in str(exc)))


@dataclass
class RunSummary:
    """How the exercise's run ended, in the terms the judge needs (filled from the supervisor's Run)."""

    limit: Limit | None = None
    signal: int | None = None
    exit: int | None = None
    failure: str = ""
    # what the run was allowed; None for observations no run of this grading made (the reference solutions')
    limits: Limits | None = None
    # probe -> [json sha256, tensors sha256 or None] as the worker saw the runner write them (None: reported
    # twice, so not trusted). None for runs whose files are trusted as they are (the reference solutions).
    acks: dict | None = None
    grader_fault: str = ""      # the grader, not the student, ended the run early
    # the course's forbidden APIs the worker saw the code reach, from the names the hooks wrote as they went (the
    # decision: grader/worker/forbidden.py); the probes' own records add where each call was made
    forbidden: list = field(default_factory=list)
    # the seed the exercise's model process built and ordered its entries with (grader/models); None without one
    served_seed: int | None = None

    @classmethod
    def from_dict(cls, data: dict) -> RunSummary:
        """The summary as grader/grading/pipeline.py's `summary_of` writes it (and a kept record holds it): the limits'
        fields among the others."""
        names = {f.name for f in fields(Limits)}
        limit = data.get("limit")
        return cls(**{k: v for k, v in data.items() if k not in names and k != "limit"},
                   limit=None if limit is None else Limit(limit),
                   limits=Limits.from_table(data) if names & data.keys() else None)


def oversized(record: dict) -> Text | None:
    """What in a probe's JSON record goes past what the judge reads (MAX_DEPTH, MAX_ITEMS, MAX_KEYS), found in
    one pass over it, or None. The forbidden-call record is exempt from MAX_ITEMS (only its count is shown)."""
    if _within_caps(record):
        return None
    stack: list[tuple[Any, int, tuple]] = [(record, 1, ())]
    while stack:
        value, depth, where = stack.pop()
        if not isinstance(value, (list, dict)):
            continue
        if depth > MAX_DEPTH:
            return t("lists or dicts nested more than {most} deep at {where}", most=MAX_DEPTH, where=_path(where))
        if isinstance(value, dict):
            if len(value) > MAX_KEYS:
                return t("a dict of {count} keys at {where} (at most {most})", count=len(value), where=_path(where),
                         most=MAX_KEYS)
            stack.extend((v, depth + 1, (where, k)) for k, v in value.items())
        else:
            if len(value) > MAX_ITEMS and where != ((), protocol.FORBIDDEN_KEY):
                return t("a list of {count} entries at {where} (at most {most})", count=len(value), where=_path(where),
                         most=MAX_ITEMS)
            stack.extend((v, depth + 1, (where, i)) for i, v in enumerate(value))
    return None


def _within_caps(record: dict) -> bool:
    """Whether nothing in the record goes past the caps, as `oversized` would find, in a pass that visits only the
    lists and dicts and keeps no place (a record within them, as every grading's is, is not walked twice)."""
    stack: list[tuple[Any, int]] = [(record, 1)]
    exempt = record.get(protocol.FORBIDDEN_KEY)
    exempt = exempt if isinstance(exempt, list) else None
    while stack:
        value, depth = stack.pop()
        if depth > MAX_DEPTH:
            return False
        children = value.values() if isinstance(value, dict) else value
        if len(value) > (MAX_KEYS if isinstance(value, dict) else MAX_ITEMS) and value is not exempt:
            return False
        kinds = set(map(type, children))   # a list of numbers is seen at C speed; json makes lists and dicts only
        if list in kinds or dict in kinds:
            stack.extend((v, depth + 1) for v in children if type(v) is list or type(v) is dict)
        elif len(kinds) > 1 and any(isinstance(v, (list, dict)) for v in children):
            return False   # a subclass: no record json parsed, so the full pass decides
    return True


def _path(where: tuple) -> Text:
    """`(((), "values"), "cases")` -> `values.cases`: a place in a record, built only when one is named."""
    parts: list[str] = []
    while where:
        where, key = where
        parts.append(f"[{key}]" if isinstance(key, int) else f".{key}")
    return verbatim("`" + "".join(reversed(parts)).lstrip(".")[:200] + "`")


def _forbidden_entries(raw: dict) -> list[tuple[str, str | None]]:
    """A record's forbidden calls as (call, where) pairs; an entry of another form is no call the guard records."""
    entries = raw.get(protocol.FORBIDDEN_KEY, [])
    if not isinstance(entries, list):
        return []
    return [(e["call"], e.get("where")) for e in entries if isinstance(e, dict) and isinstance(e.get("call"), str)
            and isinstance(e.get("where"), (str, type(None)))]


def _records_a_raise(value, depth: int = 0) -> bool:
    """Whether probe values hold an exception a call raised (`{"raised": ...}`, as probes record one)."""
    if depth > 8:
        return False
    if isinstance(value, dict):
        return "raised" in value or any(_records_a_raise(v, depth + 1) for v in value.values())
    if isinstance(value, list):
        return any(_records_a_raise(v, depth + 1) for v in value)
    return False


def recorded_breach(error: dict) -> Text:
    """A contract breach as a probe recorded it: its template and parameters when the template is one of the
    catalogs' (so it reads in the student's language), else the English words it recorded."""
    template, params = error.get("template"), error.get("params")
    if isinstance(template, str) and isinstance(params, dict) and known_template(template):
        try:
            # Text, not t(): the template is one a probe recorded, already a catalog entry, not a new one
            said = Text(template, {str(k): _recorded_param(v) for k, v in params.items()})
            said.texts()
            return said
        except (KeyError, ValueError, IndexError):
            pass
    return verbatim(error.get("message", ""))


def _recorded_param(value) -> Text:
    """A breach's parameter: itself a catalog sentence (what a probe says of a value it received), or shown as is."""
    value = str(value)
    return Text(value) if known_template(value) and not placeholders(value) else verbatim(value)


def import_hint(error: dict, filename: str) -> Text:
    """How to make a file import, from what its import raised: the hint every criterion of an exercise whose file
    does not import shows instead of its own (which is about the algorithm, not about the file)."""
    kind = error.get("type")
    if error.get("tampered"):
        return t("Leave Python's built-ins, torch and the grader as they are: nothing your file replaces at import "
                 "counts, so nothing of {file} can be judged until it replaces nothing.", file=filename)
    if kind in ("SyntaxError", "IndentationError", "TabError"):
        return t("Python cannot read {file}: fix the line the error names (python -m py_compile {file} shows it), "
                 "then every criterion of this exercise is judged.", file=filename)
    if kind in ("ModuleNotFoundError", "ImportError"):
        return t("{file} may import only torch, math and the standard library: it is graded on its own, without your "
                 "other files or packages the course does not install.", file=filename)
    return t("Code at the top level of {file} runs when it is imported, and it raised: keep the top level to imports "
             "and definitions (no tests, no model fitting, no input() there), then every criterion of this exercise is "
             "judged.", file=filename)


class Observations:
    """All observations of one exercise of one submission (or of the reference solution)."""

    def __init__(self, exercise: str, filename: str, probe_order: list[str], directory: Path | None,
                 run: RunSummary | None, staged_status: str | None = None, staged_message: Text | None = None):
        self.exercise = exercise
        self.filename = filename
        self.probe_order = probe_order
        self.directory = directory
        self.run = run
        self.staged_status = staged_status
        self.staged_message = staged_message
        self._cache: dict[str, dict | None] = {}
        self._forged: set[str] = set()   # probes whose file was there but not written by the grader
        self._refused: dict[str, Text] = {}   # probes whose record is larger than the judge reads, and why
        self._pinned: dict[str, dict[str, torch.Tensor]] = {}   # probe -> its tensors, read once (see `pin`)
        self._returned: bool | None = None   # returned_a_result, found once (every criterion asks)

    # --- the entry point criteria use -----------------------------------------------------------
    def probe(self, name: str) -> ProbeObservation:
        """The probe's observation, or the verdict explaining why there is none."""
        self._check_staged()
        imported = self._raw(protocol.IMPORT_PROBE)
        if imported is None:
            raise self._refusal(protocol.IMPORT_PROBE) or self._missing(protocol.IMPORT_PROBE)
        if imported["status"] != ProbeStatus.OK:
            verdict = self._error_verdict(imported, t("importing {file}", file=self.filename))
            if type(verdict) is StudentRaised:   # the file's own error: said once, with how to make it import
                failed = ImportFailed(verdict.message, **verdict.evidence)
                failed.hint = import_hint(imported.get("error") or {}, self.filename)
                raise failed
            raise verdict
        raw = self._raw(name)
        if raw is None:
            raise self._refusal(name) or self._missing(name)
        if raw["status"] != ProbeStatus.OK:
            raise self._error_verdict(raw, t("probe `{name}`", name=name))
        acks = self.run.acks if self.run is not None else None
        verify = acks is not None
        tensor_digest = (acks.get(name) or [None, None])[1] if acks is not None else None
        pinned = self._pinned.get(name)
        assert self.directory is not None   # `raw` was read from it
        return ProbeObservation(self.exercise, name, raw.get("values", {}), raw.get("not_tensors", {}),
                                list(raw.get("tensors", [])), self.directory, raw.get(protocol.FORBIDDEN_KEY, []),
                                tensor_digest, verify, _shared=pinned)

    def pin(self) -> Observations:
        """Read every probe's record and tensors now, and keep them: the references, read once by the judging
        server and shared with every child it forks (each criterion still gets copies of its own)."""
        for name in [protocol.IMPORT_PROBE, *self.probe_order]:
            try:
                self._pinned[name] = self.probe(name)._load()
            except Verdict:
                pass   # a probe the reference did not record: every criterion reading it says so, as before
        return self

    def forbidden_calls(self) -> list[dict]:
        """Every forbidden call recorded by the import and the probes, each call and place once, in the order first
        recorded (one pass: a record of many thousand places costs no more than reading it), then each one the worker
        saw that no probe's record names (a record student code emptied, a call in a probe that never finished), with
        no place."""
        seen: set[tuple[str, str | None]] = set()
        calls: list[dict] = []
        for name in [protocol.IMPORT_PROBE, *self.probe_order]:
            raw = self._raw(name)
            for entry in _forbidden_entries(raw or {}):
                if entry not in seen:
                    seen.add(entry)
                    calls.append({"call": entry[0], "where": entry[1]})
        named = {call for call, _ in seen}
        by_worker = self.run.forbidden if self.run is not None else []
        calls += [{"call": str(name), "where": None}
                  for name in dict.fromkeys(map(str, by_worker)) if name not in named]
        return calls

    def fully_attempted(self) -> bool:
        """Whether every part of the exercise is written: some probe ran, and none reached NotImplementedError."""
        if self.staged_status:
            return False
        statuses = [(self._raw(n) or {}).get("status") for n in self.probe_order]
        return ProbeStatus.OK in statuses and ProbeStatus.NOT_IMPLEMENTED not in statuses

    def returned_a_result(self) -> bool:
        """Whether some function of the submission returned: a probe ran to its end and either saw a call
        through `ctx.outcome` return, or recorded no exception at all (so every call it made of student code
        returned). A file whose every function raises (a stub's NotImplementedError turned into ValueError)
        has not."""
        if self._returned is None:
            self._returned = self._any_returned()
        return self._returned

    def _any_returned(self) -> bool:
        for name in self.probe_order:
            raw = self._raw(name) or {}
            calls = raw.get("calls")
            if raw.get("status") != ProbeStatus.OK or not isinstance(calls, dict):
                continue
            if calls.get("returned") or not _records_a_raise(raw.get("values")):
                return True
        return False

    # --- internals ------------------------------------------------------------------------------
    def _check_staged(self) -> None:
        if self.staged_status:
            message = self.staged_message
            assert message is not None   # staging gives every status its message
            raise (NotAttempted if self.staged_status == Status.NOT_ATTEMPTED else StudentRaised)(message)

    def _raw(self, name: str) -> dict | None:
        if name not in self._cache:
            data = None if self.directory is None else read_capped(self.directory, name + protocol.JSON_SUFFIX,
                                                                    protocol.MAX_JSON_BYTES)
            if data is not None and self.run is not None and self.run.acks is not None:
                ack = self.run.acks.get(name)
                if not isinstance(ack, list) or hashlib.sha256(data).hexdigest() != ack[0]:
                    self._forged.add(name)  # student code wrote it, or rewrote what the probe wrote
                    data = None
            try:
                parsed = json.loads(data) if data is not None else None
            except (ValueError, RecursionError):   # nested past the parser's depth is as unreadable as malformed
                parsed = None
            del data
            if isinstance(parsed, dict) and isinstance(parsed.get("status"), str):
                refused = oversized(parsed)
                if refused is not None:
                    self._refused[name] = refused
                    parsed = None
            self._cache[name] = parsed if isinstance(parsed, dict) and isinstance(parsed.get("status"), str) else None
        return self._cache[name]

    def _refusal(self, name: str) -> CriterionFailed | None:
        if name not in self._refused:
            return None
        what = t("the import") if name == protocol.IMPORT_PROBE else t("probe `{name}`", name=name)
        return CriterionFailed(t("what {what} recorded is larger than the grader judges: {found}; your code returns "
                                 "far more than the exercise asks for", what=what, found=self._refused[name]))

    def _error_verdict(self, raw: dict, what: Text):
        error = raw.get("error") or {}
        text = verbatim(f"{error.get('type', 'Exception')}: {error.get('message', '')}".rstrip(": "))
        where = t(" at {where}", where=error["where"]) if error.get("where") else verbatim("")
        if raw["status"] == ProbeStatus.NOT_IMPLEMENTED:
            return NotAttempted(t("{what} reached NotImplementedError{where}: the stub is not implemented yet",
                                  what=what, where=where))
        if raw["status"] == ProbeStatus.GRADER_FAULT:
            at = (t(" at {where}", where=f"grader/{error['grader_where']}") if error.get("grader_where")
                  else verbatim(""))
            return GraderFault(t("{what} failed in the grader's own code ({error}{at}), not in yours: this is the "
                                 "grader's fault, no point is taken for it, and the submission will be graded again",
                                 what=what, error=text, at=at), error=error)
        if error.get("tampered"):
            names = ", ".join(str(n) for n in list(error["tampered"])[:8])
            return StudentRaised(t("{what}: the submission replaced what the grader measures with ({names}); "
                                   "replacing Python's built-ins, torch's functions or the grader's code is not "
                                   "allowed, so nothing measured meanwhile counts", what=what, names=names),
                                 tampered=error["tampered"])
        if error.get("limit") == Limit.MEMORY:
            return Crashed(t("{what} ran out of memory: the process may use at most {limit} and the code asked for "
                             "more ({error}{where})", what=what, limit=self._memory_limit(), error=text, where=where),
                           limit=Limit.MEMORY)
        if error.get("limit") == Limit.DISK:
            return Crashed(t("{what} filled its scratch space: your code may write at most {limit} ({error}{where})",
                             what=what, limit=self._disk_limit(), error=text, where=where), limit=Limit.DISK)
        if error.get("limit") == Limit.FILE_SIZE:
            return Crashed(t("{what} tried to write a file larger than the limit of {mb} MB ({error}{where})",
                             what=what, mb=FILE_SIZE_LIMIT >> 20, error=text, where=where), limit=Limit.FILE_SIZE)
        if error.get("breach"):
            return StudentRaised(t("{what}: your code breaks the contract: {breach}", what=what,
                                   breach=recorded_breach(error)), error=error)
        return StudentRaised(t("{what} raised {error}{where}", what=what, error=text, where=where), error=error)

    def _disk_limit(self) -> Text:
        run = self.run
        if run and run.limits:
            return t("{mb} MB in {files} files and folders", mb=run.limits.disk_mb, files=run.limits.files)
        return t("the disk limit")

    def _memory_limit(self) -> Text:
        run = self.run
        return t("{mb} MB", mb=run.limits.memory_mb) if run and run.limits else t("the memory limit")

    def _missing(self, name: str):
        """No observation for `name`: say which limit or crash ended the run before it finished."""
        verdict = self._missing_because(name)
        if name in self._forged:
            verdict.message = t("{said}; a file in its place was not written by the grader and was ignored",
                                said=verdict.message)
            verdict.args = (str(verdict.message),)
        return verdict

    def _missing_because(self, name: str):
        what = t("the import") if name == protocol.IMPORT_PROBE else t("probe `{name}`", name=name)
        run = self.run
        if run is None:
            return Crashed(t("{what} left no observation (the exercise was not run)", what=what))
        if run.grader_fault:
            return GraderFault(t("the grader failed, not your code: {fault}; {what} did not run. No point is taken "
                                 "for it: the submission will be graded again", fault=rendered(run.grader_fault),
                                 what=what))
        limits = run.limits or Limits()   # a run that hit a limit always says what its limits were
        if run.failure:
            cls = TimedOut if run.limit == Limit.TIME else Crashed
            return cls(t("{failure}; {what} did not finish", failure=rendered(run.failure), what=what), limit=run.limit)
        if run.limit == Limit.TIME:
            return TimedOut(t("killed after {seconds:g} s of wall time while running {what}", seconds=limits.timeout_s,
                              what=what), limit=Limit.TIME)
        if run.limit == Limit.CPU:
            return TimedOut(t("killed after {seconds:g} s of CPU time while running {what}", seconds=limits.timeout_s,
                              what=what), limit=Limit.CPU)
        if run.limit == Limit.OUTPUT:
            return Crashed(t("killed for printing more than {kb} KB while running {what}", kb=limits.output_kb,
                             what=what), limit=Limit.OUTPUT)
        if run.limit == Limit.FILE_SIZE:
            return Crashed(t("killed for writing a file larger than the limit of {mb} MB while running {what}",
                             mb=FILE_SIZE_LIMIT >> 20, what=what), limit=Limit.FILE_SIZE)
        if run.limit == Limit.DISK:
            return Crashed(t("the code filled its scratch space (at most {limit}) while running {what}",
                             limit=self._disk_limit(), what=what), limit=Limit.DISK)
        if run.limit == Limit.MEMORY:
            return Crashed(t("the process ran out of memory (it may use at most {limit}) and died while running {what}",
                             limit=self._memory_limit(), what=what), limit=Limit.MEMORY)
        if run.signal is not None:
            try:
                sig = signal.Signals(run.signal).name
            except ValueError:
                sig = str(run.signal)
            cause = {"SIGSEGV": t(" (segmentation fault)"), "SIGABRT": t(" (abort, often an allocation that failed)"),
                     "SIGKILL": t(" (killed, often for memory)")}.get(sig, verbatim(""))
            return Crashed(t("the process was killed by {signal}{cause} while running {what}", signal=sig, cause=cause,
                             what=what), signal=sig)
        return Crashed(t("the process ended (exit status {exit}) before {what} finished: something called os._exit() "
                         "or exit() or the process was killed", exit=run.exit, what=what), exit=run.exit)


def observations_of(entry: dict) -> Observations:
    """An exercise of a judging request (grader/judge/channel.py): the submission's observations of it."""
    run, staged = entry["run"], entry["staged"] or {}
    return Observations(entry["id"], entry["file"], entry["probes"], Path(entry["obs"]) if entry["obs"] else None,
                        None if run is None else RunSummary.from_dict(run), staged.get("status"),
                        rendered(staged["message"]) if staged.get("message") else None)


def references_of(entry: dict) -> Observations:
    """An exercise of a judging request: the reference solution's observations of it (trusted as they are)."""
    return Observations(entry["id"], entry["file"], entry["probes"], Path(entry["reference"]), RunSummary())
