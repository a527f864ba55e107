"""report.json follows the schema shipped in the package; the schema itself is valid."""

import json

import jsonschema

from grader.report.model import SCHEMA_PATH


def schema():
    return json.loads(SCHEMA_PATH.read_text())


def test_schema_is_valid_json_schema():
    jsonschema.Draft202012Validator.check_schema(schema())


def test_schema_rejects_unknown_status():
    report = {"schema_version": "1.0", "submission": "s", "course": "c", "score": 0, "max_score": 1, "percent": 0,
              "sandbox": {"level": "strict", "layers": {}, "note": ""}, "grader_version": "x", "torch_version": "y",
              "seed": 1, "started_at": "t", "duration_s": 0,
              "exercises": [{"id": "e", "title": {"en": "E", "zh": "E"}, "file": "e.py", "score": 0, "max_score": 1,
                             "status": "exploded", "message": "m", "criteria": [], "run": {}}]}
    errors = list(jsonschema.Draft202012Validator(schema()).iter_errors(report))
    assert errors and "exploded" in errors[0].message
