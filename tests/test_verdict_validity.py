"""Verdicts that rest on what the code does: the student's failure is never the grader's, an absence earns nothing
without the presence it guards, NaN matches nothing, and a message names the real cause.

Worker-side tests call probes directly on small student files (no sandbox); judge-side tests forge copies of the
reference observations, as tests/test_raw_observations.py does, and run one criterion on them.
"""

from __future__ import annotations

import importlib.util
import json
import math
import shutil
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file

from grader.course import load_course
from grader.grading.pipeline import probe_order, reference_folders
from grader.judge.compare import describe_outcome, difference, position_changes, unravel
from grader.judge.criterion import VerdictRecorder
from grader.judge.observations import Observations, RunSummary
from grader.judge.session import judge as judge_session
from grader.judge.verdicts import Blocked, CriterionFailed, StudentRaised
from grader.report.build import exercise_result
from grader.worker import protocol
from grader.worker.probe import ContractBreach, ProbeContext, describe_exception, is_stub_raise, student_tensor
from grader.worker.runner import classify
from conftest import criteria_module, probes_module

attention = criteria_module("attention")
checkpoint = criteria_module("checkpoint")
decoder_block = criteria_module("decoder_block")
embedding = criteria_module("embedding")
heads = criteria_module("heads")
kv_cache = criteria_module("kv_cache")
layer_norm = criteria_module("layer_norm")
masks = criteria_module("masks")
param_count = criteria_module("param_count")
training = criteria_module("training")
transformer_lm = criteria_module("transformer_lm")
attention_probes = probes_module("attention")
rope_probes = probes_module("rope")

ROOT = Path(__file__).resolve().parent.parent
NAN = math.nan


# --- NaN-safe comparisons --------------------------------------------------------------------------

def test_nan_matches_nothing_not_even_nan():
    said = difference(torch.tensor([1.0, NAN]), torch.tensor([1.0, NAN]), atol=0.0)
    assert said is not None and "NaN matches nothing" in said.render("en")
    said = difference(torch.tensor([1.0, 2.0]), torch.tensor([1.0, NAN]), atol=1.0)
    assert said is not None and "expected value at index (1,) is NaN" in said.render("en")


def test_an_infinite_expectation_is_met_only_by_the_same_infinity():
    inf = math.inf
    assert difference(torch.tensor([inf, -inf]), torch.tensor([inf, -inf]), atol=1e-5, rtol=1e-4) is None
    # with a relative tolerance, |expected| = inf once made any finite value "close enough"
    assert difference(torch.tensor([1.0]), torch.tensor([inf]), atol=1e-5, rtol=1e-4) is not None
    assert difference(torch.tensor([-inf]), torch.tensor([inf]), atol=1e-5) is not None
    assert difference(torch.tensor([1.0, 2.0]), torch.tensor([1.0, 2.0 + 1e-7]), atol=1e-6) is None


def test_finite_values_are_said_as_with_an_infinity_beside_them():
    """All-finite tensors take a shorter path: the same largest difference, at the same index, as when a matching
    infinity elsewhere sends the comparison through the general one."""
    got = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.5, 6.0]])
    want = torch.tensor([[1.0, 2.0, 3.1], [4.0, 5.0, 6.0]])
    said = difference(got, want, atol=1e-3, rtol=1e-2)
    assert said is not None
    assert "largest difference 0.5 at index (1, 1): got 5.5, expected 5" in said.render("en")
    general = difference(torch.cat([got, torch.full((1, 3), math.inf)]),
                         torch.cat([want, torch.full((1, 3), math.inf)]), atol=1e-3, rtol=1e-2)
    assert general is not None and general.render("en") == said.render("en")
    assert difference(torch.tensor(2.0), torch.tensor(1.0), atol=0.1).render("en").startswith(
        "largest difference 1 at index (): got 2")
    assert difference(got, got + 1e-4, atol=1e-3) is None


def test_position_changes_keep_nan():
    base = torch.zeros(1, 3, 2)
    changed = base.clone()
    changed[0, 2, 1] = NAN
    changed[0, 1, 0] = 0.5
    reach = position_changes(base, changed, axis=1)
    assert reach[0] == 0.0 and reach[1] == 0.5 and math.isnan(reach[2])



@pytest.mark.parametrize("shape", [(7,), (2, 3), (3, 1, 4), (2, 3, 4, 5), ()])
def test_unravel_answers_as_torch_does_for_every_index(shape):
    for flat in range(max(1, math.prod(shape))):
        want = tuple(int(i) for i in torch.unravel_index(torch.tensor(flat), shape))
        assert unravel(flat, shape) == unravel(torch.tensor(flat), torch.Size(shape)) == want

# --- the stub's raise, and the student's values ---------------------------------------------------

STUDENT = '''
import torch


def stub(x):
    raise NotImplementedError("implement me")


def and_float(mask, scores):
    return mask & scores


class Plain:
    pass
'''


@pytest.fixture
def student(tmp_path):
    path = tmp_path / "student_file.py"
    path.write_text(STUDENT)
    spec = importlib.util.spec_from_file_location("verdict_validity_student", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    yield module, str(path)
    sys.modules.pop("verdict_validity_student", None)


def raised(call):
    try:
        call()
    except BaseException as exc:  # noqa: BLE001 - the exception is what the test classifies
        return exc
    raise AssertionError("the call did not raise")


def test_only_the_stubs_own_raise_is_not_attempted(student):
    module, path = student
    stub = raised(lambda: module.stub(1))
    assert is_stub_raise(stub, path) and classify(stub, path, module)[0] == protocol.ProbeStatus.NOT_IMPLEMENTED
    # torch raises NotImplementedError for bool & float on the student's own line: an implemented function failing
    operator = raised(lambda: module.and_float(torch.ones(2, dtype=torch.bool), torch.ones(2)))
    assert isinstance(operator, NotImplementedError)
    assert not is_stub_raise(operator, path)
    status, error = classify(operator, path, module)
    assert status == protocol.ProbeStatus.RAISED and error["where"].startswith("student_file.py:")


def test_a_missing_attribute_of_a_student_object_is_the_students(student):
    module, path = student
    exc = raised(lambda: module.Plain().double())   # a class that is no nn.Module, asked what the contract asks
    assert classify(exc, path, module)[0] == protocol.ProbeStatus.RAISED


def test_a_syntax_error_names_its_line(tmp_path):
    path = tmp_path / "broken.py"
    path.write_text("import torch\n\ndef f(x)\n    return x\n")
    exc = raised(lambda: compile(path.read_text(), str(path), "exec"))
    assert describe_exception(exc, str(path))["where"] == "broken.py:3: def f(x)"


def test_a_returned_value_is_checked_before_the_probe_computes_with_it():
    x = torch.zeros(2, 3, 5, 8)
    with pytest.raises(ContractBreach) as shape:
        student_tensor("your output", torch.zeros(2, 6, 5, 4), like=("x", x))
    assert str(shape.value) == "your output has shape [2, 6, 5, 4] and cannot be compared with x of shape [2, 3, 5, 8]"
    with pytest.raises(ContractBreach) as grad:
        student_tensor("your out", torch.zeros(2, 2), depends_on="q, k, v")
    assert str(grad.value) == "your out does not depend on q, k, v: no gradient can flow"
    with pytest.raises(ContractBreach, match="is a list, not a tensor"):
        student_tensor("your output", [1.0])
    leaf = torch.zeros(2, requires_grad=True)
    assert student_tensor("your output", leaf, shape=[2], dtype=torch.float32, depends_on="x") is leaf


def test_the_judge_says_the_breach_in_the_students_language():
    exc = raised(lambda: student_tensor("your out", torch.zeros(2), depends_on="q, k, v"))
    outcome = {"raised": describe_exception(exc, None)}
    texts = describe_outcome(outcome).texts()
    assert texts["en"] == "gave what breaks the contract: your out does not depend on q, k, v: no gradient can flow"
    assert "你的 out" in texts["zh"] and "梯度无法回传" in texts["zh"]


ZERO_ATTENTION = '''
import torch


def scaled_dot_product_attention(q, k, v, mask=None):
    return torch.zeros(*q.shape[:-1], v.shape[-1]), torch.zeros(*q.shape[:-1], k.shape[-2])
'''

RESHAPED_ROPE = '''
def apply_rope(x, positions=None, base=10000.0):
    return x.reshape(*x.shape[:-2], x.shape[-1], x.shape[-2])
'''


def student_module(tmp_path, name, source):
    path = tmp_path / f"{name}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(f"verdict_validity_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module, str(path)


@pytest.mark.parametrize("probes, probe, name, source, said", [
    (attention_probes, "gradients", "attention", ZERO_ATTENTION,
     "your out does not depend on q, k, v: no gradient can flow"),
    (rope_probes, "gradients", "rope", RESHAPED_ROPE,
     "your output has shape [2, 8, 7] and cannot be compared with x of shape [2, 7, 8]"),
    (rope_probes, "positions", "rope", RESHAPED_ROPE,
     "your output has shape [8, 4096] and cannot be compared with x of shape [4096, 8]"),
], ids=["zero_attention_gradients", "reshaped_rope_gradients", "reshaped_rope_positions"])
def test_a_placeholders_output_is_its_failure_not_the_graders(tmp_path, probes, probe, name, source, said):
    module, path = student_module(tmp_path, name, source)
    ctx = ProbeContext(probe, 1234, str(tmp_path), path)
    exc = raised(lambda: getattr(probes, probe)(module, ctx))
    status, error = classify(exc, path, module)
    assert status == protocol.ProbeStatus.RAISED and error.get("breach"), error
    assert error["message"] == said


# --- the judge: an import error once, with a hint about importing ----------------------------------

def test_a_file_that_does_not_import_is_one_error_with_an_import_hint(course, tmp_path):
    obs_dir = tmp_path / "obs"
    obs_dir.mkdir()
    error = {"type": "SyntaxError", "message": "expected ':' (heads.py, line 3)", "where": "heads.py:3: def f(x)",
             "frames": []}
    raised = {"status": protocol.ProbeStatus.RAISED, "error": error}
    (obs_dir / f"{protocol.IMPORT_PROBE}.json").write_text(json.dumps(raised))
    ex = course.exercise("heads")
    obs = Observations("heads", ex.file, probe_order(ex), obs_dir, RunSummary())
    unused = Observations("heads", ex.file, probe_order(ex), None, None)  # never read: nothing gets that far
    outcomes = judge_session(["heads"], {"heads": obs}, {"heads": unused})["heads"]
    statuses = [o.status for o in outcomes]
    assert statuses.count("error") == 1 and set(statuses) == {"error", "blocked"}, statuses
    first = outcomes[0]
    assert "SyntaxError" in first.message["en"] and first.hint and "py_compile heads.py" in first.hint["en"]
    assert all(o.hint == first.hint for o in outcomes), "every criterion shows how to make the file import"
    assert all("does not import" in o.message["en"] for o in outcomes[1:])
    result = exercise_result(ex, outcomes, {})
    assert result.status == "error" and result.criteria[0].hint["en"] == first.hint["en"]
    assert result.criteria[0].hint["zh"] != first.hint["en"]


# --- forged observations -------------------------------------------------------------------------

EXERCISES = ["attention", "decoder_block", "embedding", "heads", "layer_norm", "masks", "param_count",
             "transformer_lm", "training", "checkpoint", "kv_cache"]


@pytest.fixture(scope="module")
def course():
    return load_course(ROOT)


@pytest.fixture(scope="module")
def reference_dirs(course):
    return reference_folders(course, [course.exercise(e) for e in EXERCISES])


def observations(course, exercise: str, directory: Path) -> Observations:
    ex = course.exercise(exercise)
    return Observations(exercise, ex.file, probe_order(ex), directory, run=None)


def forged(course, reference_dirs, tmp_path, exercise: str, probe: str, edit_tensors=None, edit_values=None):
    """Observations of `exercise` that are the reference's but for `probe`'s edited tensors and values."""
    directory = tmp_path / exercise
    if not directory.exists():
        shutil.copytree(reference_dirs[exercise], directory)
    if edit_tensors is not None:
        tensors = load_file(directory / f"{probe}.safetensors")
        edit_tensors(tensors)
        save_file(tensors, directory / f"{probe}.safetensors")
    if edit_values is not None:
        recorded = json.loads((directory / f"{probe}.json").read_text())
        edit_values(recorded["values"])
        (directory / f"{probe}.json").write_text(json.dumps(recorded))
    return observations(course, exercise, directory)


def verdict_of(criterion, obs, ref) -> str | None:
    """Run one criterion function: its failure (or other verdict) in English, or None when it passed."""
    arguments = {"obs": obs, "ref": ref, "verdict": VerdictRecorder()}
    wanted = criterion.__code__.co_varnames[: criterion.__code__.co_argcount]
    try:
        criterion(**{name: arguments[name] for name in wanted})
    except (CriterionFailed, Blocked, StudentRaised) as failure:
        return f"{failure.status}: {failure.message.render('en')}"
    return None


def reference(course, reference_dirs, exercise):
    return observations(course, exercise, reference_dirs[exercise])


@pytest.mark.parametrize("module, exercise, axis", [(attention, "attention", -2), (decoder_block, "decoder_block", 1),
                                                    (transformer_lm, "transformer_lm", 1)],
                         ids=["attention", "decoder_block", "transformer_lm"])
def test_causality_needs_the_past_to_be_read(course, reference_dirs, tmp_path, module, exercise, axis):
    ref = reference(course, reference_dirs, exercise)
    assert verdict_of(module.test_causality, ref, ref) is None

    def position_zero_reaches_nothing(tensors):
        tensors["changed_first"] = tensors["base"].clone()

    obs = forged(course, reference_dirs, tmp_path, exercise, "causality", position_zero_reaches_nothing)
    said = verdict_of(module.test_causality, obs, ref)
    assert said is not None and said.startswith("failed") and "position 0" in said and "unchanged" in said, said


def test_zero_attention_earns_no_fully_masked_rows(course, reference_dirs, tmp_path):
    ref = reference(course, reference_dirs, "attention")
    assert verdict_of(attention.test_fully_masked_row_zero, ref, ref) is None

    def zeros(tensors):
        tensors["out"].zero_()
        tensors["weights"].zero_()

    said = verdict_of(attention.test_fully_masked_row_zero, forged(course, reference_dirs, tmp_path, "attention",
                                                                   "fully_masked", zeros), ref)
    assert said is not None and "not attended right" in said and "expected 1" in said, said


@pytest.mark.parametrize("module, exercise, probe, first, second, other", [
    (decoder_block, "decoder_block", "dropout", "eval_first", "eval_second", "eval_other"),
    (transformer_lm, "transformer_lm", "determinism", "first", "second", "other")],
    ids=["decoder_block", "transformer_lm"])
def test_determinism_needs_finite_outputs_that_depend_on_the_input(course, reference_dirs, tmp_path, module, exercise,
                                                                   probe, first, second, other):
    ref = reference(course, reference_dirs, exercise)
    assert verdict_of(module.test_eval_deterministic, ref, ref) is None

    def nan_twice(tensors):
        tensors[first].fill_(NAN)
        tensors[second].fill_(NAN)   # bitwise the same NaN: once "identical"

    said = verdict_of(module.test_eval_deterministic, forged(course, reference_dirs, tmp_path / "nan", exercise, probe,
                                                             nan_twice), ref)
    assert said is not None and "NaN or inf" in said, said

    def constant(tensors):
        tensors[other] = tensors[first].clone()

    said = verdict_of(module.test_eval_deterministic, forged(course, reference_dirs, tmp_path / "constant", exercise,
                                                             probe, constant), ref)
    assert said is not None and "constant is deterministic" in said, said


def test_a_default_dropout_is_judged_on_finite_outputs_and_names_the_default(course, reference_dirs, tmp_path):
    ref = reference(course, reference_dirs, "decoder_block")
    assert verdict_of(decoder_block.test_dropout_defaults_to_zero, ref, ref) is None

    def nan_in_both_modes(tensors):
        tensors["train"].fill_(NAN)
        tensors["eval"].fill_(NAN)   # bitwise the same NaN: once "equal"

    said = verdict_of(decoder_block.test_dropout_defaults_to_zero,
                      forged(course, reference_dirs, tmp_path / "nan", "decoder_block", "default_dropout",
                             nan_in_both_modes), ref)
    assert said is not None and said.startswith("failed") and "NaN or inf" in said, said

    def everything_dropped(tensors):   # a default rate of 1.0: every attention weight dropped in train mode
        tensors["train"].zero_()

    said = verdict_of(decoder_block.test_dropout_defaults_to_zero,
                      forged(course, reference_dirs, tmp_path / "dropped", "decoder_block", "default_dropout",
                             everything_dropped), ref)
    assert said is not None and said.startswith("failed") and "default is dropout=0.0" in said, said


@pytest.mark.parametrize("outcome, said", [
    ({"raised": {"type": "AttributeError", "message": "'list' object has no attribute 'dim'"}}, "isinstance"),
    ({"returned": "dict"}, "returned")], ids=["attribute_error", "accepted"])
def test_tokens_that_are_a_list_must_raise_value_error(course, reference_dirs, tmp_path, outcome, said):
    ref = reference(course, reference_dirs, "transformer_lm")
    cases = ref.probe("bad_inputs").value("bad_tokens")
    assert transformer_lm.LIST_TOKENS in [c["case"] for c in cases]
    assert verdict_of(transformer_lm.test_rejects_bad_tokens, ref, ref) is None

    def list_not_refused(values):
        for case in values["bad_tokens"]:
            if case["case"] == transformer_lm.LIST_TOKENS:
                case["outcome"] = outcome

    message = verdict_of(transformer_lm.test_rejects_bad_tokens,
                         forged(course, reference_dirs, tmp_path, "transformer_lm", "bad_inputs",
                                edit_values=list_not_refused), ref)
    assert message is not None and message.startswith("failed") and "nested Python list" in message, message
    assert said in message, message


def test_prenorm_structure_never_builds_on_the_students_output(course, reference_dirs, tmp_path):
    ref = reference(course, reference_dirs, "layer_norm")
    assert verdict_of(layer_norm.test_prenorm_structure, ref, ref) is None
    inputs = ref.probe("prenorm_structure")
    x, w, b = inputs.tensor("x"), inputs.tensor("norm_weight"), inputs.tensor("norm_bias")
    sublayer = layer_norm.layer_norm(x, w, b) @ inputs.tensor("sub_weight").T + inputs.tensor("sub_bias")

    def nan_norm_without_residual(tensors):
        for key in ("own_norm", "received"):
            tensors[key].fill_(NAN)             # the student's norm is NaN: once the expectation, and so "matched"
        tensors["out"].fill_(NAN)
        tensors["out_grader_norm"] = sublayer.clone()

    said = verdict_of(layer_norm.test_prenorm_structure, forged(course, reference_dirs, tmp_path, "layer_norm",
                                                                "prenorm_structure", nan_norm_without_residual), ref)
    assert said is not None and "the residual x is not added" in said, said


def test_an_untouched_input_counts_only_for_a_layer_norm_that_normalises(course, reference_dirs, tmp_path):
    ref = reference(course, reference_dirs, "layer_norm")

    def returns_its_input(tensors):
        tensors["out64"] = tensors["x64_after_call"].clone()

    said = verdict_of(layer_norm.test_input_not_modified, forged(course, reference_dirs, tmp_path, "layer_norm",
                                                                 "reference", returns_its_input), ref)
    assert said is not None and "no layer normalisation" in said, said


def test_an_identity_block_earns_no_identity(course, reference_dirs, tmp_path):
    ref = reference(course, reference_dirs, "layer_norm")
    assert verdict_of(layer_norm.test_prenorm_identity, ref, ref) is None
    x = ref.probe("prenorm_structure").tensor("x")

    def identity(tensors):
        tensors["out"] = x.clone()

    said = verdict_of(layer_norm.test_prenorm_identity, forged(course, reference_dirs, tmp_path, "layer_norm",
                                                               "prenorm_structure", identity), ref)
    assert said is not None and "never adds what its sublayer returns" in said, said


def test_layer_norm_with_another_eps_is_told_its_eps(course, reference_dirs, tmp_path):
    ref = reference(course, reference_dirs, "layer_norm")
    inputs = ref.probe("reference")
    x, w, b = inputs.tensor("x64"), inputs.tensor("w64"), inputs.tensor("b64")

    # eps = 1e-6 lands within float32 rounding of the reference here (the eps criterion catches it); 1e-3 does not
    def eps_1e3(tensors):
        tensors["out64"] = F.layer_norm(x, (x.shape[-1],), w, b, eps=1e-3)

    said = verdict_of(layer_norm.test_matches_reference, forged(course, reference_dirs, tmp_path, "layer_norm",
                                                                "reference", eps_1e3), ref)
    assert said is not None and "eps = 0.001" in said and "float32" not in said, said


def test_fully_masked_lines_count_only_where_the_rest_is_a_softmax(course, reference_dirs, tmp_path):
    ref = reference(course, reference_dirs, "masks")
    assert verdict_of(masks.test_masked_softmax_fully_masked, ref, ref) is None

    def zeros(tensors):
        tensors["rows"].zero_()

    said = verdict_of(masks.test_masked_softmax_fully_masked, forged(course, reference_dirs, tmp_path / "rows", "masks",
                                                                     "fully_masked", zeros), ref)
    assert said is not None and "count only where the others are a softmax" in said, said

    def the_mask_as_numbers(tensors):
        tensors["p"] = tensors["allowed"].double()
        tensors["p_changed"] = tensors["allowed"].double()

    said = verdict_of(masks.test_combined_no_leak, forged(course, reference_dirs, tmp_path / "leak", "masks", "no_leak",
                                                          the_mask_as_numbers), ref)
    assert said is not None and "must normalise what the mask allows" in said, said


def test_a_round_trip_through_functions_that_change_nothing_earns_nothing(course, reference_dirs, tmp_path):
    ref = reference(course, reference_dirs, "heads")
    assert verdict_of(heads.test_round_trip, ref, ref) is None

    def split_kept_the_shape(values):
        values["x_0_between"] = [2, 5, 12]

    said = verdict_of(heads.test_round_trip, forged(course, reference_dirs, tmp_path, "heads", "round_trip",
                                                    edit_values=split_kept_the_shape), ref)
    assert said is not None and "in between split_heads(x, 3) returned [2, 5, 12]" in said, said


def test_a_zero_table_earns_no_zero_padding_row(course, reference_dirs, tmp_path):
    ref = reference(course, reference_dirs, "embedding")
    assert verdict_of(embedding.test_padding_row_zero_at_init, ref, ref) is None

    def zero_table(tensors):
        tensors["init_pad0"].zero_()

    said = verdict_of(embedding.test_padding_row_zero_at_init, forged(course, reference_dirs, tmp_path, "embedding",
                                                                      "table", zero_table), ref)
    assert said is not None and "every row of weight right after construction is zero" in said, said


def test_a_wrong_part_with_a_right_total_is_named(course, reference_dirs, tmp_path):
    ref = reference(course, reference_dirs, "param_count")
    assert verdict_of(param_count.test_breakdown_keys_and_sum, ref, ref) is None
    assert not param_count.test_breakdown_parts_exact.criterion.requires, "the wrong part must not be hidden"

    def one_block_in_blocks(values):
        for outcome, config in zip(values["breakdowns"], values["configs"], strict=True):
            items = outcome["returned"]["items"]
            items["blocks"]["value"] //= config["n_layers"]

    obs = forged(course, reference_dirs, tmp_path, "param_count", "sums", edit_values=one_block_in_blocks)
    said = verdict_of(param_count.test_breakdown_keys_and_sum, obs, ref)
    assert said is not None and "the model's count" in said and "'blocks' is" in said, said
    assert "the total must be the sum of the parts" not in said


def test_a_count_that_reads_no_size_earns_no_consistency(course, reference_dirs, tmp_path):
    ref = reference(course, reference_dirs, "param_count")

    def zeros(values):
        for outcome in values["breakdowns"]:
            for item in outcome["returned"]["items"].values():
                item["value"] = 0
        for outcome in values["totals"]:
            outcome["returned"]["value"] = 0

    said = verdict_of(param_count.test_breakdown_keys_and_sum, forged(course, reference_dirs, tmp_path, "param_count",
                                                                      "sums", edit_values=zeros), ref)
    assert said is not None and "reads none of the sizes" in said, said


def test_a_guard_on_a_step_that_never_updates_earns_nothing(course, reference_dirs, tmp_path):
    ref = reference(course, reference_dirs, "training")
    assert verdict_of(training.test_nonfinite_loss_guard, ref, ref) is None

    def no_step(values):
        values["finite_steps"] = 0

    said = verdict_of(training.test_nonfinite_loss_guard, forged(course, reference_dirs, tmp_path, "training",
                                                                 "nonfinite_loss", edit_values=no_step), ref)
    assert said is not None and "without calling optimizer.step()" in said, said


def test_a_loader_that_loads_nothing_refuses_nothing(course, reference_dirs, tmp_path):
    ref = reference(course, reference_dirs, "checkpoint")
    assert verdict_of(checkpoint.test_load_refuses_pickled_code, ref, ref) is None

    def loads_nothing(values):
        values["clean_restored"] = False

    said = verdict_of(checkpoint.test_load_refuses_pickled_code, forged(course, reference_dirs, tmp_path, "checkpoint",
                                                                        "pickled_code", edit_values=loads_nothing), ref)
    assert said is not None and "loads nothing" in said, said


@pytest.mark.parametrize("edit, said", [
    (lambda v: v["long_prompt.calls"][2]["attention"][1]["input"].update(shape=[1, 6, 16]), "one query position"),
    (lambda v: v["long_prompt.calls"][1].update(tokens={"type": "Tensor", "shape": [1, 5], "dtype": "int64"},
                                                past_length=0), "expected one new token"),
    (lambda v: v["long_prompt.calls"][0].update(tokens={"type": "Tensor", "shape": [1, 1], "dtype": "int64"}),
     "expected the whole prompt"),
    (lambda v: v["one_token.calls"].clear(), "never called model(...)"),
], ids=["attention_reads_six", "whole_sequence_again", "prompt_cut", "no_call"])
def test_one_position_per_step_is_read_from_what_reached_the_model(course, reference_dirs, tmp_path, edit, said):
    """The work per token is what reached the model and its attention modules; a run that made no call shows no
    work and earns nothing."""
    ref = reference(course, reference_dirs, "kv_cache")
    assert verdict_of(kv_cache.test_one_position_per_step, ref, ref) is None
    got = verdict_of(kv_cache.test_one_position_per_step,
                     forged(course, reference_dirs, tmp_path, "kv_cache", "generate", edit_values=edit), ref)
    assert got is not None and said in got, got


@pytest.mark.parametrize("criterion, probe, key, said", [
    ("test_rejects_past_block_size", "context_limit", "at_limit.logits", "the positive control failed"),
    ("test_no_cache_unchanged", "no_cache", "default.logits", "differ from exercise 9's forward"),
])
def test_kv_cache_absence_checks_need_their_positive_control(course, reference_dirs, tmp_path, criterion, probe, key,
                                                            said):
    """A ValueError past block_size counts only where block_size itself gives the full forward's logits, and a
    `past_key_values` of None only together with exercise 9's logits."""
    ref = reference(course, reference_dirs, "kv_cache")
    check = getattr(kv_cache, criterion)
    assert verdict_of(check, ref, ref) is None

    def zero(tensors):
        tensors[key] = torch.zeros_like(tensors[key])

    got = verdict_of(check, forged(course, reference_dirs, tmp_path, "kv_cache", probe, edit_tensors=zero), ref)
    assert got is not None and said in got, got


@pytest.mark.parametrize("message, shown", [
    ("PytorchStreamReader failed locating file data.pkl: file not found",
     "raised RuntimeError: PytorchStreamReader failed locating file data.pkl: file not found"),
    ("invalid load key, 'x'. Check the file.", "raised RuntimeError: invalid load key, 'x'."),
    ("", "raised RuntimeError"),
])
def test_a_load_error_is_never_cut_at_its_colon(message, shown):
    said = checkpoint._short({"raised": {"type": "RuntimeError", "message": message}})
    assert said.render("en") == shown


MODULE_WITHOUT_FORWARD = '''
import torch


class Attention(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.q_proj = torch.nn.Linear(2, 2)
'''


def test_what_torch_raises_for_a_student_module_is_the_students(tmp_path):
    module, path = student_module(tmp_path, "no_forward", MODULE_WITHOUT_FORWARD)
    attention = module.Attention()
    missing = raised(lambda: attention(torch.zeros(1, 2)))         # nn.Module's own forward: not implemented
    assert isinstance(missing, NotImplementedError) and not is_stub_raise(missing, path)
    assert classify(missing, path, module)[0] == protocol.ProbeStatus.RAISED
    absent = raised(lambda: attention.k_proj)                        # nn.Module.__getattr__ on the student's module
    assert classify(absent, path, module)[0] == protocol.ProbeStatus.RAISED
    grader_own = raised(lambda: torch.nn.Linear(2, 2).no_such_layer)  # the grader's own module: still the grader's
    assert classify(grader_own, path, module)[0] == protocol.ProbeStatus.GRADER_FAULT
