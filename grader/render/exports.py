"""Exports of the one report model for other systems: Gradescope's results.json and JUnit XML."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

from grader.report.model import Report

# Gradescope's test statuses are only "passed" and "failed"; ours keep their detail in the output text.
GRADESCOPE_STATUS = {"passed": "passed"}


def render_gradescope(report: Report, lang: str = "en") -> str:
    """Gradescope's results.json: score, execution_time (a number), one test per criterion."""
    tests = []
    for i, ex in enumerate(report.exercises, start=1):
        for j, c in enumerate(ex.criteria, start=1):
            output = c.message if c.status == "passed" else f"[{c.status}] {c.message}\n{c.hint[lang]}"
            tests.append({
                "name": f"{ex.id}: {c.title[lang]}",
                "number": f"{i}.{j}",
                "score": c.points,
                "max_score": c.max_points,
                "status": GRADESCOPE_STATUS.get(c.status, "failed"),
                "output": output,
                "tags": [ex.id, c.kind],
                "visibility": "visible",
            })
    results = {
        "score": report.score,
        "execution_time": report.duration_s,
        "output": f"{report.score:g} / {report.max_score:g} ({report.percent:g}%), sandbox {report.sandbox['level']}",
        "visibility": "visible",
        "stdout_visibility": "hidden",
        "tests": tests,
    }
    return json.dumps(results, indent=2, ensure_ascii=False) + "\n"


def render_junit(report: Report, lang: str = "en") -> str:
    """One <testsuite> per exercise, one <testcase> per criterion; failed -> <failure>, error/crash/timeout -> <error>,
    not attempted/blocked -> <skipped>."""
    every = [c for e in report.exercises for c in e.criteria]
    root = ET.Element("testsuites", name=f"grader {report.submission}", tests=str(len(every)),
                      failures=str(sum(c.status == "failed" for c in every)),
                      errors=str(sum(c.status in ("error", "timeout", "crashed") for c in every)),
                      time=f"{report.duration_s:.3f}")
    for ex in report.exercises:
        suite = ET.SubElement(root, "testsuite", name=ex.id, tests=str(len(ex.criteria)),
                              failures=str(sum(c.status == "failed" for c in ex.criteria)),
                              errors=str(sum(c.status in ("error", "timeout", "crashed") for c in ex.criteria)),
                              skipped=str(sum(c.status in ("not_attempted", "blocked") for c in ex.criteria)))
        for c in ex.criteria:
            case = ET.SubElement(suite, "testcase", classname=f"{ex.id}.{c.kind}", name=c.id)
            ET.SubElement(case, "properties").extend([
                ET.Element("property", name="points", value=f"{c.points:g}"),
                ET.Element("property", name="max_points", value=f"{c.max_points:g}"),
                ET.Element("property", name="title", value=c.title[lang]),
            ])
            if c.status == "failed":
                ET.SubElement(case, "failure", message=c.message, type=c.status).text = c.hint[lang]
            elif c.status in ("error", "timeout", "crashed"):
                ET.SubElement(case, "error", message=c.message, type=c.status).text = c.hint[lang]
            elif c.status in ("not_attempted", "blocked"):
                ET.SubElement(case, "skipped", message=c.message)
    ET.indent(root)
    return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"
