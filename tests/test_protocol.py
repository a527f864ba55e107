"""The names every side of the pipe speaks (grader/worker/protocol.py): enums that are their strings on every pipe
and in every report, one `Limits` carried whole from course.toml to the worker and the judge, one writer of
observation files and one reader of the hooks' lines for the worker and the plain route."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import pytest

from grader.course import load_course
from grader.grading.pipeline import job_for, summary_of
from grader.judge.observations import RunSummary
from grader.report.model import STATUSES
from grader.sandbox.supervisor import Run
from grader.worker import protocol
from grader.worker.protocol import Event, Limit, Limits, ProbeStatus, Status

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("enum, strings", [
    (Event, ["ready", "start", "child", "acks", "done", "finished"]),
    (Limit, ["time", "cpu", "output", "file_size", "memory", "disk"]),
    (ProbeStatus, ["ok", "raised", "not_implemented", "grader_fault"]),
    (Status, ["passed", "failed", "error", "not_attempted", "timeout", "crashed", "blocked", "grader_error"]),
])
def test_each_name_is_written_as_the_string_it_was(enum, strings):
    """Reports and pipes written before the enums read the same: each member dumps, formats and compares as the
    string it replaced (a key of a dict too), and the string read back is the member."""
    assert [m.value for m in enum] == strings
    assert json.dumps({m: m for m in enum}) == json.dumps({s: s for s in strings})
    assert [f"{m}" for m in enum] == [str(m) for m in enum] == strings
    assert all(enum(s) is m and s == m for s, m in zip(strings, enum, strict=True))


def test_the_report_knows_every_status_in_its_schemas_order():
    schema = json.loads((ROOT / "grader/report/schema.json").read_text(encoding="utf-8"))
    assert list(STATUSES) == list(Status) == schema["$defs"]["status"]["enum"]


def test_limits_read_from_a_table_take_their_types_and_default_the_rest():
    limits = Limits.from_table({"timeout_s": 5, "memory_mb": "512", "points": {"x": 1}})
    assert limits == Limits(timeout_s=5.0, memory_mb=512) and type(limits.timeout_s) is float
    assert (limits.output_kb, limits.disk_mb, limits.files) == (Limits().output_kb, Limits().disk_mb, Limits().files)
    with pytest.raises(ValueError):
        Limits.from_table({"files": "many"})
    with pytest.raises(dataclasses.FrozenInstanceError):
        limits.files = 1   # type: ignore[misc]


def test_an_exercises_limits_reach_the_worker_and_the_judge_whole(tmp_path):
    """course.toml's limits, as the worker is told them (the request) and as the judge reads them (the summary
    a grading writes and a kept record holds), are one `Limits`: none is retyped on the way."""
    course = load_course(ROOT)
    ex = dataclasses.replace(course.exercise("heads"), limits=Limits(timeout_s=7.5, memory_mb=123, output_kb=45,
                                                                       disk_mb=67, files=89))
    request = job_for(ex, tmp_path / ex.file).request(boxed=False, course_seed=1, scratch=tmp_path)
    assert Limits.from_table(request) == ex.limits
    assert {k: request[k] for k in ex.limits.to_dict()} == {"timeout_s": 7.5, "memory_mb": 123, "output_kb": 45,
                                                           "disk_mb": 67, "files": 89}
    summary = json.loads(json.dumps(summary_of(ex, Run(ex.id, limit=Limit.TIME))))   # as a kept record holds it
    read = RunSummary.from_dict(summary)
    assert read.limits == ex.limits and read.limit is Limit.TIME
    assert RunSummary.from_dict({"limit": None}).limits is None   # a run that says no limits has none


def test_the_course_reads_its_limits_with_the_defaults_for_what_it_leaves_out():
    course = load_course(ROOT)
    assert all(isinstance(ex.limits, Limits) for ex in course.exercises)
    assert course.exercise("heads").limits.disk_mb == Limits().disk_mb   # course.toml's [defaults] says 256 too


def test_write_new_writes_a_fresh_file_and_never_an_existing_one_or_a_link(tmp_path):
    protocol.write_new(str(tmp_path / "a.json"), b'{"x": "\\r\\n"}\n')
    assert (tmp_path / "a.json").read_bytes() == b'{"x": "\\r\\n"}\n'   # bytes as they are, on every system
    with pytest.raises(FileExistsError):
        protocol.write_new(str(tmp_path / "a.json"), b"again")
    (tmp_path / "elsewhere").write_bytes(b"kept")
    os.symlink(tmp_path / "elsewhere", tmp_path / "link.json")
    with pytest.raises(OSError):
        protocol.write_new(str(tmp_path / "link.json"), b"through the link")
    assert (tmp_path / "elsewhere").read_bytes() == b"kept"
    folder = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        protocol.write_new("b.json", b"relative", dir_fd=folder)   # the worker writes into a folder it holds
    finally:
        os.close(folder)
    assert (tmp_path / "b.json").read_bytes() == b"relative"


@pytest.mark.parametrize("line, name", [
    (b"op aten::embedding", "aten::embedding"), (b"call torch.nn.Embedding", "torch.nn.Embedding"),
    (b"op ", ""), (b"op a b", "a b"), (b"op \xff", "\ufffd"),
    (b"next", None), (b"started", None), (b"result abc 1 0", None), (b"operator x", None), (b"opx", None),
])
def test_a_hooks_line_names_what_it_saw_and_no_other_line_names_anything(line, name):
    assert protocol.hook_name(line) == name
