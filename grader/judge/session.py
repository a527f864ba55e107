"""One pytest session per submission over the hidden criteria of the exercises being graded."""

from __future__ import annotations

import contextlib
import importlib
import io
from dataclasses import dataclass
from pathlib import Path

import pytest
from pytest_jsonreport.plugin import JSONReport

from grader.i18n import t
from grader.judge.criterion import CriterionMeta
from grader.judge.observations import Observations
from grader.judge.plugin import JudgePlugin

CRITERIA_DIR = Path(__file__).resolve().parent.parent / "criteria"
UNUSED_PLUGINS = ("doctest", "pastebin", "junitxml", "logging", "faulthandler", "warnings", "tmpdir", "monkeypatch",
                  "recwarn", "setuponly", "setupplan", "stepwise")


@dataclass(frozen=True)
class Outcome:
    meta: CriterionMeta
    status: str
    message: dict[str, str]   # language -> sentence
    evidence: dict
    hint: dict[str, str] | None = None   # language -> sentence, in place of the criterion's own hint


def criteria_of(exercise_id: str) -> list[CriterionMeta]:
    """The criteria an exercise is judged on, in the order they are written."""
    module = importlib.import_module(f"grader.criteria.{exercise_id}")
    return [v.criterion for name, v in vars(module).items() if name.startswith("test_") and hasattr(v, "criterion")]


def judge(exercise_ids: list[str], observations: dict[str, Observations],
          references: dict[str, Observations]) -> dict[str, list[Outcome]]:
    """Run the criteria of every exercise in one pytest session; one Outcome per criterion, none lost."""
    plugin = JudgePlugin(observations, references)
    report_plugin = JSONReport()
    args = [str(CRITERIA_DIR / f"{ex}.py") for ex in exercise_ids] + [
        "-c", str(CRITERIA_DIR / "judge.ini"), "--rootdir", str(CRITERIA_DIR), "-q",
        "-p", "no:cacheprovider", "-p", "no:hypothesispytest", "--import-mode=importlib",
        "--json-report-file=none", "-W", "ignore", "--assert=plain",
        # criteria print nothing and need none of pytest's per-test services: each costs time on every test
        "--capture=no", *[arg for plugin in UNUSED_PLUGINS for arg in ("-p", f"no:{plugin}")],
    ]
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        pytest.main(args, plugins=[plugin, report_plugin])
    recorded = {}
    for test in (report_plugin.report or {}).get("tests", []):
        meta = test.get("metadata") or {}
        if "criterion" in meta:
            exercise = Path(test["nodeid"].split("::")[0]).stem
            recorded[(exercise, meta["criterion"])] = meta
    results: dict[str, list[Outcome]] = {}
    for ex in exercise_ids:
        results[ex] = []
        for meta in criteria_of(ex):
            got = recorded.get((ex, meta.id))
            if got is None:
                said = t("the grader could not run this criterion; this is a grader fault: please report it")
                results[ex].append(Outcome(meta, "grader_error", said.texts(), {}))
            else:
                results[ex].append(Outcome(meta, got["status"], got["message"], got["evidence"], got.get("hint")))
    return results
