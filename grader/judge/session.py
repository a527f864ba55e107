"""The pytest session the criteria run in: its arguments, and one session per call in this process (`judge`).

Gradings judge in a process of their own per submission, with limits (`grader/judge/server.py`); `judge` here
runs the same plugin in the calling process with no limits, where no process can be forked for it (a student's
own machine on Windows, where what a submission costs falls on that student alone) and in unit tests.
"""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import pytest

from grader.i18n import t
from grader.judge.criterion import CriterionMeta, Outcome
from grader.course import default_solutions, share_course_code
from grader.judge.listing import criteria_file, criteria_of
from grader.judge.observations import Observations, observations_of, references_of
from grader.judge.plugin import JUDGING, JudgePlugin, Judging
from grader.worker.protocol import Status

__all__ = ["JUDGE_INI", "InProcessJudge", "Outcome", "criteria_of", "judge", "pytest_args", "results"]

JUDGE_INI = Path(__file__).resolve().parent / "judge.ini"   # the judge's pytest configuration, and its only one
UNUSED_PLUGINS = ("doctest", "pastebin", "junitxml", "logging", "faulthandler", "warnings", "tmpdir", "monkeypatch",
                  "recwarn", "setuponly", "setupplan", "stepwise", "cacheprovider", "hypothesispytest",
                  "pytest_jsonreport", "metadata", "terminal")


def pytest_args(exercise_ids: list[str], solutions: Path | None = None) -> list[str]:
    """The command line of a session over the criteria of these exercises (in the course's `solutions` folder; None:
    the bundled course's), with the judge's configuration only. The course's shared code becomes importable."""
    solutions = solutions or default_solutions()
    share_course_code(solutions)
    return [str(criteria_file(ex, solutions)) for ex in exercise_ids] + [
        "-c", str(JUDGE_INI), "--rootdir", str(solutions),
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
          references: dict[str, Observations], solutions: Path | None = None) -> dict[str, list[Outcome]]:
    """Run the criteria of every exercise in one pytest session in this process; one Outcome per criterion."""
    judging = Judging(observations, references)

    class Start:   # the Judging goes into the stash before any criterion runs
        @pytest.hookimpl(tryfirst=True)
        def pytest_configure(self, config):
            config.stash[JUDGING] = judging

    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        pytest.main(pytest_args(exercise_ids, solutions), plugins=[Start(), JudgePlugin()])
    return results(exercise_ids, judging.outcomes, {ex: criteria_of(ex, solutions) for ex in exercise_ids})


class InProcessJudge:
    """The judge in this process with no limits, for a judging request (as `JudgeClient` takes one): where no
    process can be forked for it."""

    def __init__(self, solutions: Path | None = None):
        self.solutions = solutions   # the course's solutions folder, its criteria's (None: the bundled course's)

    def start(self) -> None:
        pass

    def prepare(self, exercises: list[dict]) -> None:
        pass

    def judge(self, exercises: list[dict]) -> dict[str, list[Outcome]]:
        return judge([e["id"] for e in exercises], {e["id"]: observations_of(e) for e in exercises},
                     {e["id"]: references_of(e) for e in exercises}, self.solutions)

    def close(self) -> None:
        pass
