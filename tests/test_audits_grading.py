"""Exercise `audits` graded end to end: the reference audits earn full marks against the course's catalog, audits that
never raise or always raise earn nothing and are no grader error, a crash is the student's, points follow the share of
broken models caught, a hanging audit costs that audit alone, and a failure of the model process is the grader's.
The partial points a criterion earns are carried by the judge, the report, a re-judging and the gradebook's rows."""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from audits_course import audits_course, model_process, submission
from conftest import ROOT

from grader.course import load_course
from grader.judge.channel import outcome_from_json, outcome_to_json
from grader.judge.criterion import CriterionMeta, Outcome
from grader.judge.plugin import partial_credit
from grader.models import handles
from grader.models.host import ModelLimits
from grader.report.build import exercise_result, stored_report
from grader.worker.protocol import Status

AUDITS = ("causality", "targets", "registration", "gradients", "resume")
NEVER_RAISES = "\n".join(f"def audit_{a}(*args):\n    return None\n" for a in AUDITS)
ALWAYS_RAISES = "\n".join(f"def audit_{a}(*args):\n    raise AssertionError('MARKER-7')\n" for a in AUDITS)
CRASHES = "\n".join(f"def audit_{a}(*args):\n    return args[0].no_such_call()\n" for a in AUDITS)


def grade(base: Path, course: Path, source: str | Path, *extra: str, codes: tuple[int, ...] = (0, 1)) -> dict:
    """The report of `source` graded as audits.py; `codes`: the exit statuses expected (3: the grading is
    incomplete, the grader's fault)."""
    sub = submission(base / "sub", source)
    out = base / "out"
    done = subprocess.run([sys.executable, "-m", "grader", "--course", str(course), "grade", str(sub), "--out",
                           str(out), "--exercise", "audits", *extra], capture_output=True, text=True, timeout=900,
                          cwd=ROOT)
    assert done.returncode in codes, done.stderr
    return json.loads((out / "report.json").read_text())


@pytest.fixture(scope="module")
def course(tmp_path_factory) -> Path:
    return audits_course(tmp_path_factory.mktemp("audits-course") / "course")


@pytest.fixture(scope="module")
def standin_course(tmp_path_factory) -> Path:
    return audits_course(tmp_path_factory.mktemp("standin-course") / "course", standin=True)


def criteria(report: dict) -> dict[str, dict]:
    (exercise,) = report["exercises"]
    return {c["id"]: c for c in exercise["criteria"]}


pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def reference_report(course, tmp_path_factory) -> dict:
    return grade(tmp_path_factory.mktemp("reference"), course, course / "solutions" / "audits" / "audits.py")


def test_the_reference_audits_score_full_marks(reference_report):
    report = reference_report
    (exercise,) = report["exercises"]
    assert exercise["score"] == exercise["max_score"] == 20, [(c["id"], c["message"]["en"])
                                                              for c in exercise["criteria"]]
    for audit in AUDITS:
        evidence = criteria(report)[f"{audit}_catches_broken"]["evidence"]
        assert evidence["caught"] == evidence["total"] > 0 and evidence["missed"] == []
    said = criteria(report)["causality_catches_broken"]["message"]["en"]
    assert "mask_removed" in said and "rejected" in said   # seed 004's fault experiment, named
    assert "labels_not_shifted" in criteria(report)["targets_catches_broken"]["message"]["en"]


@pytest.mark.parametrize("source, said", [(NEVER_RAISES, "rejected none"), (ALWAYS_RAISES, "raised AssertionError")])
def test_never_raising_and_always_raising_both_score_zero(course, tmp_path, source, said):
    report = grade(tmp_path, course, source)
    (exercise,) = report["exercises"]
    assert exercise["score"] == 0 and exercise["status"] == Status.FAILED
    found = criteria(report)
    for audit in AUDITS:
        accepts, catches = found[f"{audit}_accepts_correct"], found[f"{audit}_catches_broken"]
        assert accepts["status"] == Status.FAILED and said in accepts["message"]["en"], accepts["message"]["en"]
        assert catches["status"] == Status.BLOCKED and catches["points"] == 0
    assert "MARKER" not in json.dumps(exercise["criteria"])   # the audit's own words are never echoed


def test_a_crash_is_the_students_and_named_by_its_type(course, tmp_path):
    report = grade(tmp_path, course, CRASHES)
    (exercise,) = report["exercises"]
    assert exercise["score"] == 0
    for audit in AUDITS:
        accepts = criteria(report)[f"{audit}_accepts_correct"]
        assert accepts["status"] == Status.FAILED, accepts
        assert "it crashed with AttributeError on a correct model" in accepts["message"]["en"]


# later definitions replace the reference's: a causality audit with a tolerance far too loose (a small leak passes),
# and a targets audit that hangs on its first model (the per-call limit stops it, its other models are skipped)
LENIENT_AND_HANGING = """

def audit_causality(model):
    model.eval()
    tokens = torch.zeros(1, 8, dtype=torch.long)
    changed = tokens.clone()
    changed[0, 7] = 3
    gap = (model(tokens)[:, :7] - model(changed)[:, :7]).abs().max().item()
    assert gap < 1e-4, f"a leak of {gap}"   # a tolerance 100 times the contract's: the small leak passes


def audit_targets(make_batch):
    while True:
        pass
"""


def test_points_follow_the_share_caught_and_a_hanging_audit_costs_itself_alone(standin_course, tmp_path):
    reference = (ROOT / "solutions" / "audits" / "variants" / "single_token_trials" / "audits.py").read_text()
    report = grade(tmp_path, standin_course, reference + LENIENT_AND_HANGING)
    (exercise,) = report["exercises"]
    found = criteria(report)
    causality = found["causality_catches_broken"]
    # the stand-in serves two broken models to audit_causality; the loose tolerance rejects the mask removed only
    assert causality["status"] == Status.FAILED and causality["points"] == 1.5 and causality["max_points"] == 3
    assert causality["evidence"]["caught"] == 1 and causality["evidence"]["total"] == 2
    assert causality["evidence"]["missed"] == ["small_leak"]
    assert "a leak of 1e-4" in causality["message"]["en"] and "it returned None" in causality["message"]["en"]
    assert "mask_removed` (the causal mask removed): rejected" in causality["message"]["en"]
    targets = found["targets_accepts_correct"]
    assert targets["status"] == Status.FAILED and "ran past 30 s" in targets["message"]["en"]
    for audit in ("registration", "gradients", "resume"):
        assert found[f"{audit}_catches_broken"]["status"] == Status.PASSED
    assert exercise["status"] == "partial" and exercise["score"] == 20 - 4 - 1.5
    # a re-judging from the observations kept gives the same points
    again = subprocess.run([sys.executable, "-m", "grader", "--course", str(standin_course), "grade",
                            str(tmp_path / "sub"), "--out", str(tmp_path / "out"), "--exercise", "audits",
                            "--rejudge"], capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert again.returncode in (0, 1), again.stderr
    rejudged = json.loads((tmp_path / "out" / "report.json").read_text())
    assert criteria(rejudged)["causality_catches_broken"]["points"] == 1.5
    assert rejudged["exercises"][0]["score"] == exercise["score"]


def test_a_model_process_that_fails_is_the_graders_fault(standin_course, tmp_path):
    broken = tmp_path / "course"
    shutil.copytree(standin_course, broken, symlinks=True)
    served = broken / "solutions" / "audits" / "served.py"
    served.write_text(served.read_text() + "\n\ndef build(course_root, entry, seed):\n    raise OSError('disk')\n")
    report = grade(tmp_path, broken, ROOT / "solutions" / "audits" / "variants" / "single_token_trials" / "audits.py",
                   codes=(3,))
    (exercise,) = report["exercises"]
    assert exercise["status"] == Status.GRADER_ERROR and exercise["score"] == 0
    assert all(c["status"] in (Status.GRADER_ERROR, Status.BLOCKED) for c in exercise["criteria"])


# --- partial points, without grading -------------------------------------------------------------------------

META = CriterionMeta("causality_catches_broken", "causality", {"en": "t", "zh": "t"}, {"en": "h", "zh": "h"})


@pytest.mark.parametrize("status, fraction, share", [
    (Status.FAILED, 0.5, 0.5), (Status.FAILED, None, None), (Status.FAILED, math.nan, None),
    (Status.FAILED, 7.0, 1.0), (Status.FAILED, -1.0, 0.0), (Status.FAILED, "x", None),
    (Status.ERROR, 0.5, None), (Status.PASSED, 0.5, None), (Status.GRADER_ERROR, 0.9, None)])
def test_only_a_failed_criterion_keeps_a_share_between_zero_and_one(status, fraction, share):
    assert partial_credit(status, fraction) == share


def test_a_share_crosses_the_judges_channel_and_makes_the_points():
    outcome = Outcome(META, Status.FAILED, {"en": "m", "zh": "m"}, {}, None, 2 / 7)
    again = outcome_from_json(json.loads(json.dumps(outcome_to_json("audits", outcome))), META)
    assert again.partial == pytest.approx(2 / 7)
    ex = load_course(ROOT).exercise("audits")
    result = exercise_result(ex, [again], {})
    (criterion,) = result.criteria
    assert criterion.points == round(3 * 2 / 7, 2) and criterion.status == Status.FAILED
    assert result.status == "partial" and result.score == criterion.points
    # an old judge's outcome (no share) earns nothing for a failure, as before
    old = outcome_to_json("audits", outcome)
    del old["partial"]
    assert exercise_result(ex, [outcome_from_json(old, META)], {}).criteria[0].points == 0


def test_a_share_reaches_the_gradebooks_rows_and_the_grade(tmp_path):
    from grader.batch.grades import grade_of
    from grader.batch.rows import report_rows

    course = load_course(ROOT)
    ex = course.exercise("audits")
    outcome = Outcome(META, Status.FAILED, {"en": "m", "zh": "m"}, {}, None, 0.5)
    result = exercise_result(ex, [outcome], {})
    report = {"score": result.score, "max_score": result.max_score, "percent": 0.0, "status": "partial",
              "exercises": [{"id": ex.id, "status": result.status, "score": result.score,
                             "criteria": [{"id": c.id, "kind": c.kind, "status": c.status, "points": c.points,
                                           "max_points": c.max_points, "message": c.message}
                                          for c in result.criteria]}]}
    _, rows = report_rows(report, tmp_path, "2026-12-07T18:00:00Z")
    assert [(r["criterion"], r["status"], r["points"]) for r in rows] == [
        ("causality_catches_broken", Status.FAILED, 1.5)]
    assert grade_of(course, rows).exercise_points["audits"] == 1.5


def test_a_report_of_schema_3_2_still_reads(reference_report):
    older = {**reference_report, "schema_version": "3.2"}
    assert stored_report(older).schema_version == "3.3"


SLOW_SERVED = '''
from dataclasses import dataclass
import time
import torch


@dataclass(frozen=True)
class Entry:
    audit: str
    key: str


def catalog(root):
    return [Entry("causality", "slow")]


class Slow(torch.nn.Module):
    def forward(self, tokens, targets=None):
        time.sleep(float(@SLEEP@))
        return {"logits": torch.zeros(*tokens.shape, 3), "loss": None}


def build(root, entry, seed):
    return Slow()
'''


@pytest.mark.parametrize("sleep, limits, said", [
    (3.0, ModelLimits(call_limit_s=0.5), "a call of the grader's model took longer than 0.5 s"),
    (0.0, ModelLimits(memory_mb=1), "the grader's model process used more than 1 MB")])
def test_the_model_processs_limits_are_its_own_and_said_as_the_graders(tmp_path, sleep, limits, said):
    served = tmp_path / "solutions" / "audits" / "served.py"
    served.parent.mkdir(parents=True)
    served.write_text(SLOW_SERVED.replace("@SLEEP@", str(sleep)))
    with model_process(served, tmp_path, limits) as (host, connection):
        with pytest.raises(handles.ModelError, match="did not answer: this is the grader's fault"):
            connection.open("causality", 0)(torch.zeros(1, 2, dtype=torch.long))
        assert host.fault() == f"the grader's model process failed: {said}"
    # positive control: within its limits the same model answers, and nothing is said
    served.write_text(SLOW_SERVED.replace("@SLEEP@", "0.0"))
    with model_process(served, tmp_path, ModelLimits()) as (host, connection):
        assert connection.open("causality", 0)(torch.zeros(1, 2, dtype=torch.long)).shape == (1, 2, 3)
        assert host.fault() == ""


def test_the_plain_route_starts_the_model_process_as_a_plain_child(standin_course, tmp_path):
    """`grader check` on a student's machine (the plain route, forced here): the child that runs the probes starts the
    model process itself, and the visible criteria are judged as in the sandbox."""
    course = tmp_path / "course"
    shutil.copytree(standin_course, course, symlinks=True)
    toml = course / "course.toml"
    toml.write_text(re.sub(r"(?m)^visible = .*$", 'visible = ["kind:causality"]', toml.read_text()))
    sub = submission(tmp_path / "sub", ROOT / "solutions" / "audits" / "variants" / "single_token_trials" / "audits.py")
    done = subprocess.run([sys.executable, "-m", "grader", "--course", str(course), "check", "--submission", str(sub),
                           "audits"], capture_output=True, text=True, timeout=900, cwd=ROOT,
                          env={**os.environ, "GRADER_CHECK_PLAIN": "1"})
    assert "visible criteria: 2 / 2 passed" in done.stdout, done.stdout + done.stderr
    lenient = (ROOT / "solutions" / "audits" / "variants" / "single_token_trials" / "audits.py").read_text() \
        + LENIENT_AND_HANGING.split("def audit_targets")[0]
    submission(tmp_path / "sub", lenient)   # positive control: a small leak missed is said there too
    done = subprocess.run([sys.executable, "-m", "grader", "--course", str(course), "check", "--submission", str(sub),
                           "audits"], capture_output=True, text=True, timeout=900, cwd=ROOT,
                          env={**os.environ, "GRADER_CHECK_PLAIN": "1"})
    assert "visible criteria: 1 / 2 passed" in done.stdout, done.stdout + done.stderr
