"""The model process: `python -I -m grader.models.server (--listen-fd N | --stdio)`, its setup as one JSON line on
stdin (grader/models/host.py writes it).

It imports the course's served module (a file outside every box: `catalog(root)` lists the entries, `build(root,
entry, seed)` makes one) and answers the calls of model handles (grader/models/handles.py) over frames of
grader/models/wire.py, one connection at a time: `count` (how many entries a group serves), `open` (entry i of a
group, in the order `wire.served_order` gives for the setup's seed), `call` (one allowed method of an object it
keeps) and `close`. Each connection starts from nothing: the objects opened on it are built for it and forgotten
with it.

What the other side learns is the behaviour of the calls and nothing else:
- every reply is held until a whole number of quanta (`quantum_s` for a model's or a function's calls,
  `run_quantum_s` for a trainer's or a run's, `open_quantum_s` for `open`) has passed since its request came, so a
  chaff that computes a little longer than a wheat replies at the same time; each entry is built once at start-up
  (`warm`), so that no entry's first build, which compiles its source, is slower than another's;
- an exception raised by served code reaches the other side as its builtin type's name only (`ValueError`), any
  other type as "an exception": never a message, a traceback or a name of the course's;
- a method outside the kind's allow-list (`KINDS`) is refused in the same words whatever the object.

Its own limits: each call may take `call_limit_s` of wall clock (an interval timer), the process `cpu_s` of CPU time
(RLIMIT_CPU) and `memory_mb` of resident memory (checked after each call). Passing one, or any failure of its own,
is written as one `FAULT <sentence>` line on stderr (the host's log) and ends the process: the host then names the
exercise's run a grader fault, never the student's.
"""

from __future__ import annotations

import argparse
import builtins
import gc
import importlib.util
import json
import math
import os
import secrets
import select
import signal
import socket
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from grader.models import FAULT, wire

try:
    import resource
except ImportError:   # Windows (the plain route on a student's machine): no rlimits, no resident-memory count
    resource = None  # type: ignore[assignment]
TIMER = hasattr(signal, "setitimer")   # the per-call limit's interval timer (not on Windows)

# What a handle may ask of each kind of object (COURSE.md §12's calls); `call` is calling the object itself.
KINDS = {
    "model": frozenset({"forward", "eval", "train", "config", "named_parameters", "gradients"}),
    "function": frozenset({"call"}),
    "trainer": frozenset({"new", "load"}),
    "run": frozenset({"step", "save", "parameters"}),
}
MAX_OBJECTS = 256  # objects open on one connection (each entry opened, each run started)
# elements of a call's tensors together: what any check needs many times over, and small enough that no call of a
# served entry on them comes near `call_limit_s` (so a call past that limit is the grader's fault, not the input's)
MAX_ARGUMENT_ELEMENTS = 1 << 18
MAX_FILES = 256    # checkpoints saved on one connection
TOKEN_BYTES = 16   # a saved checkpoint's name as its handle writes it into the student's file


class CallLimit(BaseException):
    """The interval timer's signal: the call ran past `call_limit_s`."""


class Refused(Exception):
    """A request the process will not serve, said in the grader's words."""


def kind_of(obj: Any) -> str | None:
    if isinstance(obj, torch.nn.Module):
        return "model"
    if all(callable(getattr(obj, name, None)) for name in ("new", "load")):
        return "trainer"
    if all(callable(getattr(obj, name, None)) for name in ("step", "save", "parameters")):
        return "run"
    if callable(obj):
        return "function"
    return None


def said_type(exc: BaseException) -> str:
    """An exception of served code as the other side may see it: a builtin type's name, nothing else."""
    name = type(exc).__name__
    return name if getattr(builtins, name, None) is type(exc) else "an exception"


class Served:
    """The served module's entries and what one connection opened of them."""

    def __init__(self, setup: dict):
        self.setup = setup
        self.root = Path(setup["root"])
        self.seed = int(setup["seed"])
        spec = importlib.util.spec_from_file_location("served_catalog", setup["served"])
        if spec is None or spec.loader is None:
            raise RuntimeError(f"cannot load {setup['served']}")
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module   # dataclasses look their module up
        spec.loader.exec_module(module)
        self.module = module
        self.groups: dict[str, list] = {}
        for entry in module.catalog(self.root):
            self.groups.setdefault(entry.audit, []).append(entry)
        self.order = {g: wire.served_order(self.seed, g, len(es)) for g, es in self.groups.items()}
        # handle -> (kind, object, its own RNG state: each object draws as if it were alone in a process of its own,
        # so two runs stepped in turn draw the dropout masks each would alone)
        self.objects: dict[int, tuple[str, Any, torch.Tensor]] = {}
        self.files: dict[str, str] = {}
        self.folder = tempfile.mkdtemp(prefix="grader-models-")
        self.next_handle = 1
        self.warm()

    def warm(self) -> None:
        """Build every entry once, and take each trainer through a run's every call once: what is paid once per
        process (a source compiled, torch's optimizer machinery imported, the first torch.save) is paid here, before
        any connection is served. A failure is left for the call that meets it."""
        path = os.path.join(self.folder, "warm.pt")
        for entries in self.groups.values():
            for entry in entries:
                try:
                    obj = self.module.build(self.root, entry, self.seed)
                    if kind_of(obj) == "trainer":
                        run = obj.new()
                        run.step()
                        run.save(path)
                        obj.load(path).parameters()
                except Exception:  # noqa: BLE001 - said when the entry is opened
                    pass
        # What exists now (torch, the served module and its sources) lives as long as the process: frozen, the
        # collector never walks it again, so a collection during a call (which would hold that one reply a quantum
        # longer) walks only what the connection made, milliseconds.
        gc.collect()
        gc.freeze()

    def kind(self, header: dict) -> str | None:
        """The kind of object a request calls (None for anything else)."""
        handle = header.get("handle")
        held = self.objects.get(handle) if isinstance(handle, int) else None
        return held[0] if held is not None else None

    def reset(self) -> None:
        """A new connection: nothing of the last one's objects or files."""
        self.objects.clear()
        for path in self.files.values():
            try:
                os.unlink(path)
            except OSError:
                pass
        self.files.clear()

    def keep(self, obj: Any) -> dict:
        """A handle for `obj`, which starts from the RNG state as it is now (right after the call that made it)."""
        kind = kind_of(obj)
        if kind is None:
            raise Refused("the model returned a value that cannot cross to your process")
        if len(self.objects) >= MAX_OBJECTS:
            raise Refused(f"more than {MAX_OBJECTS} objects open on one connection")
        handle = self.next_handle
        self.next_handle += 1
        self.objects[handle] = (kind, obj, torch.get_rng_state())
        return {"$h": handle, "kind": kind}

    def answer(self, header: dict, tensors: list[torch.Tensor]) -> tuple[dict, list[torch.Tensor]]:
        op = header.get("op")
        out: list[torch.Tensor] = []
        if op == "count":
            return {"value": len(self.groups.get(str(header.get("group")), []))}, out
        if op == "open":
            group, index = str(header.get("group")), header.get("index")
            entries = self.groups.get(group, [])
            if not isinstance(index, int) or not 0 <= index < len(entries):
                raise Refused("no such model")
            position = self.order[group][index]
            torch.manual_seed(self.seed ^ (index + 1) * 7919)
            obj = self.module.build(self.root, entries[position], self.seed)
            return {"value": self.keep(obj)}, out
        if op == "close":
            handle = header.get("handle")
            if isinstance(handle, int):
                self.objects.pop(handle, None)
            return {"value": None}, out
        if op != "call":
            raise Refused("an unknown request")
        handle, method = header.get("handle"), header.get("method")
        if not isinstance(handle, int) or handle not in self.objects:
            raise Refused("the object is not open (any more)")
        kind, obj, state = self.objects[handle]
        if method not in KINDS[kind]:
            raise Refused("the handle has no such call")
        if sum(t.numel() for t in tensors) > MAX_ARGUMENT_ELEMENTS:
            raise Refused(f"the call's tensors hold more than {MAX_ARGUMENT_ELEMENTS} elements")
        args = wire.unpack(header.get("args", []), tensors)
        if not isinstance(args, list):
            raise Refused("malformed arguments")
        torch.set_rng_state(state)
        value = getattr(self, f"_{kind}_{method}")(obj, *args)
        if kind != "trainer":   # a trainer starts each run from the same state: its runs are alike until they differ
            self.objects[handle] = (kind, obj, torch.get_rng_state())
        if isinstance(value, dict) and "$file" in value:
            return {"value": value}, out
        return {"value": wire.pack(value, out, self.keep)}, out

    # --- model ------------------------------------------------------------------------------------------------
    def _model_forward(self, model, tokens):
        with torch.no_grad():
            out = model(tokens)
        return out["logits"] if isinstance(out, dict) else out

    def _model_eval(self, model):
        model.eval()

    def _model_train(self, model):
        model.train()

    def _model_config(self, model):
        config = model.config
        fields = getattr(config, "__dataclass_fields__", None) or vars(config)
        values = {name: getattr(config, name) for name in fields}
        return {k: v for k, v in values.items() if v is None or isinstance(v, (bool, int, float, str))}

    def _model_named_parameters(self, model):
        return [(name, p.detach()) for name, p in model.named_parameters()]

    def _model_gradients(self, model, tokens, targets):
        model.zero_grad(set_to_none=True)
        loss = model(tokens, targets=targets)["loss"]
        try:
            loss.backward()
        except Exception:  # noqa: BLE001 - a loss with no way back: no parameter gets a gradient
            return {name: None for name, _ in model.named_parameters()}
        return {name: None if p.grad is None else p.grad.detach() for name, p in model.named_parameters()}

    # --- function, trainer, run -------------------------------------------------------------------------------
    def _function_call(self, function, *args):
        return function(*args)

    def _trainer_new(self, trainer):
        return trainer.new()

    def _trainer_load(self, trainer, token):
        path = self.files.get(token) if isinstance(token, str) else None
        if path is None:
            raise Refused("the file names nothing this connection saved")
        return trainer.load(path)

    def _run_step(self, run):
        return float(run.step())

    def _run_save(self, run):
        if len(self.files) >= MAX_FILES:
            raise Refused(f"more than {MAX_FILES} checkpoints saved on one connection")
        token = secrets.token_hex(TOKEN_BYTES)
        path = os.path.join(self.folder, f"{len(self.files)}.pt")
        run.save(path)
        self.files[token] = path
        return {"$file": token}

    def _run_parameters(self, run):
        return dict(run.parameters())


def serve_connection(served: Served, read_exactly, send, setup: dict, waiting=lambda: False) -> None:
    """Answer requests until the stream ends or breaks the format, or `waiting()` says a newer connection came (the
    exercise's next child: the one before it has ended, whatever it left holding its socket)."""
    quanta = {"open": float(setup["open_quantum_s"]), "model": float(setup["quantum_s"]),
              "function": float(setup["quantum_s"]), "trainer": float(setup["run_quantum_s"]),
              "run": float(setup["run_quantum_s"])}
    limit_s, memory_kb = float(setup["call_limit_s"]), int(setup["memory_mb"]) * 1024
    served.reset()
    while True:
        if waiting():
            return
        try:
            header, tensors = wire.read_frame(read_exactly)
        except (EOFError, OSError):
            return
        except wire.WireError:
            return   # not a handle's frame: the connection ends, the process serves the next
        came = time.monotonic()
        reply: dict
        out: list[torch.Tensor] = []
        if TIMER:
            signal.setitimer(signal.ITIMER_REAL, limit_s)
        try:
            reply, out = served.answer(header, tensors)
        except CallLimit:
            fault(f"a call of the grader's model took longer than {limit_s:g} s")
        except Refused as exc:
            reply = {"refused": str(exc)}
        except wire.WireError:
            reply = {"refused": "the model returned a value that cannot cross to your process"}
        except Exception as exc:  # noqa: BLE001 - served code raised on what the student asked: behaviour
            reply = {"raised": said_type(exc)}
        finally:
            if TIMER:
                signal.setitimer(signal.ITIMER_REAL, 0)
        if resident_kb() > memory_kb:
            fault(f"the grader's model process used more than {memory_kb // 1024} MB")
        try:
            frame = wire.encode(reply, out)
        except wire.WireError:
            frame = wire.encode({"refused": "the model's answer is larger than the channel carries"}, [])
        step = quanta["open"] if header.get("op") == "open" else quanta.get(served.kind(header), quanta["model"])
        elapsed = time.monotonic() - came
        hold = max(1, math.ceil(elapsed / step)) * step - elapsed
        if hold > 0:
            time.sleep(hold)
        try:
            send(frame)
        except OSError:
            return


def resident_kb() -> int:
    """The most resident memory this process has held, in KiB (0 where the system does not say)."""
    if resource is None:
        return 0
    most = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return most // 1024 if sys.platform == "darwin" else most   # macOS counts bytes, Linux KiB


def fault(sentence: str) -> None:
    sys.stderr.write(f"{FAULT} {sentence}\n")
    sys.stderr.flush()
    os._exit(2)


def _on_alarm(signum, frame):
    raise CallLimit()


def _reader(read) -> Any:
    def read_exactly(n: int) -> bytes:
        chunks, left = [], n
        while left:
            chunk = read(left)
            if not chunk:
                raise EOFError
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)
    return read_exactly


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="grader.models.server")
    parser.add_argument("--listen-fd", type=int)
    parser.add_argument("--stdio", action="store_true")
    args = parser.parse_args(argv)
    stdin = sys.stdin.buffer
    setup = json.loads(stdin.readline())
    os.environ["OMP_NUM_THREADS"] = "1"
    torch.set_num_threads(1)
    cpu = int(setup["cpu_s"])
    if resource is not None:
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        signal.signal(signal.SIGXCPU, lambda *_: fault(f"the grader's model process used more than {cpu} s of CPU"))
    if TIMER:
        signal.signal(signal.SIGALRM, _on_alarm)
    try:
        served = Served(setup)
    except Exception as exc:  # noqa: BLE001 - the course's served module failed: the grader's fault
        fault(f"the grader's models could not be built ({type(exc).__name__}: {exc})")
        return 2
    if args.stdio:
        out = os.fdopen(os.dup(1), "wb")
        os.dup2(2, 1)   # nothing served code prints reaches the frames

        def send(frame: bytes) -> None:
            out.write(frame)
            out.flush()

        serve_connection(served, _reader(stdin.read), send, setup)
        return 0
    stdin.close()
    listener = socket.socket(fileno=args.listen_fd)
    while True:
        conn, _ = listener.accept()
        with conn:
            def waiting(conn=conn) -> bool:
                """Wait for the next request; True when a newer connection came first."""
                ready, _, _ = select.select([conn, listener], [], [])
                return listener in ready
            serve_connection(served, _reader(conn.recv), conn.sendall, setup, waiting)


if __name__ == "__main__":
    sys.exit(main())
