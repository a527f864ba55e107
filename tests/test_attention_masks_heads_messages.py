"""The criteria of attention, masks and heads say what they found in both languages: the fragments they build
(a location, a diagnosis, what a call did) are templates too, so a Chinese report holds no English sentence."""

import math
import re

import pytest
import torch

from grader.judge.criterion import VerdictRecorder
from grader.judge.verdicts import CriterionFailed
from grader.worker.probe import describe_exception
from conftest import criteria_module, probes_module

attention = criteria_module("attention")
heads = criteria_module("heads")
masks = criteria_module("masks")
WrongReturn = probes_module("attention").WrongReturn
unpack = probes_module("attention").unpack

HAN = re.compile("[\u4e00-\u9fff]")


def chinese(zh: str, *english: str) -> bool:
    """Whether a rendering is Chinese: Han characters, and none of the English template's own words."""
    return bool(HAN.search(zh)) and not [w for w in english if re.search(rf"\b{w}\b", zh)]


def test_a_location_names_its_axes_in_each_language():
    texts = attention._at((1, 0, 3, 2)).texts()
    assert texts["en"] == "batch 1, head 0, query 3, key 2"
    assert texts["zh"] == "batch 1、head 0、query 3、key 2"
    # more axes than names: the leading ones are plain axes
    assert attention._at((4, 1, 0, 3, 2)).texts()["en"] == "axis 4, batch 1, head 0, query 3, key 2"
    assert masks._at((0, 2), ("query", "key")).texts()["zh"] == "query 0、key 2"


def test_the_diagnosis_of_a_missing_scale_reads_in_both_languages():
    generator = torch.Generator().manual_seed(0)
    q, k = torch.randn(1, 1, 4, 16, generator=generator), torch.randn(1, 1, 6, 16, generator=generator)
    unscaled = (q.double() @ k.double().transpose(-2, -1)).softmax(-1)
    texts = attention._diagnosis(unscaled, q, k, d_v=8).texts()
    assert texts["en"] == ("; your weights equal softmax(q·kᵀ) with no scale at all "
                           "(the 1/sqrt(D) = 1/sqrt(16) is missing)")
    assert "完全没有缩放" in texts["zh"] and "1/sqrt(16)" in texts["zh"]
    assert chinese(texts["zh"], "your", "weights", "equal", "scale", "missing")
    scaled = (q.double() @ k.double().transpose(-2, -1) / math.sqrt(16)).softmax(-1)
    assert attention._diagnosis(scaled, q, k, d_v=8).texts() == {"en": "", "zh": ""}


def test_a_wrong_return_recorded_by_the_probe_is_judged_in_the_students_language():
    try:
        unpack((torch.zeros(2), torch.zeros(2), torch.zeros(2)))
    except WrongReturn as exc:
        recorded = describe_exception(exc, None)
    case = {"q": [5, 16], "k": [7, 16], "v": [7, 12], "mask": None, "raised": recorded}
    with pytest.raises(CriterionFailed) as failure:
        attention._judge_case(VerdictRecorder(), case)
    texts = failure.value.message.texts()
    assert texts["en"] == ("with q [5, 16], k [7, 16], v [7, 12], scaled_dot_product_attention returned a tuple of "
                           "length 3; the contract asks for a tuple (out, weights)")
    assert "长度为 3 的 tuple" in texts["zh"] and chinese(texts["zh"], "with", "returned", "length", "contract")


def test_what_a_call_did_names_the_call_in_the_students_language_and_keeps_their_words():
    outcome = {"raised": {"type": "RuntimeError", "message": "view size is not compatible", "where": "heads.py:7"}}
    texts = heads._describe(heads._split_call(10, 3), outcome).texts()
    assert texts["en"] == ("split_heads(x of shape [2, 5, 10], n_heads=3) raised RuntimeError: view size is not "
                           "compatible (at heads.py:7)")
    assert texts["zh"].startswith("split_heads(x, n_heads=3)（x 的形状为 [2, 5, 10]）")
    assert "RuntimeError: view size is not compatible" in texts["zh"] and "（位于 heads.py:7）" in texts["zh"]
    returned = heads._describe(heads._split_call(12, 0), {"returned": "Tensor"}).texts()
    assert returned["en"] == "split_heads(x of shape [2, 5, 12], n_heads=0) returned a Tensor without raising"


@pytest.mark.parametrize("shape", [[2, 3], [4]])
def test_a_mismatch_in_the_heads_round_trip_is_said_in_both_languages(shape):
    want = torch.arange(math.prod(shape), dtype=torch.float32).reshape(shape)
    got = want.clone()
    got.view(-1)[1] += 1
    call = heads._split_call(12, 3)
    with pytest.raises(CriterionFailed) as failure:
        heads._check_same(VerdictRecorder(), got, want, call, "x", "t, c")
    texts = failure.value.message.texts()
    assert "1 of " in texts["en"] and "values moved" in texts["en"]
    assert "逐位相同" in texts["zh"] and chinese(texts["zh"], "of", "shape", "got", "expected", "values", "moved")
