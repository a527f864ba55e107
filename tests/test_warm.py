"""The warm grading process: many submissions through one process, each graded on its own, and a process that
dies is replaced rather than taking the batch with it."""

import json
import os
import signal

import pytest

from conftest import ROOT, course_copy
from grader.batch.warm import WarmGrader, WarmGraderDied

# end to end: every test here grades in a sandbox (`pytest -m "not slow"` leaves them out)
pytestmark = pytest.mark.slow

LIMIT_S = 120


@pytest.fixture(scope="module")
def course_dir(tmp_path_factory):
    return course_copy(tmp_path_factory.mktemp("course"), ["heads"])


def submission(folder, source: str):
    (folder / "heads").mkdir(parents=True)
    (folder / "heads" / "heads.py").write_text(source)
    return folder


def percent(reply: dict) -> float:
    return json.loads(reply["files"]["report.json"])["percent"]


@pytest.fixture
def warm(course_dir):
    grader = WarmGrader(course_dir, "strict")
    yield grader
    grader.close()


def test_submissions_in_flight_together_each_get_their_own_report(warm, tmp_path):
    from concurrent.futures import ThreadPoolExecutor

    correct = submission(tmp_path / "correct", (ROOT / "solutions" / "heads" / "heads.py").read_text())
    wrong = submission(tmp_path / "wrong", "def split_heads(x, n):\n    return x\n")
    with ThreadPoolExecutor(2) as pool:
        replies = list(pool.map(lambda s: warm.grade(s, ["heads"], "en", LIMIT_S), [correct, wrong, correct]))
    assert [percent(r) for r in replies] == [100, 0, 100]
    assert {json.loads(r["files"]["report.json"])["submission"] for r in replies} == {"correct", "wrong"}


def test_two_slots_grade_submissions_in_flight_each_on_its_own(course_dir, tmp_path):
    """One process with two sandboxes at a time (a batch's --jobs 2): replies may come in any order, each to its
    own request, and every submission gets its own report."""
    from concurrent.futures import ThreadPoolExecutor

    correct = submission(tmp_path / "correct", (ROOT / "solutions" / "heads" / "heads.py").read_text())
    wrong = submission(tmp_path / "wrong", "def split_heads(x, n):\n    return x\n")
    grader = WarmGrader(course_dir, "strict", slots=2)
    try:
        with ThreadPoolExecutor(4) as pool:
            replies = list(pool.map(lambda s: grader.grade(s, ["heads"], "en", LIMIT_S),
                                    [correct, wrong, wrong, correct, correct]))
    finally:
        grader.close()
    assert [percent(r) for r in replies] == [100, 0, 0, 100, 100]
    assert [json.loads(r["files"]["report.json"])["submission"] for r in replies] == [
        "correct", "wrong", "wrong", "correct", "correct"]
    assert grader._proc is None   # closed: told to end, it ended and was waited for


def test_a_killed_process_is_replaced_for_the_next_submission(warm, tmp_path):
    correct = submission(tmp_path / "correct", (ROOT / "solutions" / "heads" / "heads.py").read_text())
    assert percent(warm.grade(correct, ["heads"], "en", LIMIT_S)) == 100
    os.kill(warm._proc.pid, signal.SIGKILL)
    warm._proc.wait()
    assert percent(warm.grade(correct, ["heads"], "en", LIMIT_S)) == 100


def test_a_sandbox_the_machine_lacks_is_said_at_start(course_dir, monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")   # no unshare: the strict sandbox is unavailable
    grader = WarmGrader(course_dir, "strict")
    with pytest.raises(WarmGraderDied, match="strict sandbox is unavailable"):
        grader.grade(course_dir, ["heads"], "en", LIMIT_S)
