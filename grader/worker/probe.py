"""What a probe sees: the `@probe` decorator and the context a probe records its observations into.

A probe is grader code run next to student code. It builds inputs from its seeded generator, calls the
student's functions, and records what came back. It never decides whether that was right.
"""

from __future__ import annotations

import _json
import dis
import errno
import functools
import os
import traceback
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any
from collections.abc import Callable

import numpy
import torch

from grader.worker import protocol

# The path from a probe's results to its files runs in the student's process, after the student's code ran.
# It calls only these, bound here, before any student import: C functions and methods of immutable C types,
# which no submission can replace (json's encoder class, safetensors.torch and the methods torch.Tensor
# defines in Python can be). The runner's guard verifies the rest of the path (this module's own functions).
_TensorBase = torch._C.TensorBase
_as_subclass, _detach, _cpu, _contiguous, _clone = (_TensorBase.as_subclass, _TensorBase.detach, _TensorBase.cpu,
                                                    _TensorBase.contiguous, _TensorBase.clone)
_reshape, _view, _to_numpy, _tolist = _TensorBase.reshape, _TensorBase.view, _TensorBase.numpy, _TensorBase.tolist
# (torch's stubs type these getset descriptors as their values' types)
_dtype_of, _shape_of, _device_of = (_TensorBase.dtype.__get__, _TensorBase.shape.__get__,  # type: ignore[attr-defined]
                                    _TensorBase.device.__get__)
_requires_grad_of = _TensorBase.requires_grad.__get__  # type: ignore[attr-defined]
_to_bytes = numpy.ndarray.tobytes
_NoTorchFunction, _NoTorchDispatch = torch._C.DisableTorchFunction, torch._C._DisableTorchDispatch
# no default (None): an object JSON cannot encode raises
_encode_json = _json.make_encoder(None, None,  # type: ignore[arg-type]
                                  _json.encode_basestring_ascii, None, ":", ",", True, False, True)
_join, _join_bytes = "".join, b"".join
_SAFETENSORS_DTYPES = {torch.float64: "F64", torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16",
                       torch.int64: "I64", torch.int32: "I32", torch.int16: "I16", torch.int8: "I8",
                       torch.uint8: "U8", torch.bool: "BOOL", torch.complex64: "C64"}


@dataclass(frozen=True)
class ProbeSpec:
    name: str
    fn: Callable[[Any, ProbeContext], None]
    isolated: bool


def probe(fn=None, *, isolated: bool = False):
    """Mark a function `(student_module, ctx) -> None` as a probe.

    `isolated=True` runs it in a process of its own, forked from a worker that has never imported the
    student's module: what it reads from disk was written by an earlier probe, nothing else carries over.
    """

    def mark(f):
        f.__probe__ = ProbeSpec(name=f.__name__, fn=f, isolated=isolated)
        return f

    return mark(fn) if fn is not None else mark


def probes_of(module) -> list[ProbeSpec]:
    """The probes a module defines, in the order they are written."""
    return [v.__probe__ for v in vars(module).values() if callable(v) and hasattr(v, "__probe__")]


def plain_tensor(value: torch.Tensor) -> torch.Tensor:
    """A detached, contiguous copy of the data, read past any behaviour the tensor carries: a subclass, a
    `__class__` assigned after the fact, `__torch_function__`, `__torch_dispatch__` and any mode left pushed
    are all skipped, and torch.Tensor's Python-level methods are never looked up."""
    with _NoTorchFunction(), _NoTorchDispatch():
        return _clone(_contiguous(_cpu(_detach(_as_subclass(value, torch.Tensor)))))


def tensor_facts(value: torch.Tensor) -> dict[str, Any]:
    """The shape, dtype and device of a tensor's data, read past whatever it says of itself (a subclass's `.shape`
    property, `__torch_function__`): what a probe records of a student's tensor when it keeps no copy of it."""
    with _NoTorchFunction(), _NoTorchDispatch():
        return {"shape": list(_shape_of(value)), "dtype": str(_dtype_of(value)).replace("torch.", ""),
                "device": str(_device_of(value))}


def raised_in(exc: BaseException, student_file: str | None) -> bool:
    """Whether the innermost frame of the exception's traceback is in the student's file."""
    last = _innermost(exc)
    return (last is not None and student_file is not None
            and os.path.abspath(last.tb_frame.f_code.co_filename) == student_file)


_RAISE = dis.opmap["RAISE_VARARGS"]


def _innermost(exc: BaseException):
    tb, last = exc.__traceback__, None
    while tb is not None:
        last, tb = tb, tb.tb_next
    return last


def is_stub_raise(exc: BaseException, student_file: str | None) -> bool:
    """Whether `exc` is the stub's marker: a NotImplementedError that a `raise` statement of the student's file
    raised (the untouched stub's `raise NotImplementedError(...)`, or one the student left in a part not written
    yet). A NotImplementedError that torch raised on the student's own line (`bool_mask & float_scores`: an operator
    with no kernel for those dtypes) is an implemented function failing, not a stub: its innermost frame is the
    student's line too, but stopped at a call or an operator, not at a raise."""
    if not isinstance(exc, NotImplementedError) or not raised_in(exc, student_file):
        return False
    last = _innermost(exc)
    try:
        return last.tb_frame.f_code.co_code[last.tb_lasti] == _RAISE
    except (IndexError, TypeError):  # an offset Python could not give: not provably the stub's raise
        return False


class ContractBreach(Exception):
    """Raised by probe code when what the student's code gave breaks the contract: a name the contract fixes is
    missing, a call returned the wrong kind of value, a returned value cannot do what the contract says it can
    (a loss with no graph to go backward through). Raised in grader code, it is the student's failure.

    Its message is an English template with named parameters: the judge shows it in the student's language
    from the catalogs (this process has none)."""

    def __init__(self, template: str, /, **params: Any):
        self.template = template
        self.params = {k: str(v) for k, v in params.items()}
        super().__init__(template.format(**self.params))


def part(obj: Any, *path: str) -> Any:
    """`obj.a.b...` for names the contract fixes; a missing one is the student's breach of the contract, not an
    exception of the probe's own."""
    for i, name in enumerate(path):
        try:
            obj = getattr(obj, name)
        except AttributeError:
            if i == 0:
                raise ContractBreach("the model has no attribute `{name}`, which the contract names",
                                     name=name) from None
            raise ContractBreach("{held} has no attribute `{name}`, which the contract names", held=".".join(path[:i]),
                                 name=name) from None
    return obj


@contextmanager
def student_value(what: str):
    """Wrap probe code that works on a value the student's code returned (backward through its graph, a float
    of a returned loss): what it raises there is that value failing, the student's doing, said as `what`."""
    try:
        yield
    except ContractBreach:
        raise
    except Exception as exc:  # noqa: BLE001 - any failure of the student's value is the same breach
        raise ContractBreach("{what}: {error}", what=what, error=f"{type(exc).__name__}: {exc}") from exc


def student_tensor(what: str, value: Any, /, *, like: tuple[str, torch.Tensor] | None = None,
                   shape: tuple[int, ...] | list[int] | None = None, dtype: torch.dtype | None = None,
                   depends_on: str | None = None) -> torch.Tensor:
    """`value`, which the student's code returned, checked before the probe computes with it: a tensor, of the shape
    of `like` (a name and the tensor it will meet) or of `shape`, of `dtype`, and, when the probe will differentiate
    through it, requiring grad (`depends_on` names the inputs it must depend on). Anything else is a `ContractBreach`
    that names the value (`what`, a catalog sentence such as "your output"), so what the probe would have raised
    computing with it (a broadcasting error, "element 0 of tensors does not require grad") is never taken for the
    grader's own failure. Only the tensor's own C-level attributes are read."""
    if not isinstance(value, torch.Tensor):
        raise ContractBreach("{what} is a {kind}, not a tensor", what=what, kind=type(value).__name__)
    with _NoTorchFunction():
        got = list(_shape_of(value))
        if like is not None:
            other, tensor = like
            want = list(_shape_of(tensor))
            if got != want:
                raise ContractBreach("{what} has shape {shape} and cannot be compared with {other} of shape {want}",
                                     what=what, shape=got, other=other, want=want)
        if shape is not None and got != list(shape):
            raise ContractBreach("{what} has shape {shape}; expected {want}", what=what, shape=got, want=list(shape))
        if dtype is not None and _dtype_of(value) != dtype:
            raise ContractBreach("{what} has dtype {dtype}; expected {want}", what=what,
                                 dtype=str(_dtype_of(value)).replace("torch.", ""),
                                 want=str(dtype).replace("torch.", ""))
        if depends_on is not None and not _requires_grad_of(value):
            raise ContractBreach("{what} does not depend on {inputs}: no gradient can flow", what=what,
                                 inputs=depends_on)
    return value


class GraderBug(Exception):
    """What grader code that student code calls back (a forward hook) raised: the grader's fault, even though
    student frames surround it."""


def grader_callback(fn: Callable) -> Callable:
    """Mark grader code that student code calls (a forward hook the probe registered): anything it raises
    becomes a `GraderBug`, so that it is not taken for the student's exception."""

    @functools.wraps(fn)
    def called_back(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except Exception as exc:  # noqa: BLE001 - whatever the grader's own code raised is its bug
            raise GraderBug(f"{type(exc).__name__}: {exc}") from exc

    return called_back


def raised_by_grader(exc: BaseException, student_file: str | None, student_module: Any = None) -> bool:
    """Whether a probe's exception is the grader's own fault: a `GraderBug`, or one with no frame of its traceback
    in the student's file (so no student call was running) that is not a breach of the contract the probe found in
    what the student gave (a `ContractBreach`, a name the probe read from the student's module or from an object of
    one of its classes that is not there, or a call of the student's that Python refused)."""
    if isinstance(exc, GraderBug):
        return True
    if isinstance(exc, ContractBreach):
        return False
    if isinstance(exc, AttributeError) and student_module is not None and _of_the_student(getattr(exc, "obj", None),
                                                                                         student_module):
        return False
    if isinstance(exc, (AttributeError, NotImplementedError)) and student_module is not None \
            and _of_the_student(_innermost_self(exc), student_module):
        # torch raised it for an object of the student's: nn.Module.__getattr__ for an attribute the contract names
        # that the student's module lacks, nn.Module's default forward for a module without one
        return False
    if (isinstance(exc, TypeError) and student_module is not None
            and _called_with_the_wrong_signature(exc, student_module)):
        return False
    tb = exc.__traceback__
    while tb is not None:
        if student_file is not None and os.path.abspath(tb.tb_frame.f_code.co_filename) == student_file:
            return False
        tb = tb.tb_next
    return True


def _innermost_self(exc: BaseException) -> Any:
    """The `self` of the innermost frame of the exception's traceback (None when that frame has none)."""
    last = _innermost(exc)
    try:
        return last.tb_frame.f_locals.get("self") if last is not None else None
    except Exception:  # noqa: BLE001 - a frame's locals can only be read, but be safe
        return None


def _of_the_student(obj: Any, student_module: Any) -> bool:
    """Whether `obj` is the student's module or an object of a class the student's module defines (a `LayerNorm`
    that is no nn.Module has no `.double()`: the probe asked the contract of it, and it is the student's)."""
    if obj is None:
        return False
    if obj is student_module:
        return True
    try:
        return type(obj).__module__ == student_module.__name__
    except Exception:  # noqa: BLE001 - a hostile class may break even this
        return False


def _called_with_the_wrong_signature(exc: TypeError, student_module: Any) -> bool:
    """Whether Python refused to call something of the student's module with the contract's arguments ("Name() takes
    2 positional arguments but 4 were given", "Name.__init__() got an unexpected keyword argument"): raised before
    any student frame exists, it is still the student's signature that differs from the contract."""
    message = str(exc)
    if "argument" not in message or "(" not in message:
        return False
    name = message.split("(", 1)[0].split(".", 1)[0].strip()
    return name.isidentifier() and hasattr(student_module, name)


def describe_exception(exc: BaseException, student_file: str | None) -> dict:
    """Type, message and the student's own frames of an exception, each part guarded against hostile objects."""
    try:
        name = type(exc).__name__
    except BaseException:  # noqa: BLE001 - a hostile class may break even this
        name = "<unknown>"
    try:
        message = str(exc)
    except BaseException:  # noqa: BLE001
        message = "<the exception's message could not be read>"
    if isinstance(exc, SystemExit):
        message = f"exit code {exc.code!r}"
    where, frames = None, []
    try:
        for frame in traceback.extract_tb(exc.__traceback__):
            if student_file and os.path.abspath(frame.filename) == student_file:
                where = f"{os.path.basename(frame.filename)}:{frame.lineno}"
                frames.append(f"{where} in {frame.name}: {frame.line or ''}".strip())
        if frames:
            where = frames[-1]
        elif isinstance(exc, SyntaxError) and student_file and exc.filename \
                and os.path.abspath(exc.filename) == student_file:
            # a file Python cannot compile has no frame of its own: the error names the line instead
            where = f"{os.path.basename(student_file)}:{exc.lineno}: {(exc.text or '').strip()}".strip()
    except BaseException:  # noqa: BLE001
        pass
    info: dict[str, Any] = {"type": name, "message": message[:1000], "where": where, "frames": frames[-6:]}
    if isinstance(exc, ContractBreach):
        info["breach"] = True  # raised by the probe about what the student's code gave: the student's, not the grader's
        try:
            info["template"], info["params"] = str(exc.template), {str(k): str(v)[:500] for k, v in exc.params.items()}
        except BaseException:  # noqa: BLE001 - a student's subclass may break even this
            pass
    try:
        if isinstance(exc, MemoryError) or "can't allocate memory" in message:
            info["limit"] = protocol.Limit.MEMORY
        elif isinstance(exc, OSError) and exc.errno == errno.EFBIG:
            info["limit"] = protocol.Limit.FILE_SIZE   # Python ignores SIGXFSZ: RLIMIT_FSIZE is "File too large"
        elif isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
            info["limit"] = protocol.Limit.DISK       # the exercise's capped scratch is full (space or inodes)
    except BaseException:  # noqa: BLE001 - a hostile exception class may break even this
        pass
    return info


class ProbeContext:
    """Seeded input makers and the recorder of one probe's observations."""

    def __init__(self, name: str, seed: int, workdir: str, student_file: str | None):
        self.name = name
        self.seed = seed
        self.workdir = workdir
        self.student_file = student_file
        self.generator = torch.Generator().manual_seed(seed)
        self.values: dict[str, Any] = {}
        self.tensors: dict[str, torch.Tensor] = {}
        self.not_tensors: dict[str, str] = {}
        # calls through `outcome` that returned and that raised: the judge's evidence that something was written
        self.calls = {"returned": 0, "raised": 0}

    # --- inputs -------------------------------------------------------------------------------
    def randn(self, *shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        return torch.randn(*shape, generator=self.generator, dtype=torch.float64).to(dtype)

    def randint(self, low: int, high: int, shape: tuple[int, ...]) -> torch.Tensor:
        return torch.randint(low, high, shape, generator=self.generator, dtype=torch.long)

    def randbool(self, *shape: int, p: float = 0.5) -> torch.Tensor:
        return torch.rand(*shape, generator=self.generator) < p

    def fill_parameters(self, module: torch.nn.Module, names: list[str], std: float = 0.2) -> None:
        """Overwrite the named parameters with seeded values, so every implementation computes with the same weights."""
        params = dict(module.named_parameters())
        with torch.no_grad():
            for n in names:
                if n not in params:
                    raise ContractBreach("the module has no parameter `{name}`, which the contract names", name=n)
                p = params[n]
                p.copy_(self.randn(*p.shape, dtype=p.dtype) * std)

    # --- observations ---------------------------------------------------------------------------
    def record(self, **values: Any) -> None:
        for key, value in values.items():
            self.values[key] = _jsonable(value)

    def tensor(self, name: str, value: Any) -> None:
        """Record a tensor; anything that is not a tensor is recorded by its type, for the judge to name."""
        if isinstance(value, torch.Tensor):
            self.tensors[name] = plain_tensor(value)
        else:
            self.not_tensors[name] = type(value).__name__

    def hand_over(self, name: str, tensor: torch.Tensor) -> torch.Tensor:
        """Record `tensor` as the input `name` and return a plain copy to pass to the student's call: the probe's
        own tensor never reaches student code, so nothing the call does to its argument (an in-place edit, a new
        `__class__`) reaches what the probe computes with."""
        self.tensor(name, tensor)
        return plain_tensor(tensor)

    def record_input_after(self, name: str, handed: torch.Tensor) -> None:
        """Record, as `<name>_after_call`, the data of a tensor given by `hand_over` as it is after the call (read
        past any subclass behaviour): the judge compares it with the input it drew."""
        self.tensor(f"{name}_after_call", handed)

    def outcome(self, name: str, call: Callable[[], Any], *, not_implemented_is_an_answer: bool = False) -> Any:
        """Call `call`, record whether it returned or what it raised, and return its value (None if it raised).

        A NotImplementedError that a `raise` of the student's own file raised is the stub's marker, not an answer: it
        ends the probe as not attempted, unless the contract asks for that error here (`not_implemented_is_an_answer`).
        """
        try:
            result = call()
        except NotImplementedError as exc:
            if not not_implemented_is_an_answer and is_stub_raise(exc, self.student_file):
                raise
            self.values[name] = {"raised": describe_exception(exc, self.student_file)}
            self.calls["raised"] += 1
            return None
        except BaseException as exc:  # noqa: BLE001 - SystemExit and friends from student code are observations
            self.values[name] = {"raised": describe_exception(exc, self.student_file)}
            self.calls["raised"] += 1
            return None
        self.values[name] = {"returned": type(result).__name__}
        self.calls["returned"] += 1
        return result

    def encoded(self, status: str, error: dict | None, forbidden: list[dict],
                seconds: float) -> tuple[bytes, bytes | None]:
        """The probe's observation as the bytes of `<name>.json` and of `<name>.safetensors` (None without tensors),
        which the runner hands to the worker to write (grader.worker.runner). Only the functions bound at the top
        of this module are called."""
        tensors = _safetensors_bytes(self.tensors) if self.tensors else None
        payload = {
            "probe": self.name,
            "status": status,
            "error": error,
            "values": self.values,
            "not_tensors": self.not_tensors,
            "tensors": sorted(self.tensors),
            "calls": self.calls,
            protocol.FORBIDDEN_KEY: forbidden,
            "seconds": round(seconds, 4),
        }
        return _join(_encode_json(payload, 0)).encode("ascii"), tensors


def _safetensors_bytes(tensors: dict[str, torch.Tensor]) -> bytes:
    """The safetensors file of plain tensors, written here (safetensors.torch is Python, so replaceable): the
    header's length (8 bytes, little-endian), the JSON header padded with spaces to 8 bytes, then the data."""
    header, chunks, offset = {}, [], 0
    for name, t in tensors.items():
        with _NoTorchFunction(), _NoTorchDispatch():
            raw = _to_bytes(_to_numpy(_view(_reshape(t, (-1,)), torch.uint8)))
        header[name] = {"dtype": _SAFETENSORS_DTYPES[_dtype_of(t)], "shape": list(_shape_of(t)),
                        "data_offsets": [offset, offset + len(raw)]}
        chunks.append(raw)
        offset += len(raw)
    text = _join(_encode_json(header, 0)).encode("ascii")
    text += b" " * (-len(text) % 8)
    return _join_bytes([len(text).to_bytes(8, "little"), text, *chunks])


def _jsonable(value: Any) -> Any:
    """Plain JSON data from probe values: tensors become lists, floats stay floats (NaN and inf included)."""
    if isinstance(value, torch.Tensor):
        return _tolist(plain_tensor(value))
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)  # NaN and inf stay floats: Python's json writes and reads them
    return repr(value)[:200]
