"""Exports of the one report model for other systems: Gradescope's results.json and JUnit XML."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from collections.abc import Callable, Sequence

from grader.i18n import Text, t
from grader.render.labels import LABELS
from grader.render.safe_text import gradescope_text, junit_text
from grader.report.model import Report
from grader.worker.protocol import Status

# Gradescope's test statuses are only "passed" and "failed"; ours keep their detail in the output text.
GRADESCOPE_STATUS = {Status.PASSED: "passed"}
# JUnit has no status of its own for these: each is an <error> whose type names ours.
JUNIT_ERRORS = (Status.ERROR, Status.TIMEOUT, Status.CRASHED, Status.GRADER_ERROR)


def render_gradescope(report: Report, lang: str = "en", visibility_of: Callable[[str, str, str], str] | None = None,
                      notes: Sequence[Text] = ()) -> str:
    """Gradescope's results.json in `lang`: score, execution_time (a number), one test per criterion, each shown
    as `visibility_of(exercise id, criterion id, kind)` says (default: visible). The top-level output counts the
    points not shown yet without naming their criteria, names the sandbox level (nothing of its weaknesses), and
    adds `notes`."""
    words = LABELS[lang]
    tests = []
    for i, ex in enumerate(report.exercises, start=1):
        for j, c in enumerate(ex.criteria, start=1):
            message = gradescope_text(c.message[lang])
            output = (message if c.status == Status.PASSED
                      else f"[{words[c.status]}] "
                           f"{message}\n{words['hint']}{words['colon']}{gradescope_text(c.hint[lang])}")
            tests.append({
                "name": f"{ex.id}: {c.title[lang]}",
                "number": f"{i}.{j}",
                "score": c.points,
                "max_score": c.max_points,
                "status": GRADESCOPE_STATUS.get(c.status, "failed"),
                "output": output,
                "tags": [ex.id, c.kind],
                "visibility": visibility_of(ex.id, c.id, c.kind) if visibility_of else "visible",
            })
    results = {
        "score": report.final_score,   # after the late penalty, when course.toml's [policy] applies one
        "execution_time": report.duration_s,
        "output": "\n".join([*_gradescope_summary(report, tests, lang),
                              *(gradescope_text(note.render(lang)) for note in notes)]),  # notes name files
        "visibility": "visible",
        "stdout_visibility": "hidden",
        "tests": tests,
    }
    return json.dumps(results, indent=2, ensure_ascii=False) + "\n"


def _gradescope_summary(report: Report, tests: list[dict], lang: str) -> list[str]:
    """The score a student may see now (a total would give the hidden criteria away), each exercise shown whole,
    and the sandbox level."""
    hidden = [test for test in tests if test["visibility"] != "visible"]
    if hidden:
        shown = [test for test in tests if test["visibility"] == "visible"]
        score = t("Visible criteria: {score:g} / {max_score:g} points. {more:g} more points are graded by criteria "
                  "shown later (after the due date or once grades are published).",
                  score=sum(test["score"] for test in shown), max_score=sum(test["max_score"] for test in shown),
                  more=sum(test["max_score"] for test in hidden))
    else:
        score = t("Score: {score:g} / {max_score:g} ({percent:g}%).", score=report.final_score,
                  max_score=report.final_max, percent=report.final_percent)
    # The level only: why it is not stricter, and what student code could reach there, is for the instructor
    # (the autograder's stdout, which results.json keeps hidden from students: see grader.classroom.gradescope).
    words = LABELS[lang]
    late = (report.grade or {}).get("late")   # its penalty is a share of the maximum: no hidden points given away
    lateness = [f"{words['lateness']}{words['colon']}{gradescope_text(late['message'][lang])}"] if late else []
    return [score.render(lang), *lateness, *_gradescope_exercises(report, tests, lang),
            f"{words['sandbox']}{words['colon']}{report.sandbox['level']}"]


def _gradescope_exercises(report: Report, tests: list[dict], lang: str) -> list[str]:
    """One line per exercise whose every criterion is shown now, with its points and status (`partial` apart from
    `failed`): an exercise with a criterion still hidden would give that criterion's points away."""
    words, lines = LABELS[lang], []
    for ex in report.exercises:
        own = [test for test in tests if test["tags"][0] == ex.id]
        if own and all(test["visibility"] == "visible" for test in own):
            lines.append(f"{ex.id} {ex.score:g}/{ex.max_score:g} {words[ex.status]}")
    return lines


def render_junit(report: Report, lang: str = "en") -> str:
    """One <testsuite> per exercise (its points and status as properties), one <testcase> per criterion; failed ->
    <failure>, error/crash/timeout/grader error -> <error>, not attempted/blocked -> <skipped>. Titles, messages,
    hints and the status word in `lang`; types and class names stay the report's ids, which CI tools group by."""
    words = LABELS[lang]
    every = [c for e in report.exercises for c in e.criteria]
    root = ET.Element("testsuites", name=f"grader {junit_text(report.submission)}", tests=str(len(every)),
                      failures=str(sum(c.status == Status.FAILED for c in every)),
                      errors=str(sum(c.status in JUNIT_ERRORS for c in every)),
                      time=f"{report.duration_s:.3f}")
    for ex in report.exercises:
        suite = ET.SubElement(root, "testsuite", name=ex.id, tests=str(len(ex.criteria)),
                              failures=str(sum(c.status == Status.FAILED for c in ex.criteria)),
                              errors=str(sum(c.status in JUNIT_ERRORS for c in ex.criteria)),
                              skipped=str(sum(c.status in (Status.NOT_ATTEMPTED, Status.BLOCKED) for c in ex.criteria)))
        # the exercise's own status (`partial` among them), which no count of its cases says
        ET.SubElement(suite, "properties").extend([
            ET.Element("property", name="points", value=f"{ex.score:g}"),
            ET.Element("property", name="max_points", value=f"{ex.max_score:g}"),
            ET.Element("property", name="status", value=words[ex.status]),
        ])
        for c in ex.criteria:
            case = ET.SubElement(suite, "testcase", classname=f"{ex.id}.{c.kind}", name=c.id)
            ET.SubElement(case, "properties").extend([
                ET.Element("property", name="points", value=f"{c.points:g}"),
                ET.Element("property", name="max_points", value=f"{c.max_points:g}"),
                ET.Element("property", name="title", value=junit_text(c.title[lang])),
                ET.Element("property", name="status", value=words[c.status]),
                ET.Element("property", name="kind", value=words[f"kind_{c.kind}"]),
            ])
            message, hint = junit_text(c.message[lang]), junit_text(c.hint[lang])
            if c.status == Status.FAILED:
                ET.SubElement(case, "failure", message=message, type=c.status).text = hint
            elif c.status in JUNIT_ERRORS:
                ET.SubElement(case, "error", message=message, type=c.status).text = hint
            elif c.status in (Status.NOT_ATTEMPTED, Status.BLOCKED):
                ET.SubElement(case, "skipped", message=message)
    ET.indent(root)
    return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"
