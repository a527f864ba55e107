"""Exercise `audits`: the models an audit examines live in the grader's model process, and a hostile audits.py learns
nothing there that tells a correct model from a broken one but their behaviour.

A red-team submission (tests/audits_standin/redteam_audits.py) tries, from inside the sandbox, inspect.getsource,
gc.get_objects, type(model).__module__, reading the reference files, the model process's /proc entries and its
socket, raw requests past the handle, timing, and exception messages and tracebacks; it prints what it learnt, and
the output's tail reaches the report. Each attack is asserted to learn nothing, next to a positive control: the same
technique on the same models held in this process tells them apart. Its own assertion messages and exception class
never reach a criterion's words.
"""

from __future__ import annotations

import gc
import inspect
import io
import json
import os
import socket
import statistics
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest
import torch

from audits_course import STANDIN, audits_course, model_process, submission
from conftest import ROOT

from grader.course import load_course
from grader.models import handles, wire
from grader.models.host import ModelLimits, served_seed

REDTEAM = Path(__file__).resolve().parent / "audits_standin" / "redteam_audits.py"
CAUSALITY = 4          # entries the stand-in serves to audit_causality
SLOW = "small_leak"    # the stand-in's chaff that computes SLOW_S longer per call


def standin():
    """The stand-in catalog imported here, as the model process imports it."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("standin_served_here", STANDIN)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def graded(tmp_path_factory, level: str) -> dict:
    base = tmp_path_factory.mktemp(f"redteam-{level}")
    course = audits_course(base / "course", standin=True)
    # the course's files (a course folder closed to other users, as an installed course is: at the basic level the
    # folder's own permissions are what keeps them; a world-readable checkout would not)
    host_paths = [str(course / "solutions" / "audits" / name) for name in ("served.py", "criteria.py", "audits.py")]
    text = REDTEAM.read_text().replace("HOST_PATHS = []", f"HOST_PATHS = {host_paths!r}")
    sub = submission(base / "sub", text)
    out = base / "out"
    done = subprocess.run([sys.executable, "-m", "grader", "--course", str(course), "grade", str(sub), "--out",
                           str(out), "--sandbox", level, "--exercise", "audits"], capture_output=True, text=True,
                          timeout=900, cwd=ROOT)
    assert done.returncode in (0, 1), done.stderr
    report = json.loads((out / "report.json").read_text())
    exercise = report["exercises"][0]
    findings = [json.loads(line[3:]) for line in exercise["run"]["output_tail"].splitlines()
                if line.startswith("RT {")]
    seed = served_seed(load_course(course).seed, "audits", sub / "audits" / "audits.py")
    entries = [e for e in standin().catalog(course) if e.audit == "causality"]
    order = wire.served_order(seed, "causality", len(entries))
    keys = [entries[order[i]].key for i in range(len(entries))]
    return {"exercise": exercise, "findings": findings, "keys": keys, "paths": host_paths}


LEVELS = ["strict", "basic"] if os.geteuid() == 0 else []


@pytest.fixture(scope="module", params=LEVELS)
def redteam(request, tmp_path_factory):
    return graded(tmp_path_factory, request.param)


def entries(redteam) -> list[dict]:
    """What the red team learnt of each entry it was served, in the order served."""
    found = sorted((f for f in redteam["findings"] if "i" in f), key=lambda f: f["i"])
    assert [f["i"] for f in found] == list(range(CAUSALITY)), redteam["exercise"]["run"]["output_tail"][-800:]
    return found


def first(redteam) -> dict:
    """What it learnt once, with the first entry: the processes it could read, messages in full, raw requests."""
    (found,) = [f for f in redteam["findings"] if "proc" in f]
    return found


def in_process_models():
    """The stand-in's causality entries built here: wheats and chaffs as ordinary objects of this process."""
    served = standin()
    return {e.key: served.build(ROOT, e, 7) for e in served.catalog(ROOT) if e.audit == "causality"}


def test_every_entry_is_the_same_class_of_the_same_module(redteam):
    # its module, class name, repr, dir(), the source of its class and of its __call__, its source file: one for all
    assert len({f["looks"] for f in entries(redteam)}) == 1
    assert (first(redteam)["module"], first(redteam)["name"]) == ("grader.models.handles", "Model")
    # positive control: held in this process, the broken models are other classes than the correct ones
    models = in_process_models()
    assert len({type(m).__qualname__ for m in models.values()}) > 1


def test_getsource_gives_the_handles_code_alone(redteam):
    assert len({f["looks"] for f in entries(redteam)}) == 1
    assert first(redteam)["file"].endswith(os.path.join("models", "handles.py"))
    models = in_process_models()
    sources = {inspect.getsource(type(m)) for m in models.values()}
    assert len(sources) > 1   # positive control: here the source tells a broken model from a correct one


def test_gc_finds_no_model_and_no_reference_module(redteam):
    for f in entries(redteam):
        assert f["gc"] == [] and f["loaded"] == []
    models = in_process_models()   # positive control: the same scan here finds the models and the catalog's modules
    with warnings.catch_warnings():   # isinstance on torch's deprecated aliases warns
        warnings.simplefilter("ignore")
        alive = {type(o).__qualname__ for o in gc.get_objects() if isinstance(o, torch.nn.Module)}
    assert "TransformerLM" in alive and len(models) == CAUSALITY
    assert any("standin" in m for m in sys.modules)


def test_reference_files_and_the_socket_are_out_of_reach(redteam):
    for f in entries(redteam):
        assert len(f["files"]) == 3 and all(isinstance(got, str) and got.endswith("Error") for got in f["files"])
        assert f["connected"] is False
    for path in redteam["paths"]:   # positive control: they are there, and the grader reads them
        assert Path(path).read_bytes()


def test_no_process_of_the_grader_is_readable_from_the_sandbox(redteam, tmp_path):
    assert first(redteam)["proc"] == []
    # positive control: the model process's maps are readable to its own user (here, the grader's)
    with model_process(STANDIN, tmp_path) as (host, connection):
        assert connection.count("causality") == CAUSALITY   # it is up
        assert Path(f"/proc/{host.proc.pid}/maps").read_bytes()


def test_raw_requests_past_the_handle_are_refused(redteam):
    raw = first(redteam)["raw"]
    assert len(raw) == 3 and all(set(r) - {"tensors"} == {"refused"} and not r["tensors"] for r in raw), raw


def test_exception_messages_and_tracebacks_are_the_same_for_every_entry(redteam):
    found = entries(redteam)
    assert len({f["said"] for f in found}) == 1
    assert all(f["frames"] and set(f["frames"]) <= {"handles.py", "audits.py"} for f in found)
    said = " ".join(first(redteam)["messages"])
    assert "ValueError" in said and "block_size" not in said   # what the model refused is said by its type alone
    # positive control: raised here, the traceback names the catalog's file
    models = in_process_models()
    try:
        models["reference"](torch.zeros(1, 99, dtype=torch.long))
    except ValueError as exc:
        frames = {os.path.basename(f.filename) for f in inspect.getinnerframes(exc.__traceback__)}
        assert "model.py" in frames and "block_size" in str(exc)


def test_timing_does_not_tell_the_slow_broken_model(redteam):
    ms = {redteam["keys"][f["i"]]: f["ms"] for f in entries(redteam)}
    quantum_ms = ModelLimits().quantum_s * 1000
    wheats = [ms[k] for k in ("reference", "reference_dropout_train")]
    assert all(v >= quantum_ms - 0.5 for v in ms.values()), ms
    assert abs(ms[SLOW] - statistics.median(wheats)) < 3.0, ms   # each the fastest of 15 calls
    # positive control: in this process the slow chaff takes SLOW_S longer per call
    models = in_process_models()
    tokens = torch.randint(0, 8, (1, 8))

    def fastest_ms(model) -> float:
        times = []
        for _ in range(15):
            started = time.perf_counter()
            model(tokens)
            times.append(time.perf_counter() - started)
        return min(times) * 1000

    assert fastest_ms(models[SLOW]) - fastest_ms(models["reference"]) > 4.0


def test_no_word_of_the_audit_reaches_a_criterion(redteam):
    criteria = json.dumps(redteam["exercise"]["criteria"])
    assert "MARKER" not in criteria and "Leak_found" not in criteria
    (accepts,) = [c for c in redteam["exercise"]["criteria"] if c["id"] == "causality_accepts_correct"]
    assert accepts["status"] == "failed"
    # positive control: the audit did raise those messages (its output says what it did before raising)
    assert len(entries(redteam)) == CAUSALITY
    assert "crashed with exception" in accepts["message"]["en"] or "AssertionError" in accepts["message"]["en"]


def test_a_handle_holds_a_number_and_a_connection_only(tmp_path):
    """What a handle object holds, read by any means, is the connection and an integer."""
    with model_process(STANDIN, tmp_path) as (host, connection):
        model = connection.open("causality", 0)
        assert not hasattr(model, "__dict__")
        held = [object.__getattribute__(model, slot) for slot in type(model).__slots__ + handles._Handle.__slots__
                if slot]
        assert {type(h) for h in held} == {handles.Connection, int}
        assert set(vars(connection)) == {"read_fd", "write_fd", "keep", "broken"}
        logits = model(torch.zeros(1, 4, dtype=torch.long))
        assert logits.shape == (1, 4, 8) and type(logits) is torch.Tensor


def frame_of(header: dict) -> bytes:
    text = json.dumps(header).encode()
    return len(text).to_bytes(4, "big") + text


@pytest.mark.parametrize("data", [
    (wire.MAX_HEADER + 1).to_bytes(4, "big"),                                  # a header past its cap
    frame_of({"tensors": [["float32", [1 << 30]]]}),                           # tensors past their cap
    frame_of({"tensors": [["object", [1]]]}),                                  # no such dtype
    frame_of({"tensors": [["int64", [-1]]]}),                                  # a negative size
    frame_of({"tensors": [["int64", [True]]]}),                                # a size that is no integer
    (5).to_bytes(4, "big") + b"[1,2]",                                         # a header that is no object
    (3).to_bytes(4, "big") + b"\xff\xfe{",                                     # not UTF-8
    (200000).to_bytes(4, "big") + b"[" * 100000 + b"]" * 100000,               # nested past Python's recursion
])
def test_a_malformed_frame_is_refused_before_anything_is_allocated(data):
    stream = io.BytesIO(data)

    def read_exactly(n: int) -> bytes:
        got = stream.read(n)
        if len(got) < n:
            raise EOFError
        return got

    with pytest.raises(wire.WireError):
        wire.read_frame(read_exactly)
    # positive control: a well-formed frame of the same kind is read back, tensors by value
    tensor = torch.arange(6, dtype=torch.int64).reshape(2, 3)
    stream = io.BytesIO(wire.encode({"value": {"$t": 0}}, [tensor]))
    header, tensors = wire.read_frame(read_exactly)
    assert torch.equal(wire.unpack(header["value"], tensors), tensor)


def test_garbage_ends_its_connection_and_the_next_one_is_served(tmp_path):
    """A newer connection is served at once, though an older one is still open (the context's own, idle: what a
    process left behind by an exercise's child could hold); one that sends garbage is ended."""
    with model_process(STANDIN, tmp_path) as (host, _):
        rude = socket.socket(socket.AF_UNIX)
        rude.connect(str(tmp_path / host.name))
        rude.sendall(b"\xff" * 64)
        try:
            ended = rude.recv(16) == b""
        except ConnectionResetError:   # closed with the garbage unread
            ended = True
        assert ended   # the model process ended that connection
        rude.close()
        sock = socket.socket(socket.AF_UNIX)
        sock.connect(str(tmp_path / host.name))
        connection = handles.Connection(sock.fileno(), sock.fileno(), keep=sock)
        model = connection.open("causality", 0)
        with pytest.raises(handles.ModelError, match="refused the call: the call's tensors hold more than"):
            model(torch.zeros(1, 1 << 19, dtype=torch.long))
        assert model(torch.zeros(1, 4, dtype=torch.long)).shape == (1, 4, 8)
        assert host.fault() == ""
