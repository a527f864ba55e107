"""Exports from the one report model: Gradescope results.json, JUnit XML, the CI step summary."""

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest
from junitparser import JUnitXml

from conftest import ROOT


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    out = tmp_path_factory.mktemp("exports")
    summary = out / "step-summary.md"
    env = {**os.environ, "GITHUB_STEP_SUMMARY": str(summary)}
    # one exercise, and one the sample fails in part: every status path of the exports, in seconds
    done = subprocess.run([sys.executable, "-m", "grader", "grade", str(ROOT / "examples" / "submissions" / "sample"),
                           "--exercise", "attention", "--out", str(out), "--format", "json,md,gradescope,junit"],
                          capture_output=True, text=True, cwd=ROOT, env=env, timeout=600)
    assert done.returncode == 0, done.stderr
    return out


def test_only_the_requested_formats_are_written(exported):
    assert sorted(p.name for p in exported.iterdir() if p.suffix in (".json", ".md", ".xml", ".html")) == [
        "junit.xml", "report.json", "results.json", "scorecard.md", "step-summary.md"]


def test_gradescope_results_follow_the_published_fields(exported):
    results = json.loads((exported / "results.json").read_text())
    report = json.loads((exported / "report.json").read_text())
    assert isinstance(results["score"], (int, float)) and results["score"] == report["score"]
    assert isinstance(results["execution_time"], (int, float))
    criteria = [c for e in report["exercises"] for c in e["criteria"]]
    assert len(results["tests"]) == len(criteria)
    for test, c in zip(results["tests"], criteria):
        assert set(test) >= {"name", "number", "score", "max_score", "status", "output", "visibility"}
        assert test["status"] in ("passed", "failed")
        assert test["score"] == c["points"] and test["max_score"] == c["max_points"]
        assert (test["status"] == "passed") == (c["status"] == "passed")
        assert test["visibility"] in ("hidden", "after_due_date", "after_published", "visible")
    assert sum(t["score"] for t in results["tests"]) == pytest.approx(results["score"])


def test_junit_parses_with_one_case_per_criterion(exported):
    root = ET.parse(exported / "junit.xml").getroot()
    report = json.loads((exported / "report.json").read_text())
    cases = root.findall("./testsuite/testcase")
    assert len(cases) == sum(len(e["criteria"]) for e in report["exercises"])
    assert len([case for suite in JUnitXml.fromfile(str(exported / "junit.xml")) for case in suite]) == len(cases)
    failed = [c for e in report["exercises"] for c in e["criteria"] if c["status"] == "failed"]
    assert int(root.get("failures")) == len(failed) == len(root.findall("./testsuite/testcase/failure"))


def test_scorecard_goes_to_the_step_summary(exported):
    assert (exported / "step-summary.md").read_text().strip() == (exported / "scorecard.md").read_text().strip()
