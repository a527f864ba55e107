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


@pytest.mark.slow
def test_only_the_requested_formats_are_written(exported):
    # observed.json: what `grader grade --rejudge` judges again
    assert sorted(p.name for p in exported.iterdir() if p.suffix in (".json", ".md", ".xml", ".html")) == [
        "junit.xml", "observed.json", "report.json", "results.json", "scorecard.md", "step-summary.md"]


@pytest.mark.slow
def test_gradescope_results_follow_the_published_fields(exported):
    results = json.loads((exported / "results.json").read_text())
    report = json.loads((exported / "report.json").read_text())
    assert isinstance(results["score"], (int, float)) and results["score"] == report["score"]
    assert isinstance(results["execution_time"], (int, float))
    criteria = [c for e in report["exercises"] for c in e["criteria"]]
    assert len(results["tests"]) == len(criteria)
    for test, c in zip(results["tests"], criteria, strict=True):
        assert set(test) >= {"name", "number", "score", "max_score", "status", "output", "visibility"}
        assert test["status"] in ("passed", "failed")
        assert test["score"] == c["points"] and test["max_score"] == c["max_points"]
        assert (test["status"] == "passed") == (c["status"] == "passed")
        assert test["visibility"] in ("hidden", "after_due_date", "after_published", "visible")
    assert sum(t["score"] for t in results["tests"]) == pytest.approx(results["score"])


@pytest.mark.slow
def test_junit_parses_with_one_case_per_criterion(exported):
    root = ET.parse(exported / "junit.xml").getroot()
    report = json.loads((exported / "report.json").read_text())
    cases = root.findall("./testsuite/testcase")
    assert len(cases) == sum(len(e["criteria"]) for e in report["exercises"])
    assert len([case for suite in JUnitXml.fromfile(str(exported / "junit.xml")) for case in suite]) == len(cases)
    failed = [c for e in report["exercises"] for c in e["criteria"] if c["status"] == "failed"]
    assert int(root.get("failures")) == len(failed) == len(root.findall("./testsuite/testcase/failure"))


@pytest.mark.slow
def test_scorecard_goes_to_the_step_summary(exported):
    assert (exported / "step-summary.md").read_text().strip() == (exported / "scorecard.md").read_text().strip()


# --- the chosen language: every word a student reads in Gradescope and JUnit -------------------------------------

FAILING_ZH = "logits 的形状是 [2, 5]；应为 [2, 5, 11] = [B, T, V]"
FAILING_EN = "logits have shape [2, 5]; expected [2, 5, 11] = [B, T, V]"


def zh_report():
    """A report with one passing and one failing criterion, each message in both languages."""
    from grader.course import ExerciseConfig
    from grader.worker.protocol import Limits
    from grader.judge.criterion import CriterionMeta
    from grader.judge.session import Outcome
    from grader.report.build import exercise_result
    from grader.report.model import SCHEMA_VERSION, Report

    ex = ExerciseConfig(id="transformer_lm", file="model.py", title_en="LM", title_zh="语言模型",
                        limits=Limits(timeout_s=10, memory_mb=2048, output_kb=64), forbidden=(),
                        points={"ids": 1.0, "logits_shape": 2.0})
    ids = CriterionMeta(id="ids", kind="values", title={"en": "ids are read", "zh": "读取 ids"},
                        hint={"en": "read the ids", "zh": "读取 ids"})
    logits = CriterionMeta(id="logits_shape", kind="shape", title={"en": "Logits shape", "zh": "logits 的形状"},
                           hint={"en": "the head maps C to V", "zh": "输出头把 C 映射到 V"})
    result = exercise_result(ex, [Outcome(ids, "passed", {"en": "ids read", "zh": "已读取 ids"}, {}),
                                  Outcome(logits, "failed", {"en": FAILING_EN, "zh": FAILING_ZH}, {})], {})
    return Report(schema_version=SCHEMA_VERSION, submission="s", course="c", score=result.score,
                  max_score=result.max_score, percent=round(100 * result.score / result.max_score, 2),
                  sandbox={"level": "strict", "layers": {}, "note": ""}, grader_version="0.1.0", torch_version="2",
                  started_at="2026-01-01T00:00:00+00:00", duration_s=1.0, exercises=[result])


def test_gradescope_in_chinese_holds_the_chinese_message_of_a_failing_criterion():
    from grader.render.exports import render_gradescope

    results = json.loads(render_gradescope(zh_report(), "zh"))
    failing = next(test for test in results["tests"] if test["status"] == "failed")
    assert failing["name"] == "transformer_lm: logits 的形状"
    assert failing["output"] == f"[未通过] {FAILING_ZH}\n排查方向：输出头把 C 映射到 V"
    assert next(test for test in results["tests"] if test["status"] == "passed")["output"] == "已读取 ids"
    # the exercise, every criterion of it shown, with its status: some points is partial
    assert results["output"].splitlines() == ["得分：1 / 3（33.33%）。", "transformer_lm 1/3 部分得分", "沙箱：strict"]
    assert FAILING_EN not in json.dumps(results, ensure_ascii=False)


def test_junit_in_chinese_holds_the_chinese_message_of_a_failing_criterion(tmp_path):
    from junitparser import Failure

    from grader.render.exports import render_junit

    (tmp_path / "junit.xml").write_text(render_junit(zh_report(), "zh"), encoding="utf-8")
    cases = {case.name: case for suite in JUnitXml.fromfile(str(tmp_path / "junit.xml")) for case in suite}
    [failure] = [r for r in cases["logits_shape"].result if isinstance(r, Failure)]
    assert failure.message == FAILING_ZH and failure.text == "输出头把 C 映射到 V" and failure.type == "failed"
    case = ET.parse(tmp_path / "junit.xml").getroot().find("./testsuite/testcase[@name='logits_shape']")
    properties = {p.get("name"): p.get("value") for p in case.iter("property")}
    assert properties["title"] == "logits 的形状" and properties["status"] == "未通过" and properties["kind"] == "形状"
    assert cases["ids"].is_passed
    assert FAILING_EN not in (tmp_path / "junit.xml").read_text(encoding="utf-8")


@pytest.mark.slow
def test_grade_lang_zh_writes_gradescope_and_junit_in_chinese(make_submission, grade, course):
    """End to end: `grade --lang zh` reaches both exports. Calling the forbidden F.embedding fails the `api`
    criterion, whose message is the grader's own sentence."""
    source = course.solution(course.exercise("embedding")).read_text()
    assert "self.weight[ids.long()]" in source
    cheat = source.replace("self.weight[ids.long()]", "torch.nn.functional.embedding(ids.long(), self.weight)")
    graded = grade(make_submission({"embedding": cheat}), "--exercise", "embedding", "--lang", "zh",
                   "--format", "json,md,gradescope,junit")
    assert graded.returncode == 0, graded.stderr
    api = graded.criterion("embedding", "no_forbidden_api")
    assert api["status"] == "failed" and api["message"]["zh"].startswith("你的代码调用了禁用的 `")
    results = json.loads((graded.out / "results.json").read_text())
    failing = next(test for test in results["tests"] if test["name"] == f"embedding: {api['title']['zh']}")
    assert failing["output"].startswith(f"[未通过] {api['message']['zh']}")
    cases = {case.name: case for suite in JUnitXml.fromfile(str(graded.out / "junit.xml")) for case in suite}
    assert cases["no_forbidden_api"].result[0].message == api["message"]["zh"]
    card = (graded.out / "scorecard.md").read_text()
    assert card.startswith("### 评分报告：") and "❌ 未通过" in card and "embedding\\.py" in card
    assert "评分项" in graded.stdout and "总分" in graded.stdout


WEAK_SPOTS = ("weaker than strict (/root/.pyenv/versions/3.12.4/bin/python3.12 is not readable by other users): "
              "student code runs as a uid of its own and can read what every user can read (keep hidden files "
              "root-only), and reach the network")


def test_gradescope_shows_students_the_sandbox_level_and_tells_the_instructor_its_weak_spots():
    """results.json's top-level output is what students read; the autograder's stdout (hidden from them by
    `stdout_visibility`) is the instructor's, and holds why the level is not stricter and what it lacks."""
    from dataclasses import replace

    from grader.classroom.gradescope import instructor_lines
    from grader.render.exports import render_gradescope

    sandbox = {"level": "basic", "layers": {"process": True, "network_namespace": False, "pid_namespace": False},
               "note": WEAK_SPOTS}
    report = replace(zh_report(), sandbox=sandbox)
    results = json.loads(render_gradescope(report, "en"))
    assert results["output"].splitlines()[-1] == "Sandbox: basic"
    shown = json.dumps(results)
    assert not any(word in shown for word in ("weaker", "pyenv", "readable", "network")), results["output"]
    assert results["stdout_visibility"] == "hidden"
    told = instructor_lines(sandbox)
    assert told[0] == "Sandbox: basic" and WEAK_SPOTS in told[1]
    assert told[2] == "Sandbox layers missing here: network_namespace, pid_namespace"
    assert instructor_lines(sandbox, "zh")[0] == "沙箱：basic"
