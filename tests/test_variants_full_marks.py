"""Every correct variant in tests/variants/ scores full marks, graded as `grader grade` grades a class: the ways
students really restructure code (a feed-forward as nn.Sequential, renamed inner layers, attention with helper
methods of its own, their own LayerNorm class) cost nothing, and no probe of the grader's fails on them."""

import pytest
from grader.course import load_course
from grader.sandbox.levels import choose, strict_missing
from grader.review.selftest import discover, grade_cases

from conftest import ROOT

# end to end: every test here grades in a sandbox (`pytest -m "not slow"` leaves them out)
pytestmark = pytest.mark.slow

COURSE = load_course(ROOT)


def test_every_variant_scores_full_marks():
    variants = [c for c in discover(COURSE, ROOT / "tests") if c.kind == "variant"]
    assert len(variants) > 20
    grade_cases(COURSE, variants, choose("basic" if strict_missing() else "strict"))
    unjudged = [f"{c.label}: {c.failure}" for c in variants if c.failure]
    assert not unjudged, "\n".join(unjudged)
    lost = [f"{c.label}: {criterion} {status}: {c.messages[criterion]}"
            for c in variants for criterion, status in c.got_fails.items()]
    assert not lost, "\n".join(lost)


def test_the_restructured_transformer_variants_are_in_the_catalog():
    names = {c.name for c in discover(COURSE, ROOT / "tests") if c.kind == "variant" and c.exercise == "transformer_lm"}
    assert {"feedforward_sequential", "renamed_inner_layers", "attention_helper_methods",
            "own_layer_norm_mask_buffer"} <= names
