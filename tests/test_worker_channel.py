"""The worker's end of a child's result pipe (grader/worker/__main__.py, `Results`): only the runner's answer for the
step the worker asked for, with that step's token, once, becomes an observation file; whatever else student code
writes on the pipe is ignored, and no write of it can cost the same code's other probes anything."""

from __future__ import annotations

import hashlib
import json
import re

import pytest

from grader.worker import protocol
from grader.worker.__main__ import ObservationFiles, Results

FORBIDDEN = {"aten::native_layer_norm", "torch.nn.LayerNorm"}


@pytest.fixture
def child(tmp_path):
    """Results for a child with steps _import, shapes, values, and the folder its observations go to."""
    files = ObservationFiles({"obs_dir": str(tmp_path)}, {})
    steps, seeds = [protocol.IMPORT_PROBE, "shapes", "values"], {"shapes": 11, "values": 12}
    return Results(steps, seeds, FORBIDDEN, files), tmp_path


def ask(results: Results) -> tuple[str, str, int]:
    """What the worker sends when the runner asks for its next step."""
    results.feed(protocol.NEXT + b"\n")
    line = results.next_request().decode()
    assert re.fullmatch(r"[0-9a-f]{32} \S+ \d+\n", line), line
    token, name, seed = line.split()
    return token, name, int(seed)


def answer(token: str, text: bytes, tensors: bytes = b"") -> bytes:
    return protocol.RESULT + f"{token} {len(text)} {len(tensors)}\n".encode() + text + tensors


def observation(name: str) -> bytes:
    return json.dumps({"probe": name, "status": "ok"}).encode()


def test_the_runners_answer_is_written_with_its_digests(child):
    results, folder = child
    token, name, seed = ask(results)
    assert (name, seed) == (protocol.IMPORT_PROBE, 0)
    results.feed(answer(token, observation(name)))
    token, name, seed = ask(results)
    assert (name, seed) == ("shapes", 11)
    text, tensors = observation(name), b"\x08\x00\x00\x00\x00\x00\x00\x00{}      "
    results.feed(answer(token, text, tensors))
    assert (folder / "shapes.json").read_bytes() == text and (folder / "shapes.safetensors").read_bytes() == tensors
    assert results.files.acks["shapes"] == [hashlib.sha256(text).hexdigest(), hashlib.sha256(tensors).hexdigest()]
    assert results.waiting is None


def test_an_answer_arrives_byte_by_byte(child):
    results, folder = child
    token, name, _ = ask(results)
    for byte in answer(token, observation(name), b"tensor bytes\n\nresult x 1 1\n"):
        results.feed(bytes([byte]))
    assert (folder / "_import.safetensors").read_bytes() == b"tensor bytes\n\nresult x 1 1\n"
    assert (folder / "_import.json").read_bytes() == observation(name)


def test_lines_that_are_not_the_runners_are_ignored(child):
    """The acknowledgement lines student code once forged, junk, a line too long to be the runner's, an answer with a
    token no step was given, or with the token of a step not asked yet: nothing is written, and the runner's own
    answer after them still counts."""
    results, folder = child
    token, name, _ = ask(results)
    forged = observation("causality")
    results.feed(f"causality {hashlib.sha256(forged).hexdigest()} -\n".encode())
    results.feed(b"x" * 5000 + b"result " + token.encode() + b" 5 0\nhello\n")   # within one overlong line
    results.feed(b"\xff\xfe binary\n" + answer("0" * 32, forged) + b"started\n")
    assert list(folder.iterdir()) == []
    results.feed(answer(token, observation(name)))
    assert sorted(p.name for p in folder.iterdir()) == ["_import.json"]
    assert results.started


def test_an_answer_cannot_claim_a_step_that_has_not_started(child):
    """A token exists only once its step is asked for: what was written before cannot claim that step."""
    results, folder = child
    token, _, _ = ask(results)
    guessed = [answer(t, observation("shapes")) for t in ("0" * 32, token[::-1], token.upper())]
    results.feed(answer(token, observation("_import")) + b"".join(guessed))
    shapes, name, _ = ask(results)
    assert name == "shapes" and not (folder / "shapes.json").exists() and results.waiting == shapes


def test_a_second_answer_with_a_token_spoils_its_step(child):
    """Student code that answers for the running probe and lets the runner answer too gains nothing: neither counts."""
    results, folder = child
    token, name, _ = ask(results)
    results.feed(answer(token, observation(name)))            # what student code wrote
    results.feed(answer(token, observation(name) + b" "))     # the runner's own answer, later
    assert results.files.acks[name] is None


def test_an_observation_larger_than_allowed_ends_its_step_without_a_file(child):
    """The step is answered (the next one is asked for, the child does not wait out its clock), but nothing too
    large is written: JSON over the cap, no file; tensors over the cap, the JSON alone (the judge names it)."""
    results, folder = child
    token, _, _ = ask(results)
    results.feed(protocol.RESULT + f"{token} {protocol.MAX_JSON_BYTES + 1} 0\n".encode())
    results.feed(b"{" * (protocol.MAX_JSON_BYTES + 1))
    assert results.waiting is None and list(folder.iterdir()) == []
    token, name, _ = ask(results)
    text = observation(name)
    results.feed(protocol.RESULT + f"{token} {len(text)} {protocol.MAX_TENSOR_BYTES + 1}\n".encode() + text)
    for _ in range(64):
        results.feed(b"\0" * (1 << 20))
    results.feed(b"\0" + answer("f" * 32, b"{}"))
    assert results.waiting is None and sorted(p.name for p in folder.iterdir()) == ["shapes.json"]
    assert results.files.acks["shapes"] == [hashlib.sha256(text).hexdigest(), None]


def test_forbidden_names_the_hooks_write_are_kept_and_others_are_not(child):
    results, _ = child
    results.feed(b"op aten::add\nop aten::native_layer_norm\ncall torch.nn.LayerNorm\nop aten::native_layer_norm\n"
                 b"call torch.nn.Linear\nop aten::embedding\n")
    assert results.files.forbidden == FORBIDDEN


def test_no_step_is_sent_before_the_child_asks_and_none_after_the_last(child):
    results, _ = child
    assert not results.wants
    for _ in range(3):
        token, name, _ = ask(results)
        results.feed(answer(token, observation(name)))
    results.feed(protocol.NEXT + b"\n")
    assert results.next_request() is None
