"""`grader grade` as a user runs it: files written, scores right, statuses right, the schema held."""

import json

import jsonschema
import pytest

from grader.report.model import SCHEMA_PATH, stable_view

from conftest import ROOT

# end to end: every test here grades in a sandbox (`pytest -m "not slow"` leaves them out)
pytestmark = pytest.mark.slow


def validate(report: dict) -> None:
    jsonschema.validate(report, json.loads(SCHEMA_PATH.read_text()))


@pytest.fixture(scope="module")
def solutions_graded(tmp_path_factory):
    from conftest import Graded, run_grader

    out = tmp_path_factory.mktemp("solutions")
    done = run_grader("grade", str(ROOT / "solutions"), "--out", str(out))
    return Graded(done.returncode, done.stdout, done.stderr, out)


def test_reference_solutions_score_full_marks(solutions_graded, course):
    assert solutions_graded.returncode == 0, solutions_graded.stderr
    report = solutions_graded.report
    validate(report)
    problems = [(e["id"], c["id"], c["message"]["en"]) for e in report["exercises"] for c in e["criteria"]
                if c["status"] != "passed"]
    assert problems == []
    assert report["percent"] == 100.0
    assert [e["id"] for e in report["exercises"]] == [e.id for e in course.exercises]


def test_all_three_reports_are_written(solutions_graded):
    for name in ("report.json", "report.html", "scorecard.md"):
        assert (solutions_graded.out / name).stat().st_size > 0
    card = (solutions_graded.out / "scorecard.md").read_text()
    assert "100%" in card.splitlines()[0]
    rows = [line for line in card.splitlines() if line.startswith("| |")]
    # a row a criterion, and a row a written question (awaiting review)
    exercises = solutions_graded.report["exercises"]
    assert len(rows) == sum(len(e["criteria"]) + len(e.get("answers", ())) for e in exercises)


def test_terminal_table_lists_every_exercise(solutions_graded, course):
    for ex in course.exercises:
        assert ex.id in solutions_graded.stdout


def test_untouched_stubs_score_zero_not_attempted(grade):
    graded = grade(ROOT / "exercises")
    assert graded.returncode == 0, graded.stderr
    report = graded.report
    validate(report)
    assert report["score"] == 0
    for ex in report["exercises"]:
        assert ex["status"] == "not_attempted", (ex["id"], ex["message"]["en"])
        assert {c["status"] for c in ex["criteria"]} == {"not_attempted"}, ex["id"]


def test_stub_with_a_trivial_edit_is_still_not_attempted(grade, make_submission, course):
    ex = course.exercise("decoder_block")
    edited = course.stub(ex).read_text() + "\n# I looked at this file\n"
    graded = grade(make_submission({"decoder_block": edited}), "--exercise", "decoder_block")
    exercise = graded.exercise("decoder_block")
    assert exercise["status"] == "not_attempted"
    assert exercise["score"] == 0
    assert "NotImplementedError" in exercise["criteria"][0]["message"]["en"]
    assert "NotImplementedError" in exercise["criteria"][0]["message"]["zh"]


def test_missing_file_is_not_attempted(grade, make_submission):
    graded = grade(make_submission({}), "--exercise", "decoder_block")
    exercise = graded.exercise("decoder_block")
    assert exercise["status"] == "not_attempted"
    assert "not in the submission" in exercise["message"]["en"]
    assert exercise["message"]["zh"] == "提交中没有 decoder_block/block.py"


def test_same_submission_same_report(sample_graded, grade):
    """The sample graded again gives the run's shared grading of it (conftest's sample_graded) again."""
    second = grade(ROOT / "examples" / "submissions" / "sample")
    assert sample_graded.returncode == second.returncode == 0
    assert stable_view(sample_graded.report) == stable_view(second.report)


def test_fail_under_exits_1_below_threshold(grade):
    graded = grade(ROOT / "exercises", "--exercise", "decoder_block", "--fail-under", "50")
    assert graded.returncode == 1
    assert "below --fail-under 50%" in graded.stderr
    assert (graded.out / "report.json").exists(), "the report is written even when the threshold fails"


def test_fail_under_exits_0_when_met(grade):
    graded = grade(ROOT / "solutions", "--exercise", "decoder_block", "--fail-under", "100")
    assert graded.returncode == 0, graded.stderr


@pytest.mark.parametrize("args, words", [
    (["grade", "/nonexistent/submission"], "is not a readable folder"),
    (["grade", "--exercise", "no_such_exercise"], "unknown exercise 'no_such_exercise'"),
    (["grade", "--lang", "fr"], "invalid choice"),
])
def test_usage_errors_exit_2_with_one_line(args, words):
    from conftest import run_grader

    done = run_grader(*args)
    assert done.returncode == 2
    assert words in done.stderr
    assert "Traceback" not in done.stderr


def test_report_in_chinese(grade):
    graded = grade(ROOT / "solutions", "--exercise", "decoder_block", "--lang", "zh")
    html = (graded.out / "report.html").read_text()
    assert 'lang="zh-CN"' in html and "评分报告" in html
    assert "总分" in graded.stdout
