"""The pytest session the criteria run in: its arguments, and one session per call in this process (`judge`).

Gradings judge in a process of their own per submission, with limits (`grader/judge/server.py`); `judge` here
runs the same plugin in the calling process with no limits, where no process can be forked for it (a student's
own machine on Windows, where what a submission costs falls on that student alone) and in unit tests.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import io
from pathlib import Path

import pytest

from grader.i18n import t
from grader.judge.criterion import CriterionMeta, Outcome
from grader.judge.observations import Observations, observations_of, references_of
from grader.judge.plugin import JUDGING, JudgePlugin, Judging
from grader.worker.protocol import Status

__all__ = ["CRITERIA_DIR", "InProcessJudge", "Outcome", "criteria_of", "judge", "pytest_args", "results"]

CRITERIA_DIR = Path(__file__).resolve().parent.parent / "criteria"
UNUSED_PLUGINS = ("doctest", "pastebin", "junitxml", "logging", "faulthandler", "warnings", "tmpdir", "monkeypatch",
                  "recwarn", "setuponly", "setupplan", "stepwise", "cacheprovider", "hypothesispytest",
                  "pytest_jsonreport", "metadata", "terminal")


def criteria_file(exercise_id: str, folder: Path | None = None) -> Path:
    """The module of an exercise's criteria: the course's own (`[course] criteria` names its folder) where that
    folder holds one, else the package's."""
    own = folder / f"{exercise_id}.py" if folder is not None else None
    return own if own is not None and own.is_file() else CRITERIA_DIR / f"{exercise_id}.py"


def criteria_of(exercise_id: str, folder: Path | None = None) -> list[CriterionMeta]:
    """The criteria an exercise is judged on, in the order they are written."""
    path = criteria_file(exercise_id, folder)
    if path.parent == CRITERIA_DIR:
        module = importlib.import_module(f"grader.criteria.{exercise_id}")
    else:   # a course's own criteria module, read from its file as pytest reads it
        spec = importlib.util.spec_from_file_location(f"course_criteria.{exercise_id}", path)
        assert spec is not None and spec.loader is not None, f"{path} is a .py file: it has a spec and a loader"
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    return [v.criterion for name, v in vars(module).items() if name.startswith("test_") and hasattr(v, "criterion")]


def pytest_args(exercise_ids: list[str], folder: Path | None = None) -> list[str]:
    """The command line of a session over the criteria of these exercises, with the judge's configuration only."""
    return [str(criteria_file(ex, folder)) for ex in exercise_ids] + [
        "-c", str(CRITERIA_DIR / "judge.ini"), "--rootdir", str(CRITERIA_DIR),
        "--import-mode=importlib", "-W", "ignore", "--assert=plain",
        # criteria print nothing and need none of pytest's per-test services: each costs time on every test
        "--capture=no", *[arg for plugin in UNUSED_PLUGINS for arg in ("-p", f"no:{plugin}")],
    ]


def results(exercise_ids: list[str], outcomes: dict[tuple[str, str], Outcome],
            metas: dict[str, list[CriterionMeta]]) -> dict[str, list[Outcome]]:
    """One Outcome per criterion of each exercise, in the order written; a criterion without one is the grader's
    failure to run it, never a lost criterion."""
    said = t("the grader could not run this criterion; this is a grader fault: please report it")
    return {ex: [outcomes.get((ex, meta.id)) or Outcome(meta, Status.GRADER_ERROR, said.texts(), {})
                 for meta in metas[ex]] for ex in exercise_ids}


def judge(exercise_ids: list[str], observations: dict[str, Observations],
          references: dict[str, Observations], folder: Path | None = None) -> dict[str, list[Outcome]]:
    """Run the criteria of every exercise in one pytest session in this process; one Outcome per criterion."""
    judging = Judging(observations, references)

    class Start:   # the Judging goes into the stash before any criterion runs
        @pytest.hookimpl(tryfirst=True)
        def pytest_configure(self, config):
            config.stash[JUDGING] = judging

    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        pytest.main(pytest_args(exercise_ids, folder), plugins=[Start(), JudgePlugin()])
    return results(exercise_ids, judging.outcomes, {ex: criteria_of(ex, folder) for ex in exercise_ids})


class InProcessJudge:
    """The judge in this process with no limits, for a judging request (as `JudgeClient` takes one): where no
    process can be forked for it."""

    def __init__(self, criteria: Path | None = None):
        self.criteria_folder = criteria

    def start(self) -> None:
        pass

    def prepare(self, exercises: list[dict]) -> None:
        pass

    def judge(self, exercises: list[dict]) -> dict[str, list[Outcome]]:
        return judge([e["id"] for e in exercises], {e["id"]: observations_of(e) for e in exercises},
                     {e["id"]: references_of(e) for e in exercises}, self.criteria_folder)

    def close(self) -> None:
        pass
