"""One submission's observations never cost a classmate its grade.

Three submissions hostile to the judge (tests/judge_hostile/: a tensor whose `.shape` lies, a forbidden-call record
of 21,000 places, a tensor that takes the judge past its memory limit) are graded, queued ahead of two correct
classmates, in `grader batch --jobs 2`, `grader batch --cluster local` and `grader classroom sync` (the fake
GitHub of tests/test_classroom.py). The course copy lowers the judge's limits in its `[judge]` table, so that a
judge that went over them would show it. Every classmate's report is the one it gets when graded alone, and
each hostile submission gets a row with a status and its cause. The unit tests below read hand-made
observations: the shape comes from the stored tensor, oversized records are refused with the reason, and the
forbidden-call record is merged in one pass.
"""

from __future__ import annotations

import csv
import io
import json
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from conftest import ROOT, course_copy
from grader.course import load_course
from grader.report.model import stable_view

# end to end: every test here grades in a sandbox (`pytest -m "not slow"` leaves them out)
pytestmark = pytest.mark.slow

HOSTILE_DIR = ROOT / "tests" / "judge_hostile"
EXERCISES = {"masks": "masks.py", "layer_norm": "norm.py"}
HOSTILE = {"a_liar": "lying_shape.py", "b_sprayer": "forbidden_spray.py", "c_hoarder": "huge_tensor.py"}
CLASSMATES = {"d_alice": None, "e_bob": {"masks": "arange_exp_sum", "layer_norm": "var_rsqrt"}}   # None: solutions
JUDGE_TABLE = "[judge]\nmemory_mb = 96\ncriterion_cpu_s = 2\n\n"   # the slowest correct criterion takes 0.05 s
TIMEOUT_S = 600          # an exercise's wall time: the sprayer's probes, on a loaded machine
EXPECTED = {             # per hostile submission: (exercise, criterion, status, words of its message)
    "a_liar": ("masks", "causal_mask_shape", "failed", "has shape [2000000, 1, 1]; expected [1, 1]"),
    "b_sprayer": ("layer_norm", "no_forbidden_api", "failed", "(and 20999 more forbidden calls)"),
    "c_hoarder": ("masks", "padding_mask_shape", "error", "exceeded the judge's memory limit of 96 MB"),
}


def hostile_exercise(name: str) -> str:
    return (HOSTILE_DIR / HOSTILE[name]).read_text().split("\n", 1)[0].removeprefix("# exercise: ").strip()


def sources(name: str) -> dict[str, str]:
    """exercise -> the text of the student's file: the reference, with a hostile file appended or a variant."""
    texts = {}
    for ex, file in EXERCISES.items():
        variant = (CLASSMATES.get(name) or {}).get(ex)
        source = ROOT / "solutions" / ex / "variants" / variant / file if variant else ROOT / "solutions" / ex / file
        text = source.read_text()
        if name in HOSTILE and hostile_exercise(name) == ex:
            text += "\n\n" + (HOSTILE_DIR / HOSTILE[name]).read_text()
        texts[ex] = text
    return texts


def write_submission(folder: Path, name: str) -> Path:
    for ex, text in sources(name).items():
        (folder / name / ex).mkdir(parents=True)
        (folder / name / ex / EXERCISES[ex]).write_text(text)
    return folder / name


@pytest.fixture(scope="module")
def course_dir(tmp_path_factory) -> Path:
    folder = course_copy(tmp_path_factory.mktemp("course"), list(EXERCISES),
                         timeout_s=dict.fromkeys(EXERCISES, TIMEOUT_S))
    toml = folder / "course.toml"
    toml.write_text(toml.read_text().replace("[defaults]", JUDGE_TABLE + "[defaults]", 1))
    assert load_course(folder).judge_limits.memory_mb == 96
    return folder


@pytest.fixture(scope="module")
def classroom(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("class")
    for name in [*HOSTILE, *CLASSMATES]:   # named so that the hostile ones are queued first
        write_submission(root, name)
    return root


def grader_command(course_dir: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "grader", "--course", str(course_dir), *args]


def view(report_file: Path) -> dict:
    """The report but for what changes between runs, and the submission's name (a Dask task names its folder
    `submission` whatever the student is called)."""
    return {k: v for k, v in stable_view(json.loads(report_file.read_text())).items() if k != "submission"}


@pytest.fixture(scope="module")
def alone(course_dir, classroom, tmp_path_factory) -> dict[str, dict]:
    """Each classmate's report, graded by itself."""
    views = {}
    for name in CLASSMATES:
        out = tmp_path_factory.mktemp(f"alone-{name}")
        done = subprocess.run(grader_command(course_dir, "grade", str(classroom / name), "--out", str(out)),
                              capture_output=True, text=True, timeout=1800)
        assert done.returncode == 0, done.stderr[-2000:]
        views[name] = view(out / "report.json")
    return views


def batch_output(course_dir, classroom, out: Path, *extra: str) -> Path:
    done = subprocess.run(grader_command(course_dir, "batch", str(classroom), "--out", str(out), "--jobs", "2", *extra),
                          capture_output=True, text=True, timeout=3600)
    assert done.returncode == 0, done.stderr[-3000:]
    return out


@pytest.fixture(scope="module")
def pool_out(course_dir, classroom, tmp_path_factory) -> Path:
    return batch_output(course_dir, classroom, tmp_path_factory.mktemp("pool"))


@pytest.fixture(scope="module")
def cluster_out(course_dir, classroom, tmp_path_factory) -> Path:
    return batch_output(course_dir, classroom, tmp_path_factory.mktemp("cluster"), "--cluster", "local")


@pytest.fixture(scope="module")
def classroom_out(course_dir, tmp_path_factory) -> Path:
    from grader.batch.run import run_batch
    from grader.classroom.github import GitHub, sync
    from test_classroom import ORG, PREFIX, TOKEN, FakeGitHub, serve

    fake = FakeGitHub()
    server = serve(fake)
    try:
        for name in [*HOSTILE, *CLASSMATES]:
            files = {f"exercises/{ex}/{EXERCISES[ex]}": text for ex, text in sources(name).items()}
            fake.commit(f"{PREFIX}-{name}", files)
        course = load_course(course_dir)
        out = tmp_path_factory.mktemp("classroom")
        graded = sync(course, GitHub(TOKEN, f"http://127.0.0.1:{server.server_address[1]}"), ORG, PREFIX, out,
                      lambda submissions, target: run_batch(course, submissions, target, 2, True, "strict", "en")).rows
        assert {g.student for g in graded} == {*HOSTILE, *CLASSMATES}
        posted = {path.split("/")[3]: body for path, body in fake.posts() if "/statuses/" in path}
        assert {repo.removeprefix(f"{PREFIX}-"): body["state"] for repo, body in posted.items()} == {
            name: "success" for name in [*HOSTILE, *CLASSMATES]}
    finally:
        server.shutdown()
    return out


ENGINES = ["pool_out", "cluster_out", "classroom_out"]


def rows(out: Path) -> dict[str, dict]:
    return {r["submission"]: r for r in csv.DictReader(io.StringIO((out / "grades.csv").read_text()))}


@pytest.mark.slow
@pytest.mark.parametrize("engine", ENGINES)
def test_every_classmate_is_graded_as_alone(engine, request, alone):
    out = request.getfixturevalue(engine)
    for name, report in alone.items():
        assert report["percent"] == 100
        assert view(out / "students" / name / "report.json") == report, f"{name} graded beside the hostile ones"
        assert rows(out)[name]["status"] == "complete"


@pytest.mark.slow
@pytest.mark.parametrize("engine", ENGINES)
def test_each_hostile_submission_gets_a_row_with_its_cause(engine, request):
    out = request.getfixturevalue(engine)
    table = rows(out)
    for name, (exercise, criterion, status, words) in EXPECTED.items():
        assert table[name]["status"] == "partial", table[name]
        report = json.loads((out / "students" / name / "report.json").read_text())
        ex = next(e for e in report["exercises"] if e["id"] == exercise)
        got = next(c for c in ex["criteria"] if c["id"] == criterion)
        assert (got["status"], words in got["message"]["en"]) == (status, True), got
        assert not any(c["status"] == "grader_error" for e in report["exercises"] for c in e["criteria"])
        others = [e for e in report["exercises"] if e["id"] != exercise]
        assert all(e["status"] == "passed" for e in others), "the hostile exercise alone loses points"


# --- the judge's reading, on hand-made observations ---------------------------------------------------------
@pytest.fixture(scope="module")
def masks_reference():
    from grader.grading.pipeline import reference_folders

    course = load_course(ROOT)
    return course, reference_folders(course, [course.exercise("masks")])["masks"]


def observations(folder: Path, exercise: str = "masks"):
    from grader.grading.pipeline import probe_order
    from grader.judge.observations import Observations, RunSummary

    course = load_course(ROOT)
    ex = course.exercise(exercise)
    return Observations(ex.id, ex.file, probe_order(ex), folder, RunSummary())


def test_causal_mask_shape_fails_a_tensor_whose_data_is_not_what_it_said(masks_reference, tmp_path):
    """The record says [T, T], as a lying `.shape` once made it say; the stored data is [N, 1, 1]."""
    from conftest import criteria_module

    masks = criteria_module("masks")
    from grader.judge.criterion import VerdictRecorder
    from grader.judge.verdicts import CriterionFailed

    _, reference = masks_reference
    folder = tmp_path / "obs"
    shutil.copytree(reference, folder)
    record = json.loads((folder / "causal.json").read_text())
    tensors = load_file(str(folder / "causal.safetensors"))
    for T in (1, 4, 7):
        record["values"][f"T{T}"].update(shape=[T, T], dtype="bool")
        tensors[f"T{T}"] = torch.ones(1000, 1, 1, dtype=torch.bool)
    (folder / "causal.json").write_text(json.dumps(record))
    save_file(tensors, str(folder / "causal.safetensors"))
    with pytest.raises(CriterionFailed, match=r"causal_mask\(1\) has shape \[1000, 1, 1\]; expected \[1, 1\]"):
        masks.test_causal_mask_shape(observations(folder), VerdictRecorder())
    shutil.copyfile(reference / "causal.safetensors", folder / "causal.safetensors")   # positive control
    recorder = VerdictRecorder()
    masks.test_causal_mask_shape(observations(folder), recorder)
    assert recorder.met


@pytest.mark.parametrize("planted, words", [
    ({"cases": list(range(5000))}, "a list of 5000 entries at `values.cases` (at most 4096)"),
    ({"cases": {f"k{i}": i for i in range(5000)}}, "a dict of 5000 keys at `values.cases` (at most 4096)"),
    ({"cases": json.loads("[" * 20 + "]" * 20)}, "nested more than 16 deep at `values.cases"),
])
def test_a_record_larger_than_the_judge_reads_fails_its_probe_with_the_cause(masks_reference, tmp_path, planted,
                                                                                words):
    from grader.judge.verdicts import CriterionFailed

    _, reference = masks_reference
    folder = tmp_path / "obs"
    shutil.copytree(reference, folder)
    record = json.loads((folder / "softmax_dim.json").read_text())
    (folder / "softmax_dim.json").write_text(json.dumps({**record, "values": {**record["values"], **planted}}))
    with pytest.raises(CriterionFailed) as failed:
        observations(folder).probe("softmax_dim")
    assert words in failed.value.message.texts()["en"]
    assert observations(folder).probe("causal").value("T1")   # the other probes are read as before


def test_a_record_nested_past_the_parser_is_unreadable_not_a_crash(masks_reference, tmp_path):
    from grader.judge.verdicts import Crashed

    _, reference = masks_reference
    folder = tmp_path / "obs"
    shutil.copytree(reference, folder)
    (folder / "causal.json").write_text('{"status": "ok", "values": ' + "[" * 200_000 + "]" * 200_000 + "}")
    with pytest.raises(Crashed):
        observations(folder).probe("causal")


def test_a_tensor_past_the_caps_is_refused_from_its_header(masks_reference, tmp_path):
    from grader.judge.observations import MAX_TENSOR_DIMS
    from grader.judge.verdicts import CriterionFailed

    _, reference = masks_reference
    folder = tmp_path / "obs"
    shutil.copytree(reference, folder)
    tensors = load_file(str(folder / "causal.safetensors"))
    tensors["T7"] = torch.ones([1] * (MAX_TENSOR_DIMS + 1), dtype=torch.bool)
    save_file(tensors, str(folder / "causal.safetensors"))
    with pytest.raises(CriterionFailed, match="at most 8 axes"):
        observations(folder).probe("causal").tensor("T1")


def test_the_forbidden_call_record_is_merged_in_one_pass(tmp_path):
    """Each place once, in the order first recorded, across the import and every probe: 60,000 places, more per
    probe than any other list may hold (only their count is shown)."""
    from grader.grading.pipeline import probe_order

    course = load_course(ROOT)
    probes = ["_import", *probe_order(course.exercise("layer_norm"))]
    recorded = []
    for i, name in enumerate(probes):
        calls = [{"call": "aten::native_layer_norm", "where": f"norm.py:{i * 10_000 + j}"} for j in range(5000)]
        calls += calls[:100] + [{"call": "aten::native_layer_norm", "where": None}]   # repeats, a place unknown
        recorded += calls
        (tmp_path / f"{name}.json").write_text(json.dumps({"status": "ok", "values": {}, "forbidden_calls": calls}))
    once = dict.fromkeys((c["call"], c["where"]) for c in recorded)
    got = observations(tmp_path, "layer_norm").forbidden_calls()
    assert len(got) == 5000 * len(probes) + 1
    assert got == [{"call": call, "where": where} for call, where in once]


# --- the judging server and its children -----------------------------------------------------------------
@pytest.mark.skipif(not hasattr(signal, "setitimer"), reason="the judge's CPU timer is POSIX's")
def test_the_criterion_timers_signal_raises_only_while_a_criterion_runs():
    """Python handles a signal at its next check, so the timer's signal can be handled just after the criterion it
    timed has ended, in the judge's own code: there it is ignored. While a criterion runs it is the limit (the
    positive control)."""
    from grader.judge.limits import JudgeLimits, LimitExceeded, _criterion_cpu_spent, criterion_timer

    before = signal.signal(signal.SIGPROF, _criterion_cpu_spent)
    try:
        signal.raise_signal(signal.SIGPROF)                 # after a criterion: nothing raised
        with pytest.raises(LimitExceeded):
            with criterion_timer(JudgeLimits(criterion_cpu_s=10.0)):
                signal.raise_signal(signal.SIGPROF)         # during one: its limit
        signal.raise_signal(signal.SIGPROF)                 # and once that criterion is over, nothing again
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
        signal.signal(signal.SIGPROF, before)


@pytest.mark.parametrize("budget_s, status", [(0.001, "error"), (10.0, "failed")])
def test_a_criterion_past_its_cpu_budget_is_that_submissions_error_and_the_rest_is_judged(tmp_path, budget_s,
                                                                                         status):
    """The reference's observations of layer_norm with 5,000 forbidden places planted in each record: merging the
    60,000 takes tens of milliseconds. Given a millisecond of CPU per criterion, `no_forbidden_api` goes past it
    and is the submission's error, the limit in words, and the criteria after it are judged. With the default budget
    it fails for the calls, as it should, and every other criterion passes (the positive control)."""
    from grader.grading.pipeline import probe_order, reference_folders
    from grader.judge.client import JudgeClient
    from grader.judge.limits import JudgeLimits

    course = load_course(ROOT)
    ex = course.exercise("layer_norm")
    reference = reference_folders(course, [ex])[ex.id]
    folder = tmp_path / "obs"
    shutil.copytree(reference, folder)
    for i, name in enumerate(["_import", *probe_order(ex)]):
        record = json.loads((folder / f"{name}.json").read_text())
        record["forbidden_calls"] = [{"call": "aten::native_layer_norm", "where": f"norm.py:{i * 10_000 + j}"}
                                     for j in range(5000)]
        (folder / f"{name}.json").write_text(json.dumps(record))
    request = [{"id": ex.id, "file": ex.file, "probes": probe_order(ex), "obs": str(folder), "run": {},
                "staged": None, "reference": str(reference)}]
    judge = JudgeClient([ex.id], JudgeLimits(criterion_cpu_s=budget_s))
    try:
        outcomes = {o.meta.id: o for o in judge.judge(request)[ex.id]}
    finally:
        judge.close()
    forbidden = outcomes.pop("no_forbidden_api")
    assert forbidden.status == status, forbidden
    said = forbidden.message["en"]
    limit = f"limit of {budget_s:g} s of CPU time for one criterion"
    assert limit in said if status == "error" else "(and 59999 more forbidden calls)" in said
    # the others: each has its own outcome (a millisecond is less than some of them take even on a correct
    # submission's record: those say so too), none is lost to a killed process
    assert all(o.status == "passed" or (status == "error" and o.status == "error" and limit in o.message["en"])
               for o in outcomes.values())


def fake_client(monkeypatch, children: list):
    """A JudgeClient for `heads` whose children are `children`: each (exit, cpu_s, lines) in turn."""
    from grader.judge import channel
    from grader.judge.client import JudgeClient, _Hello, _Request
    from grader.judge.limits import JudgeLimits
    from grader.judge.session import criteria_of

    metas = criteria_of("heads")
    client = JudgeClient(["heads"], JudgeLimits(cpu_s=5))
    hello = _Hello(criteria={"heads": metas})
    hello.ended.set()
    monkeypatch.setattr(client, "_ready", lambda: hello)
    asked = []

    def child(exercises, known):
        asked.append([k["criterion"] for k in known])
        exit_code, cpu_s, lines = children[len(asked) - 1]
        return _Request(exit=exit_code, cpu_s=cpu_s), lines

    monkeypatch.setattr(client, "_child", child)

    def passed(meta):
        return {channel.OUTCOME: {"exercise": "heads", "criterion": meta.id, "status": "passed",
                                  "message": {"en": "fine", "zh": "好"}, "evidence": {}, "blocked_by": None}}

    return client, metas, asked, passed


def test_a_child_killed_on_a_criterion_costs_that_criterion_and_a_fresh_child_judges_the_rest(monkeypatch):
    import signal

    from grader.judge import channel

    children: list = []
    client, metas, asked, passed = fake_client(monkeypatch, children)
    first, second, *rest = metas
    children += [(-signal.SIGKILL, 5.0, [{channel.BEGIN: ["heads", first.id]}, passed(first),
                                         {channel.BEGIN: ["heads", second.id]}]),
                 (0, 0.1, [x for m in rest for x in ({channel.BEGIN: ["heads", m.id]}, passed(m))]
                  + [{channel.DONE: True}])]
    got = client.judge([{"id": "heads"}])["heads"]
    assert [o.status for o in got] == ["passed", "error", *["passed"] * len(rest)]
    assert "limit of 120 s of CPU time for one submission" not in got[1].message["en"]
    assert "limit of 5 s of CPU time for one submission" in got[1].message["en"]
    assert asked == [[], [first.id, second.id]], "the second child is told what is judged already"


def test_a_judging_killed_again_and_again_stops_and_says_so(monkeypatch):
    import signal

    from grader.judge import channel
    from grader.judge.client import MAX_CHILDREN

    children: list = []
    client, metas, asked, passed = fake_client(monkeypatch, children)
    children += [(-signal.SIGSEGV, 0.1, [{channel.BEGIN: ["heads", metas[i].id]}]) for i in range(MAX_CHILDREN)]
    got = client.judge([{"id": "heads"}])["heads"]
    assert [o.status for o in got[:MAX_CHILDREN]] == ["error"] * MAX_CHILDREN
    assert all("SIGSEGV" in o.message["en"] for o in got[:MAX_CHILDREN])
    assert all(o.status == "error" and f"stopped {MAX_CHILDREN} times" in o.message["en"]
               for o in got[MAX_CHILDREN:])
    assert len(asked) == MAX_CHILDREN


def test_a_judge_that_cannot_run_makes_every_criterion_the_graders_error(tmp_path):
    """A judging server that died (or would not start) costs no point: every criterion is the grader's error, with
    the reason, and the report is still written."""
    from grader.grading.pipeline import judged, probe_submission
    from grader.judge.client import JudgeUnavailable
    from grader.sandbox.levels import choose, strict_missing

    if strict_missing():
        pytest.skip("the strict sandbox needs root and namespaces")

    class Gone:
        def judge(self, request):
            raise JudgeUnavailable("the judging server ended (exit -9): no output")

    course = load_course(course_copy(tmp_path / "course", ["heads"]))
    (tmp_path / "student" / "heads").mkdir(parents=True)
    shutil.copyfile(ROOT / "solutions" / "heads" / "heads.py", tmp_path / "student" / "heads" / "heads.py")
    report = judged(probe_submission(course, tmp_path / "student", ["heads"], choose("strict")), Gone()).to_dict()
    (heads,) = report["exercises"]
    assert heads["status"] == "grader_error" and {c["status"] for c in heads["criteria"]} == {"grader_error"}
    assert all("exit -9" in c["message"]["en"] for c in heads["criteria"])


def test_a_criterion_blocked_in_a_served_judging_carries_no_evidence_of_an_earlier_one(tmp_path):
    """The server judges the references before it forks (its warm-up); a criterion that is then blocked in a
    submission's judging says only that it is blocked, with none of the evidence the warm-up's recorder held. The
    positive control: on the references, the same criterion passes with that evidence."""
    from grader.grading.pipeline import probe_order, reference_folders
    from grader.judge.client import JudgeClient

    course = load_course(ROOT)
    ex = course.exercise("decoder_block")
    reference = reference_folders(course, [ex])[ex.id]
    folder = tmp_path / "obs"
    shutil.copytree(reference, folder)
    record = json.loads((folder / "parameter_count.json").read_text())
    record["values"]["small"] = [n - 24 for n in record["values"]["small"]]   # the biases counted twice less
    (folder / "parameter_count.json").write_text(json.dumps(record))

    def request(obs: Path) -> list[dict]:
        return [{"id": ex.id, "file": ex.file, "probes": probe_order(ex), "obs": str(obs), "run": {},
                 "staged": None, "reference": str(reference)}]

    judge = JudgeClient([ex.id], course.judge_limits)
    try:
        on_reference = {o.meta.id: o for o in judge.judge(request(reference))[ex.id]}
        outcomes = {o.meta.id: o for o in judge.judge(request(folder))[ex.id]}
    finally:
        judge.close()
    assert on_reference["parameter_count_large"].status == "passed"
    assert on_reference["parameter_count_large"].evidence.get("counts")
    assert outcomes["parameter_count_small"].status == "failed"
    blocked = outcomes["parameter_count_large"]
    assert blocked.status == "blocked" and "parameter_count_small" in blocked.message["en"], blocked
    assert blocked.evidence == {}


def test_the_memory_in_use_is_read_afresh_and_per_process():
    """The judge checks the memory in use before each tensor file from one descriptor per process: what was
    allocated since counts, and a forked child reads its own, as /proc/self/status says."""
    import os

    from grader.judge import limits

    def status_kb() -> int:
        with open("/proc/self/status", encoding="ascii") as fh:
            return next(int(line.split()[1]) for line in fh if line.startswith("VmData:"))

    before = limits._data_in_use()
    held = bytearray(64 << 20)
    grown = limits._data_in_use()
    assert grown - before >= 60 << 20 and abs(grown - status_kb() * 1024) < 1 << 20
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:   # the child's own figure, not the parent's, once it allocates
        more = bytearray(32 << 20)
        os.write(write, f"{limits._data_in_use()} {status_kb() * 1024} {len(more)}".encode())
        os._exit(0)
    os.waitpid(pid, 0)
    child, child_status, _ = map(int, os.read(read, 200).split())
    assert child - grown >= 30 << 20 and abs(child - child_status) < 1 << 20
    del held
