"""The command line: arguments that once slipped through, the help text, and how a grading ends (exit status).

Exit statuses are tested on `publish`, the part of `grader grade` after grading, with a report built by hand:
no sandbox, no torch.
"""

import json
import subprocess
import sys

import jsonschema
import pytest
from hostile_report import hostile_report

from conftest import ROOT
from grader.cli import EXIT_BELOW_THRESHOLD, EXIT_INCOMPLETE, EXIT_OK, build_parser, main, publish
from grader.report.model import SCHEMA_PATH

TEMPLATES = ROOT / "templates"


def usage_error(argv: list[str], capsys) -> str:
    """The one-line argparse error `argv` gets, after checking it exits with status 2."""
    with pytest.raises(SystemExit) as stopped:
        build_parser().parse_args(argv)
    assert stopped.value.code == 2
    return capsys.readouterr().err.strip().splitlines()[-1]


@pytest.mark.parametrize("value", ["nan", "NaN", "inf", "-inf", "150", "100.01", "-5", "sixty"])
def test_fail_under_outside_0_to_100_is_a_usage_error(value, capsys):
    assert "--fail-under" in usage_error(["grade", "--fail-under", value], capsys)


@pytest.mark.parametrize("value", ["0", "60.5", "100"])
def test_fail_under_within_0_to_100_is_accepted(value):
    assert build_parser().parse_args(["grade", "--fail-under", value]).fail_under == float(value)


@pytest.mark.parametrize("value", ["0", "-1", "1.5", "two"])
def test_jobs_below_one_is_a_usage_error(value, capsys):
    assert "--jobs" in usage_error(["batch", "class", "--out", "book", "--jobs", value], capsys)


def test_one_job_is_accepted():
    assert build_parser().parse_args(["batch", "class", "--out", "book", "--jobs", "1"]).jobs == 1


def test_fail_under_nan_exits_2_from_the_command():
    done = subprocess.run([sys.executable, "-m", "grader", "grade", "--fail-under", "nan"], capture_output=True,
                          text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 2
    assert "Traceback" not in done.stderr and "--fail-under" in done.stderr.strip().splitlines()[-1]


def test_a_reader_that_goes_away_ends_the_command_as_a_pipe_writer_without_a_traceback():
    """`grader validate | head -0`: the pipe is closed before the command writes; it ends with 128 + SIGPIPE and
    says nothing on stderr, as a pipe's writer does. The same command with its reader there says it (the control)."""
    import os
    import signal

    command = [sys.executable, "-m", "grader", "validate"]
    whole = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert whole.returncode == 0 and "valid" in whole.stdout, whole.stderr
    reader, writer = os.pipe()
    os.close(reader)   # nobody reads: the first write meets a closed pipe
    try:
        done = subprocess.run(command, stdout=writer, stderr=subprocess.PIPE, text=True, cwd=ROOT, timeout=120)
    finally:
        os.close(writer)
    assert done.returncode == 128 + signal.SIGPIPE and "Traceback" not in done.stderr, done.stderr


def test_help_lists_no_hidden_command(capsys):
    with pytest.raises(SystemExit) as stopped:
        main(["--help"])
    assert stopped.value.code == 0
    text = capsys.readouterr().out
    assert "grade" in text and "selftest" in text
    assert "==SUPPRESS==" not in text and "gradescope-run" not in text


def test_the_hidden_command_still_parses():
    assert build_parser().parse_args(["gradescope-run", "--root", "/tmp/x"]).command == "gradescope-run"


def test_unwritable_step_summary_is_a_warning_and_grading_still_succeeds(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(tmp_path))  # a folder: even root cannot append to it
    status = publish(hostile_report(), tmp_path / "out", TEMPLATES, "en", ("json", "md"), None)
    err = capsys.readouterr().err.strip().splitlines()
    assert status == EXIT_OK
    assert len(err) == 1 and err[0].startswith("grader: warning: GITHUB_STEP_SUMMARY not written")
    assert (tmp_path / "out" / "scorecard.md").is_file()


def test_step_summary_gets_the_scorecard(tmp_path, monkeypatch):
    summary = tmp_path / "summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    publish(hostile_report(), tmp_path / "out", TEMPLATES, "en", ("md",), None)
    assert summary.read_text() == (tmp_path / "out" / "scorecard.md").read_text() + "\n"


def test_below_fail_under_exits_1(tmp_path, monkeypatch):
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    assert publish(hostile_report(), tmp_path, TEMPLATES, "en", ("json",), 50.0) == EXIT_BELOW_THRESHOLD


def test_a_grader_error_exits_3_with_one_line_naming_the_exercise(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    status = publish(hostile_report("grader_error"), tmp_path, TEMPLATES, "en", ("json", "html", "md"), None)
    err = capsys.readouterr().err.strip().splitlines()
    assert status == EXIT_INCOMPLETE
    assert len(err) == 1 and err[0].startswith("grading incomplete: rope: ") and "\x1b" not in err[0]


def test_a_grader_error_still_writes_every_report(tmp_path, monkeypatch):
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    publish(hostile_report("grader_error"), tmp_path, TEMPLATES, "en", ("json", "html", "md"), None)
    report = json.loads((tmp_path / "report.json").read_text())
    jsonschema.validate(report, json.loads(SCHEMA_PATH.read_text()))
    assert [e["status"] for e in report["exercises"]] == ["error", "grader_error"]
    assert (tmp_path / "report.html").is_file() and (tmp_path / "scorecard.md").is_file()


def test_a_grader_error_is_reported_even_below_fail_under(tmp_path, monkeypatch):
    """The score is not the student's yet: --fail-under has nothing to judge."""
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    assert publish(hostile_report("grader_error"), tmp_path, TEMPLATES, "en", ("json",), 50.0) == EXIT_INCOMPLETE


@pytest.mark.parametrize("argv", [["grade"], ["batch", "class", "--out", "book"], ["check"], ["gradescope", "a.zip"],
                                  ["gradescope-run"],
                                  ["classroom", "sync", "--org", "o", "--prefix", "p", "--out", "b"],
                                  ["classroom", "publish", "--org", "o", "--prefix", "p", "--out", "b"],
                                  ["classroom", "reports", "--out", "b", "--to", "pages"]],
                         ids=lambda argv: " ".join(argv[:2]))
def test_every_command_that_writes_for_students_takes_lang(argv):
    parser = build_parser()
    assert parser.parse_args([*argv, "--lang", "zh"]).lang == "zh"
    assert parser.parse_args(argv).lang == "en"
