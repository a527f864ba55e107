"""A `fit_fixed_batch` that never trains but rewires the forward of the model it was handed gains nothing: it scores
exactly what the same code scores without the rewiring. The overfit criteria load the parameters that model holds
after the call into a fresh course model of the grader's own, in the judge, and measure loss and argmax there."""

import tempfile
from pathlib import Path

import pytest

from grader.course import load_course
from grader.grading.pipeline import grade
from grader.sandbox.levels import choose, strict_missing
from grader.review.selftest import mutant_text

from conftest import ROOT

COURSE = load_course(ROOT)
FORGERY = ROOT / "solutions" / "training" / "mutants" / "fit_rewires_forward"
REWIRING = "    model.forward = answer\n"


def criteria_of(source: str) -> dict[str, tuple[str, float]]:
    """criterion id -> (status, points) of the training exercise graded with `source` as train.py."""
    with tempfile.TemporaryDirectory() as tmp:
        target = Path(tmp) / "training" / "train.py"
        target.parent.mkdir()
        target.write_text(source, encoding="utf-8")
        report = grade(COURSE, Path(tmp), ["training"], choose("basic" if strict_missing() else "strict"))
    (exercise,) = report.exercises
    return {c.id: (c.status, c.points) for c in exercise.criteria}


@pytest.mark.slow
def test_a_rewired_forward_scores_what_the_same_code_scores_without_it():
    forged = mutant_text(COURSE, "training", FORGERY)
    assert forged.count(REWIRING) == 1
    with_forgery, without = criteria_of(forged), criteria_of(forged.replace(REWIRING, ""))
    assert with_forgery == without
    for overfit in ("overfit_fixed_batch", "contradictory_labels"):
        assert with_forgery[overfit] == ("failed", 0.0), with_forgery[overfit]
