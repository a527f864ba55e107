"""A hostile audits.py: every audit tries to learn, from inside the sandbox, which model it holds, and prints what
it learnt, one line `RT <json>` per finding (the output's tail reaches the report, which the test reads). It also
raises AssertionError and a class of its own with messages that carry markers, which no report may echo.
HOST_PATHS is filled in by the test: files of the grader's that must not be readable from here."""

import gc
import hashlib
import inspect
import json
import os
import socket
import struct
import sys
import time

import torch

HOST_PATHS = []
SEEN = {"n": 0}


def say(**finding):
    print("RT " + json.dumps(finding, sort_keys=True), flush=True)


def short(text):
    return hashlib.sha256(str(text).encode()).hexdigest()[:10]


def source_of(obj):
    try:
        return inspect.getsource(obj)
    except (OSError, TypeError) as exc:
        return f"<{type(exc).__name__}>"


def modules_of_objects():
    """What gc shows: every nn.Module alive in this process, and the modules their classes come from."""
    found = set()
    for obj in gc.get_objects():
        try:
            if isinstance(obj, torch.nn.Module):
                found.add(type(obj).__module__ + "." + type(obj).__qualname__)
        except Exception:  # noqa: BLE001
            pass
    return sorted(found)


def proc_scan():
    """Every process visible here: whose memory, maps or environment can be read."""
    readable = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                cmd = fh.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        for part in ("maps", "environ", "mem"):
            try:
                with open(f"/proc/{pid}/{part}", "rb") as fh:
                    fh.read(64)
                readable.append([pid, part, "models" in cmd])
            except OSError:
                pass
    return readable


def raw_requests(model):
    """Talk to the model process directly, past the handle: ask for what the handle never asks."""
    conn = object.__getattribute__(model, "_connection")
    fd = conn.read_fd
    said = []
    for header in ({"op": "call", "handle": object.__getattribute__(model, "_handle"), "method": "state_dict"},
                   {"op": "call", "handle": object.__getattribute__(model, "_handle"), "method": "__class__"},
                   {"op": "describe", "group": "causality", "index": 0}):
        text = json.dumps(header).encode()
        os.write(fd, struct.pack(">I", len(text)) + text)
        (length,) = struct.unpack(">I", os.read(fd, 4))
        said.append(json.loads(os.read(fd, length)))
    return said


def timing(model, tokens):
    times = []
    for _ in range(15):
        started = time.perf_counter()
        model(tokens)
        times.append(time.perf_counter() - started)
    return round(min(times) * 1000, 2)   # the floor: what a loaded machine adds to some calls is left out


class Leak_found(Exception):
    pass


def audit_causality(model):
    index = SEEN["n"]
    SEEN["n"] += 1
    kind = type(model)
    files = []
    for path in HOST_PATHS:
        try:
            with open(path, "rb") as fh:
                files.append(len(fh.read()))
        except OSError as exc:
            files.append(type(exc).__name__)
    sock = socket.socket(socket.AF_UNIX)
    try:
        sock.connect("/proc/self/cwd/../.models-audits.sock")
        connected = True
    except OSError:
        connected = False
    finally:
        sock.close()
    messages, frames = [], set()
    for bad in (torch.full((1, 4), 999, dtype=torch.long), torch.zeros(1, 99, dtype=torch.long),
                torch.zeros(1, 3)):
        try:
            model(bad)
            messages.append("returned")
        except Exception as exc:  # noqa: BLE001
            messages.append(f"{type(exc).__name__}: {exc} / {exc.__context__ or exc.__cause__!r}")
            frames |= {os.path.basename(f.filename) for f in inspect.getinnerframes(exc.__traceback__)}
    model.eval()
    config = model.config
    tokens = torch.randint(0, config.vocab_size, (1, config.block_size))
    loaded = sorted(m for m in sys.modules if any(w in m for w in ("served", "standin", "catalog", "solutions",
                                                                   "transformer_lm")))
    looks = [kind.__module__, kind.__qualname__, repr(model), sorted(dir(model)), source_of(kind),
             source_of(kind.__call__), inspect.getsourcefile(kind)]
    say(i=index, looks=short(looks), gc=modules_of_objects(), loaded=loaded, files=files, connected=connected,
        said=short(messages), frames=sorted(frames), ms=timing(model, tokens))
    if index == 0:
        say(proc=[r for r in proc_scan() if r[2]], messages=messages, raw=raw_requests(model), module=kind.__module__,
            name=kind.__qualname__, file=str(inspect.getsourcefile(kind))[-24:])
    # markers that must never reach a report: an assertion's message, a class of the student's own
    if index % 2:
        raise AssertionError(f"MARKER-ASSERT-{index}-{short(source_of(kind))}")
    raise Leak_found(f"MARKER-CRASH-{index}")


def audit_targets(make_batch):
    return None


def audit_registration(model):
    return None


def audit_gradients(model, tokens, targets):
    return None


def audit_resume(trainer):
    return None
