"""A student's report read in a minute: an exercise with some of its points is `partial` (not `failed`, which is an
exercise tried for no point) in every renderer; an exercise not started is one line, and the parts of a started
exercise not written yet are one row, without the hints meant for code that exists."""

import json
import xml.etree.ElementTree as ET

import jsonschema
import pytest

from browser import parse_dom, text_of, with_class
from conftest import ROOT
from grader.course import ExerciseConfig
from grader.judge.criterion import CriterionMeta
from grader.judge.session import Outcome
from grader.render.exports import render_gradescope, render_junit
from grader.render.labels import LABELS, STATUS_MARK
from grader.render.safe_text import markdown_text
from grader.render.templated import render_html, render_markdown
from grader.render.terminal import render_table
from grader.report.build import exercise_result, stored_report
from grader.report.model import SCHEMA_PATH, SCHEMA_VERSION, Report
from grader.worker.protocol import Limits

TEMPLATES = ROOT / "templates"
HINT = {"en": "HINT-{} look here", "zh": "HINT-{} 看这里"}


def meta(cid: str) -> CriterionMeta:
    return CriterionMeta(id=cid, kind="values", title={"en": f"title {cid}", "zh": f"标题 {cid}"},
                         hint={lang: words.format(cid) for lang, words in HINT.items()})


def said(en: str) -> dict:
    return {"en": en, "zh": f"中文 {en}"}


def exercise(eid: str, outcomes: list[tuple[str, str, str]]):
    """An exercise of one point per criterion, each criterion (id, status, message)."""
    config = ExerciseConfig(id=eid, file=f"{eid}.py", title_en=f"Exercise {eid}", title_zh=f"练习 {eid}",
                            limits=Limits(timeout_s=10, memory_mb=2048, output_kb=64), forbidden=(),
                            points={c: 1.0 for c, _, _ in outcomes})
    return exercise_result(config, [Outcome(meta(c), status, said(message), {}) for c, status, message in outcomes],
                           {})


def glance_report() -> Report:
    """`some` 1/2 (partial), `none` 0/2 tried (failed), `stub` not started, `half` 2/4 with two parts not written."""
    exercises = [
        exercise("some", [("some_a", "passed", "fine"), ("some_b", "failed", "off by one")]),
        exercise("none", [("none_a", "failed", "wrong"), ("none_b", "error", "raised ValueError")]),
        exercise("stub", [(f"stub_{i}", "not_attempted", "stub/stub.py is the unchanged stub") for i in range(4)]),
        exercise("half", [("half_a", "passed", "fine"), ("half_b", "passed", "fine"),
                          ("half_c", "not_attempted", "`count` raises NotImplementedError"),
                          ("half_d", "not_attempted", "`total` raises NotImplementedError")]),
    ]
    score, max_score = sum(e.score for e in exercises), sum(e.max_score for e in exercises)
    return Report(schema_version=SCHEMA_VERSION, submission="s", course="c", score=score, max_score=max_score,
                  percent=round(100 * score / max_score, 2),
                  sandbox={"level": "strict", "layers": {}, "note": ""},
                  grader_version="0.1.0", torch_version="2", started_at="2026-01-01T00:00:00+00:00", duration_s=1.0,
                  exercises=exercises)


STATUS = {"some": "partial", "none": "failed", "stub": "not_attempted", "half": "partial"}


def test_some_points_is_partial_none_is_failed():
    report = glance_report()
    assert {e.id: e.status for e in report.exercises} == STATUS
    jsonschema.validate(json.loads(report.to_json()), json.loads(SCHEMA_PATH.read_text()))


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_every_renderer_says_partial(lang):
    report = glance_report()
    words = LABELS[lang]
    assert words["partial"] != words["failed"]
    # JSON: the record
    assert {e["id"]: e["status"] for e in json.loads(report.to_json())["exercises"]} == STATUS
    # HTML: the summary's badge and the section's
    dom = parse_dom(render_html(report, TEMPLATES, lang))
    summary = with_class(dom, "table", "summary")[0]
    for row, ex in zip(summary.find("tbody").findall("tr"), report.exercises, strict=True):
        badge = with_class(row, "span", "status")
        assert badge[0].get("class") == f"status {STATUS[ex.id]}" and text_of(badge[0]) == words[STATUS[ex.id]]
    sections = {s.get("id"): s for s in with_class(dom, "section", "exercise")}
    assert text_of(with_class(sections["some"], "span", "partial")[0]) == words["partial"]
    assert text_of(with_class(sections["none"], "span", "failed")[0]) == words["failed"]
    # Markdown: each exercise's row
    rows = {line.split("|")[1].split("**")[1]: line for line in render_markdown(report, TEMPLATES, lang).splitlines()
            if line.startswith("| **")}
    for eid, status in STATUS.items():
        assert f"| {STATUS_MARK[status]} {words[status]} |" in rows[eid]
    # the terminal table: one line per exercise
    lines = {line.split()[0]: line for line in render_table(report, lang).splitlines() if line.startswith("  ")}
    assert f"1/2  {words['partial']}" in lines["some"] and f"0/2  {words['failed']}" in lines["none"]
    # Gradescope: every criterion shown, so each exercise has its line
    output = json.loads(render_gradescope(report, lang))["output"].splitlines()
    assert f"some 1/2 {words['partial']}" in output and f"none 0/2 {words['failed']}" in output
    # JUnit: each suite's properties
    suites = {s.get("name"): s for s in ET.fromstring(render_junit(report, lang)).iter("testsuite")}
    for eid, status in STATUS.items():
        properties = {p.get("name"): p.get("value") for p in suites[eid].find("properties")}
        assert properties["status"] == words[status]
    assert {p.get("name"): p.get("value") for p in suites["half"].find("properties")} == {
        "points": "2", "max_points": "4", "status": words["partial"]}


def test_gradescope_names_no_exercise_with_a_criterion_still_hidden():
    """An exercise's points would give a hidden criterion's away: only exercises shown whole get a line."""
    report = glance_report()
    output = json.loads(render_gradescope(report, "en", lambda e, c, k: "hidden" if c == "some_b" else "visible"))
    lines = output["output"].splitlines()
    assert not any(line.startswith("some ") for line in lines) and "none 0/2 failed" in lines


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_an_exercise_not_started_is_one_line(lang):
    report = glance_report()
    stub = report.exercises[2]
    html = render_html(report, TEMPLATES, lang)
    section = next(s for s in with_class(parse_dom(html), "section", "exercise") if s.get("id") == "stub")
    assert section.find(".//table") is None and len(list(section)) == 1   # its heading, nothing else
    heading = text_of(section)
    assert stub.message[lang] in heading and LABELS[lang]["not_attempted"] in heading
    assert "HINT-stub" not in html and "title stub_0" not in html and "标题 stub_0" not in html
    markdown = render_markdown(report, TEMPLATES, lang).splitlines()
    assert [line for line in markdown if "stub" in line] == [
        f"| **stub** {stub.title[lang]} | | {STATUS_MARK['not_attempted']} {LABELS[lang]['not_attempted']} | "
        f"**0 / 4** | {markdown_text(stub.message[lang])} |"]
    assert len([line for line in render_table(report, lang).splitlines() if "stub" in line]) == 1


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_parts_not_written_yet_are_one_row_and_keep_their_anchors(lang):
    report = glance_report()
    html = render_html(report, TEMPLATES, lang)
    dom = parse_dom(html)
    section = next(s for s in with_class(dom, "section", "exercise") if s.get("id") == "half")
    rows = section.find(".//tbody").findall("tr")
    assert [r.get("id") for r in rows] == ["half--half_a", "half--half_b", None]
    untouched = rows[-1]
    assert "not_attempted" in untouched.get("class").split()
    assert {e.get("id") for e in untouched.iter() if e.get("id")} == {"half--half_c", "half--half_d"}
    text = text_of(untouched)
    assert "`count` raises NotImplementedError" in text and "`total` raises NotImplementedError" in text
    assert "0 / 2" in text and "HINT-half_c" not in html and "HINT-half_d" not in html
    markdown = [line for line in render_markdown(report, TEMPLATES, lang).splitlines() if "half" in line]
    assert len(markdown) == 1 + 2 + 1   # the exercise, its two passed criteria, the parts not written yet


def test_a_report_of_schema_2_reads_back_with_partial():
    """A gradebook's report.json of schema 2.0 (an exercise with some points was `failed`) renders as this grader
    would have written it: rendering it again in another language needs no grading."""
    data = json.loads(glance_report().to_json())
    data["schema_version"], data["seed"] = "2.0", 20261130   # 2.0 and 3.0 recorded the course seed
    for e in data["exercises"]:
        e["status"] = "failed" if e["status"] == "partial" else e["status"]
    report = stored_report(data)
    assert report.schema_version == SCHEMA_VERSION and {e.id: e.status for e in report.exercises} == STATUS
    assert "seed" not in report.to_dict()
    assert stored_report(json.loads(glance_report().to_json())).to_dict() == glance_report().to_dict()
