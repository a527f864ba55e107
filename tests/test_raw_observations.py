"""Probes record raw results; every fact derived from them is computed in the judge.

A probe runs in the student's process, so whatever it computes after the student's code ran can be forged by
that code. These tests read the observations the probes wrote for the reference solutions (the judge's
reference cache, filled on first use) and check that the derived facts moved to the criteria are gone from
them, and that a criterion judges the recorded tensors, not a stale summary planted next to them.
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest
from safetensors.torch import load_file, save_file

from grader.course import load_course
from grader.grading.pipeline import probe_order, reference_folders
from grader.judge.criterion import VerdictRecorder
from grader.judge.observations import Observations
from grader.judge.verdicts import CriterionFailed
from conftest import criteria_module

attention = criteria_module("attention")
decoder_block = criteria_module("decoder_block")
layer_norm = criteria_module("layer_norm")
training = criteria_module("training")
transformer_lm = criteria_module("transformer_lm")

ROOT = Path(__file__).resolve().parent.parent

# Per exercise and probe: the keys a probe once computed in the worker and no longer records.
MOVED_TO_THE_JUDGE = {
    "attention": {"causality": ["leaks"], "gradients": ["q_grad", "k_grad", "v_grad"]},
    "decoder_block": {"causality": ["leaks"], "gradients": ["grads", "input_grad_finite", "finite", "norm"]},
    "embedding": {"gradient": ["has_grad_pad0", "has_grad_pad9", "has_grad_nopad"]},
    "masks": {"gradients": ["has_grad"]},
    "layer_norm": {
        "reference": ["input_change"],
        "prenorm_inplace": ["input_change"],
        "gradients": [f"loss_{key}_{sign}" for key in ("x", "w", "b") for sign in ("plus", "minus")],
        "residual_gradient": ["grads", "input_grad", "finite", "norm"],
    },
    "rope": {"gradients": ["loss_plus", "loss_minus"]},
    "transformer_lm": {
        "causality": ["leaks", "repeat_change", "logits_shape"],
        "gradients": ["grads", "token_rows", "position_rows", "finite", "norm"],
    },
    "training": {
        "train_step_update": ["changed"],
        "clipping": ["unclipped_norm", "norms_at_step"],
        "gradient_reset": ["fresh_norm", "step_norm", "difference_norm"],
        "nonfinite_loss": ["changed"],
        "overfit_fixed_batch": ["final_loss", "per_position_loss", "prediction"],
        "contradictory_labels": ["final_loss", "per_position_loss", "prediction"],
    },
    "checkpoint": {"atomic_save": ["file_unchanged"]},
}


@pytest.fixture(scope="module")
def course():
    return load_course(ROOT)


@pytest.fixture(scope="module")
def reference_dirs(course):
    """The observations of the reference solutions, as a grading of the solutions writes them."""
    return reference_folders(course, [course.exercise(e) for e in MOVED_TO_THE_JUDGE])


def keys_anywhere(value) -> set[str]:
    """Every dict key at any depth of a JSON value."""
    if isinstance(value, dict):
        return set(value).union(*(keys_anywhere(v) for v in value.values()))
    if isinstance(value, list):
        return set().union(*(keys_anywhere(v) for v in value))
    return set()


@pytest.mark.parametrize("exercise", sorted(MOVED_TO_THE_JUDGE))
def test_probes_record_no_derived_facts(reference_dirs, exercise):
    for probe, moved in MOVED_TO_THE_JUDGE[exercise].items():
        recorded = json.loads((reference_dirs[exercise] / f"{probe}.json").read_text())
        assert recorded["status"] == "ok", recorded
        left = keys_anywhere(recorded["values"]) & set(moved)
        assert not left, f"{exercise}/{probe} still records {sorted(left)}"


# --- forged observations: tensors that show the fault next to a stale summary that hides it ----------

def observations(course, exercise: str, directory: Path) -> Observations:
    ex = course.exercise(exercise)
    return Observations(exercise, ex.file, probe_order(ex), directory, run=None)


def forged_copy(reference_dirs, tmp_path, exercise: str, probe: str, stale: dict, edit) -> Path:
    """A copy of the reference observations whose `probe` tensors pass through `edit` and whose values carry `stale`."""
    directory = tmp_path / exercise
    shutil.copytree(reference_dirs[exercise], directory)
    tensors = load_file(directory / f"{probe}.safetensors")
    edit(tensors)
    save_file(tensors, directory / f"{probe}.safetensors")
    recorded = json.loads((directory / f"{probe}.json").read_text())
    recorded["values"].update(stale)
    (directory / f"{probe}.json").write_text(json.dumps(recorded))
    return directory


def judge(criterion, obs, ref):
    """Run one criterion function; returns the failure message in English, or None when it passed."""
    arguments = {"obs": obs, "ref": ref, "verdict": VerdictRecorder()}
    wanted = criterion.__code__.co_varnames[: criterion.__code__.co_argcount]
    try:
        criterion(**{name: arguments[name] for name in wanted})
    except CriterionFailed as failure:
        return failure.message.render("en")
    return None


def leak_into_position_zero(axis):
    def edit(tensors):
        out = tensors["changed_after_3"]
        out.narrow(axis, 0, 1).add_(0.25)
    return edit


CAUSALITY = [
    (attention, "attention", -2, {"leaks": [0.0] * 5}),
    (decoder_block, "decoder_block", 1, {"leaks": [0.0] * 7}),
    (transformer_lm, "transformer_lm", 1, {"leaks": [0.0] * 9, "repeat_change": 0.0}),
]


@pytest.mark.parametrize("module, exercise, axis, stale", CAUSALITY, ids=[c[1] for c in CAUSALITY])
def test_causality_is_measured_from_the_recorded_outputs(course, reference_dirs, tmp_path,
                                                         module, exercise, axis, stale):
    ref = observations(course, exercise, reference_dirs[exercise])
    assert judge(module.test_causality, ref, ref) is None
    forged = forged_copy(reference_dirs, tmp_path, exercise, "causality", stale, leak_into_position_zero(axis))
    message = judge(module.test_causality, observations(course, exercise, forged), ref)
    assert message is not None and "after position 3" in message and "0.25" in message, message


def test_a_nan_leak_fails_causality(course, reference_dirs, tmp_path):
    ref = observations(course, "decoder_block", reference_dirs["decoder_block"])

    def edit(tensors):
        tensors["changed_after_2"][0, 1, 0] = math.nan

    forged = forged_copy(reference_dirs, tmp_path, "decoder_block", "causality", {"leaks": [0.0] * 7}, edit)
    message = judge(decoder_block.test_causality, observations(course, "decoder_block", forged), ref)
    assert message is not None and "became NaN" in message, message


def test_dropout_in_eval_is_measured_from_the_repeated_logits(course, reference_dirs, tmp_path):
    ref = observations(course, "transformer_lm", reference_dirs["transformer_lm"])

    def edit(tensors):
        tensors["repeat"][1, 7, 2] += 1e-3

    forged = forged_copy(reference_dirs, tmp_path, "transformer_lm", "causality", {"repeat_change": 0.0}, edit)
    message = judge(transformer_lm.test_causality, observations(course, "transformer_lm", forged), ref)
    assert message is not None and "already differ by 0.001" in message, message


def test_a_non_finite_input_gradient_fails_despite_a_stale_flag(course, reference_dirs, tmp_path):
    ref = observations(course, "decoder_block", reference_dirs["decoder_block"])
    assert judge(decoder_block.test_gradients_reach_projections, ref, ref) is None

    def edit(tensors):
        tensors["input_grad"][0, 0, 0] = math.inf

    forged = forged_copy(reference_dirs, tmp_path, "decoder_block", "gradients", {"input_grad_finite": True}, edit)
    message = judge(decoder_block.test_gradients_reach_projections, observations(course, "decoder_block", forged), ref)
    assert message is not None and "not finite" in message, message


def test_an_input_modified_in_place_fails_despite_a_stale_zero_change(course, reference_dirs, tmp_path):
    ref = observations(course, "layer_norm", reference_dirs["layer_norm"])
    assert judge(layer_norm.test_input_not_modified, ref, ref) is None

    def edit(tensors):
        tensors["x_after_call"][1, 2, 3] += 0.5

    forged = forged_copy(reference_dirs, tmp_path, "layer_norm", "prenorm_inplace", {"input_change": 0.0}, edit)
    message = judge(layer_norm.test_input_not_modified, observations(course, "layer_norm", forged), ref)
    assert message is not None and "PreNormResidual" in message and "0.5" in message, message


def test_a_nan_finite_difference_loss_fails(course, reference_dirs, tmp_path):
    ref = observations(course, "layer_norm", reference_dirs["layer_norm"])
    assert judge(layer_norm.test_gradients_flow, ref, ref) is None

    def edit(tensors):
        tensors["out_w_plus"][0, 0, 0] = math.nan

    forged = forged_copy(reference_dirs, tmp_path, "layer_norm", "gradients", {}, edit)
    message = judge(layer_norm.test_gradients_flow, observations(course, "layer_norm", forged), ref)
    assert message is not None and "non-finite loss" in message and "weight" in message, message


def test_parameters_changed_by_a_failed_step_are_found_from_the_snapshots(course, reference_dirs, tmp_path):
    ref = observations(course, "training", reference_dirs["training"])
    assert judge(training.test_nonfinite_loss_guard, ref, ref) is None

    def edit(tensors):
        tensors["inf_loss.after.head.weight"] -= 1e-3

    forged = forged_copy(reference_dirs, tmp_path, "training", "nonfinite_loss", {}, edit)
    message = judge(training.test_nonfinite_loss_guard, observations(course, "training", forged), ref)
    assert message is not None and "1 parameters changed (head.weight)" in message, message


def test_the_eval_loss_is_computed_from_the_recorded_trained_parameters(course, reference_dirs, tmp_path):
    ref = observations(course, "training", reference_dirs["training"])
    assert judge(training.test_overfit_fixed_batch, ref, ref) is None

    def edit(tensors):
        tensors["trained.head.weight"].zero_()   # the judge's own model then predicts uniformly over V = 4: loss log 4

    stale = {"final_loss": 1e-5, "prediction": [[1, 0, 1, 0]]}
    forged = forged_copy(reference_dirs, tmp_path, "training", "overfit_fixed_batch", stale, edit)
    message = judge(training.test_overfit_fixed_batch, observations(course, "training", forged), ref)
    assert message is not None and f"{math.log(4):.4g}" in message, message
