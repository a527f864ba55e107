"""report.json's text: the report's own encoder writes exactly what json.dumps(indent=2, ensure_ascii=False) writes."""

import enum
import json

import pytest

from grader.report.model import indented_json, valid_unicode
from grader.worker.protocol import Status


class Level(enum.IntEnum):
    HIGH = 3


VALUES = [
    {},
    [],
    {"numbers": [1, 2.5, float("nan"), float("inf"), -float("inf"), True, False, None, 1e-320, -0.0, 10**30]},
    {"mixed": [1, "a, b", [], {}, (), [[1.5, 2], [3, None]], {"k": (1, (2, [3]))}]},
    {"text": ["中文\n\"\\\t", "\x00\x1f", "\ufffd", "a, b: c"], "": {"nested": {"deeper": [{}]}}},
    {"status": [Status.PASSED, Level.HIGH, {Status.FAILED: Level.HIGH}], "lone": (Level.HIGH, 2.0)},
    {1: "a key json turns into a string", None: 2, 2.5: True},   # written by json itself
    "a string alone",
    3.25,
]


@pytest.mark.parametrize("value", VALUES, ids=range(len(VALUES)))
def test_indented_json_is_json_dumps_text(value):
    assert indented_json(value) == json.dumps(value, indent=2, ensure_ascii=False)


def test_indented_json_refuses_what_json_refuses():
    with pytest.raises(TypeError):
        indented_json({"set": {1, 2}})


def test_valid_unicode_cleans_and_copies():
    numbers = [1, 2.0, None]
    cleaned = valid_unicode({"a\ud800": ["x\udfff", numbers], "ok": "中文"})
    assert cleaned == {"a\ufffd": ["x\ufffd", [1, 2.0, None]], "ok": "中文"}
    assert cleaned["a\ufffd"][1] is not numbers   # a copy, as for every other list
