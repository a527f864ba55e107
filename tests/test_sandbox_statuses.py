"""A crash, a timeout and an untouched stub each get their own status and a message in words,
and the other exercises of the same submission are graded as if nothing happened."""

import os
import textwrap

import pytest

from conftest import ROOT, course_copy, run_grader
from grader.sandbox.supervisor import GRACE_SECONDS

# end to end: every test here grades in a sandbox (`pytest -m "not slow"` leaves them out)
pytestmark = pytest.mark.slow

# decoder_block's own timeout where the time limit is what a test is about. Its probes before the hanging one must
# still finish inside it and keep their credit: they take 0.05 s of CPU and 0.11 s of wall time at a load average
# of 13 on 2 cores, so 10 s leaves them ~90 times that, on a machine busy enough to stretch every process's wall
# time as much. Every other exercise, and decoder_block in the other tests, keeps the course's timeout.
TIMEOUT_S = 10


@pytest.fixture(scope="module")
def timed_course(tmp_path_factory):
    """The course with a short timeout on decoder_block alone, so that a hanging submission costs seconds."""
    return course_copy(tmp_path_factory.mktemp("course"), timeout_s={"decoder_block": TIMEOUT_S})


def block_with(body: str) -> str:
    """The reference block.py with count_block_parameters replaced by `body`."""
    source = (ROOT / "solutions" / "decoder_block" / "block.py").read_text()
    start = source.index("def count_block_parameters")
    end = source.index("\n\n\n", start)
    replacement = ("def count_block_parameters(d_model, n_heads, d_ff):\n"
                   + textwrap.indent(textwrap.dedent(body), "    "))
    return source[:start] + replacement + source[end:]


def other_exercise(course):
    return next(e for e in course.exercises if e.id != "decoder_block")


def grade_with(course_root, tmp_path, make_submission, course, block_source: str):
    other = other_exercise(course)
    submission = make_submission({"decoder_block": block_source, other.id: course.solution(other)})
    out = tmp_path / "out"
    done = run_grader("--course", str(course_root), "grade", str(submission), "--out", str(out),
                      "--exercise", "decoder_block", "--exercise", other.id)
    assert done.returncode == 0, done.stderr
    import json

    report = json.loads((out / "report.json").read_text())
    exercises = {e["id"]: e for e in report["exercises"]}
    assert exercises[other.id]["status"] == "passed", "a neighbour's failure touched another exercise"
    return exercises["decoder_block"]


def criterion(exercise, cid):
    return next(c for c in exercise["criteria"] if c["id"] == cid)


def test_endless_loop_is_a_timeout_with_partial_credit(timed_course, tmp_path, make_submission, course):
    exercise = grade_with(timed_course, tmp_path, make_submission, course, block_with("while True:\n    pass\n"))
    assert exercise["status"] == "timeout"
    counted = criterion(exercise, "parameter_count_small")
    assert counted["status"] == "timeout"
    assert f"after {TIMEOUT_S} s of" in counted["message"]["en"] and "parameter_count" in counted["message"]["en"]
    assert f"{TIMEOUT_S:g} 秒" in counted["message"]["zh"] and "parameter_count" in counted["message"]["zh"]
    assert criterion(exercise, "causality")["status"] == "passed", "probes that finished keep their credit"
    # The worker ended it at its limit: had it not, the supervisor would have, only after its grace period.
    assert TIMEOUT_S <= exercise["run"]["wall_s"] < TIMEOUT_S + GRACE_SECONDS, exercise["run"]


def test_sleep_past_the_timeout_is_killed_on_wall_time(timed_course, tmp_path, make_submission, course):
    exercise = grade_with(timed_course, tmp_path, make_submission, course,
                          block_with("import time\ntime.sleep(3600)\n"))
    assert exercise["status"] == "timeout"
    assert f"killed after {TIMEOUT_S} s of wall time" in criterion(exercise, "parameter_count_small")["message"]["en"]


def test_os_exit_in_a_call_is_a_crash(tmp_path, make_submission, course):
    exercise = grade_with(ROOT, tmp_path, make_submission, course, block_with("import os\nos._exit(0)\n"))
    assert exercise["status"] == "crashed"
    message = criterion(exercise, "parameter_count_small")["message"]
    assert "exit status 0" in message["en"] and "os._exit" in message["en"]
    assert "退出状态 0" in message["zh"] and "os._exit" in message["zh"]


def test_segfault_is_a_crash_named_by_its_signal(tmp_path, make_submission, course):
    exercise = grade_with(ROOT, tmp_path, make_submission, course,
                             block_with("import ctypes\nctypes.string_at(0)\n"))
    assert exercise["status"] == "crashed"
    assert all("SIGSEGV" in said for said in criterion(exercise, "parameter_count_small")["message"].values())


def test_not_implemented_part_is_not_attempted_and_the_rest_counts(tmp_path, make_submission, course):
    source = block_with("raise NotImplementedError('decoder_block: implement count_block_parameters')\n")
    exercise = grade_with(ROOT, tmp_path, make_submission, course, source)
    assert criterion(exercise, "parameter_count_small")["status"] == "not_attempted"
    assert criterion(exercise, "causality")["status"] == "passed"
    assert exercise["status"] == "partial" and 0 < exercise["score"] < exercise["max_score"]


def test_syntax_error_is_an_error_naming_the_line(tmp_path, make_submission, course):
    exercise = grade_with(ROOT, tmp_path, make_submission, course, "import torch\ndef broken(:\n")
    assert exercise["status"] == "error"
    assert "SyntaxError" in exercise["message"]["en"] and "line 2" in exercise["message"]["en"]


def test_sys_exit_at_import_is_an_error_not_a_pass(tmp_path, make_submission, course):
    exercise = grade_with(ROOT, tmp_path, make_submission, course, "import sys\nsys.exit(0)\n")
    assert exercise["status"] == "error"
    assert exercise["score"] == 0
    assert "SystemExit" in exercise["message"]["en"]


def test_basic_sandbox_is_recorded_with_its_weaker_layers(tmp_path):
    out = tmp_path / "out"
    done = run_grader("grade", str(ROOT / "solutions"), "--exercise", "decoder_block", "--sandbox", "basic",
                      "--out", str(out))
    assert done.returncode == 0, done.stderr
    import json

    sandbox = json.loads((out / "report.json").read_text())["sandbox"]
    assert sandbox["level"] == "basic"
    layers = sandbox["layers"]
    assert layers["pid_namespace"] is False and layers["allow_listed_root"] is False and layers["rlimits"] is True
    assert layers["own_uid"] is (os.geteuid() == 0)   # as root, student code still runs as a uid of its own
    assert sandbox["note"]
