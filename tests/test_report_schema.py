"""report.json follows the schema shipped in the package; the schema itself is valid; the model and every renderer
know the same statuses."""

import json

import jsonschema
import pytest
from hostile_report import hostile_report

from grader.render.labels import LABELS, STATUS_MARK
from grader.report.model import EXERCISE_STATUSES, SCHEMA_PATH, SCHEMA_VERSION, STATUSES


def schema():
    return json.loads(SCHEMA_PATH.read_text())


def test_schema_is_valid_json_schema():
    jsonschema.Draft202012Validator.check_schema(schema())


def test_schema_rejects_unknown_status():
    report = {"schema_version": SCHEMA_VERSION, "submission": "s", "course": "c", "score": 0, "max_score": 1,
              "percent": 0,
              "sandbox": {"level": "strict", "layers": {}, "note": ""}, "grader_version": "x", "torch_version": "y",
              "started_at": "t", "duration_s": 0,
              "exercises": [{"id": "e", "title": {"en": "E", "zh": "E"}, "file": "e.py", "score": 0, "max_score": 1,
                             "status": "exploded", "message": {"en": "m", "zh": "m"}, "criteria": [], "run": {}}]}
    errors = list(jsonschema.Draft202012Validator(schema()).iter_errors(report))
    assert errors and "exploded" in errors[0].message


def test_schema_statuses_are_the_models():
    assert schema()["$defs"]["status"]["enum"] == list(STATUSES)
    assert schema()["$defs"]["exercise_status"]["enum"] == list(EXERCISE_STATUSES)
    assert schema()["properties"]["schema_version"] == {"const": SCHEMA_VERSION}
    assert schema()["$id"].endswith("/" + SCHEMA_VERSION)


def test_partial_is_an_exercises_status_and_no_criterions():
    """Schema 3.0: an exercise may be `partial`; a criterion, whose points are all or nothing, may not."""
    report = hostile_report().to_dict()
    report["exercises"][0]["status"] = "partial"
    jsonschema.validate(report, schema())
    report["exercises"][0]["criteria"][0]["status"] = "partial"
    errors = list(jsonschema.Draft202012Validator(schema()).iter_errors(report))
    assert errors and all("criteria" in e.absolute_path for e in errors)


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_every_status_has_a_label_and_a_mark(lang):
    assert all(LABELS[lang].get(s) for s in EXERCISE_STATUSES) and all(STATUS_MARK.get(s) for s in EXERCISE_STATUSES)


def test_a_report_holding_a_lone_surrogate_is_written_as_utf8():
    report = hostile_report()
    report.submission = "assigned later \ud800"  # after __post_init__: to_dict cleans it again
    text = report.to_json()
    assert "\ufffd" in text and text.encode("utf-8")
    assert all("\ud800" not in said for said in report.exercises[0].criteria[0].message.values())


def test_a_grader_error_marks_the_exercise_and_earns_no_point():
    rope = hostile_report("grader_error").exercises[1]
    assert (rope.status, rope.score, rope.max_score) == ("grader_error", 0.0, 4.0)
    assert rope.criteria[0].points == 0.0 and "the sandbox could not start" in rope.message["en"]
    assert "沙箱无法启动" in rope.message["zh"]


@pytest.mark.parametrize("said", ["m", {"en": "m"}, {"en": "m", "zh": ""}, {"en": "m", "zh": "m", "fr": "m"}],
                         ids=["a-string", "english-only", "empty-chinese", "a-third-language"])
@pytest.mark.parametrize("where", ["exercise", "criterion"])
def test_schema_wants_each_message_in_english_and_chinese(said, where):
    """A message is {"en", "zh"}, both written, nothing else, for every exercise and criterion (schema 2.0)."""
    report = hostile_report().to_dict()
    target = report["exercises"][0] if where == "exercise" else report["exercises"][0]["criteria"][0]
    jsonschema.validate(report, schema())
    target["message"] = said
    errors = list(jsonschema.Draft202012Validator(schema()).iter_errors(report))
    assert errors and all("message" in e.absolute_path for e in errors)


def test_a_report_holds_each_message_in_both_languages():
    report = hostile_report("grader_error").to_dict()
    assert report["schema_version"] == SCHEMA_VERSION == "3.3"
    for exercise in report["exercises"]:
        assert set(exercise["message"]) == {"en", "zh"}
        for criterion in exercise["criteria"]:
            assert set(criterion["message"]) == {"en", "zh"} and all(criterion["message"].values())
    # a grader error's exercise summary is a grader sentence around the criterion's: each in its own language
    summary = report["exercises"][1]["message"]
    assert summary["en"].startswith("0 of 1 criteria passed; the sandbox could not start")
    assert summary["zh"].startswith("通过 0 / 1 个评分项；沙箱无法启动")


def test_every_verdict_of_the_judge_has_a_status_the_report_knows():
    from grader.judge import verdicts

    classes = [c for c in vars(verdicts).values() if isinstance(c, type) and issubclass(c, verdicts.Verdict)]
    assert len(classes) >= 8 and all(c.status in STATUSES for c in classes), [(c, c.status) for c in classes]


def test_a_report_holds_no_seed():
    """The course's seed names every hidden input: no report carries it (schema 3.1), and the schema refuses a
    report that would."""
    report = hostile_report().to_dict()
    assert "seed" not in report
    jsonschema.validate(report, schema())
    report["seed"] = 20261130
    errors = list(jsonschema.Draft202012Validator(schema()).iter_errors(report))
    assert errors and "seed" in errors[0].message
