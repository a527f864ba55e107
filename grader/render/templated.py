"""HTML report and Markdown scorecard, rendered with Jinja2 from the course's `templates/` folder."""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from pathlib import Path

import jinja2
from markupsafe import Markup, escape

from grader.render.labels import CLASS_LABELS, LABELS, STATUS_MARK
from grader.render.pictures import curve_pictures, failure_pictures
from grader.render.safe_text import html_text, markdown_text
from grader.report.model import Report


@functools.cache
def _environment(templates: Path, safe_text: Callable[[str], str], autoescape: bool) -> jinja2.Environment:
    """Every string a template prints passes through `safe_text` (the format's), so no field, present or
    added later, reaches the page raw; markup the renderer built itself (Markup) is left as it is. One environment
    per folder and format, kept: it compiles each template once (a template changed on disk is compiled again), where
    a fresh one would compile it for every report."""
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(templates)), autoescape=autoescape,
                             undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True,
                             keep_trailing_newline=True, finalize=lambda value: _printed(value, safe_text))
    env.filters["points"] = lambda x: f"{x:g}"
    env.filters["tojson_compact"] = lambda x: json.dumps(x, ensure_ascii=False)
    env.filters["breakable"] = breakable
    env.filters["excerpt"] = excerpt
    env.globals["curve_pictures"] = curve_pictures
    env.globals["failure_pictures"] = failure_pictures
    env.globals["override_of"] = override_of
    env.globals["exercise_points"] = exercise_points
    return env


def exercise_points(report: Report, ex) -> tuple[float, float, float]:
    """An exercise's points as its line shows them: (what the criteria and the graded written answers gave, what the
    grade makes of it after the instructor's corrections, the most it could be). The written answers count once the
    grade says they do (reviewing has begun: grader.batch.grades)."""
    from grader.report.model import GRADED

    grade = report.grade or {}
    counted = grade.get("written") is not None
    base = round(ex.score + sum(a.points for a in ex.answers if a.status == GRADED), 4)
    most = round(ex.max_score + (sum(a.max_points for a in ex.answers) if counted else 0.0), 4)
    return base, grade.get("exercises", {}).get(ex.id, base), most


def override_of(report: Report, exercise: str, criterion: str | None = None) -> dict | None:
    """The applied override of a criterion (or of an exercise, `criterion` None) the report's grade holds, if any."""
    for o in (report.grade or {}).get("overrides", []):
        if o["applied"] and o["exercise"] == exercise and o["criterion"] == criterion:
            return o
    return None


EXCERPT_CHARS = 200   # of a written answer in a table cell (the scorecard): the report shows it whole


def excerpt(text: str) -> str:
    """The start of a student's text, for one table cell; still text, escaped when printed."""
    return text if len(text) <= EXCERPT_CHARS else text[:EXCERPT_CHARS].rstrip() + "…"


def breakable(identifier: str) -> Markup:
    """An id (`tied_output_weights`) that a narrow column may wrap before each underscore, and nowhere else."""
    return Markup("<wbr>_").join(escape(html_text(part)) for part in identifier.split("_"))


def _printed(value, safe_text: Callable[[str], str]):
    return safe_text(value) if isinstance(value, str) and not isinstance(value, Markup) else value


def compile_report_templates(templates: Path) -> None:
    """Compile report.html's and scorecard.md's templates now (each process compiles them once, at its first use
    otherwise): a re-judging's report processes do it while the judging server starts, not in the re-judging's
    busiest stretch."""
    _environment(templates, html_text, autoescape=True).get_template("report.html.j2")
    _environment(templates, markdown_text, autoescape=False).get_template("scorecard.md.j2")


def render_html(report: Report, templates: Path, lang: str) -> str:
    env = _environment(templates, html_text, autoescape=True)
    return env.get_template("report.html.j2").render(report=report, lang=lang, t=LABELS[lang], mark=STATUS_MARK)


def render_markdown(report: Report, templates: Path, lang: str) -> str:
    env = _environment(templates, markdown_text, autoescape=False)
    # the labels are the grader's own words: printed as written (escaping would turn ": " into "\: ")
    labels = {key: Markup(word) for key, word in LABELS[lang].items()}
    return env.get_template("scorecard.md.j2").render(report=report, lang=lang, t=labels, mark=STATUS_MARK)


def render_class(summary, course, templates: Path, lang: str) -> str:
    """class.html from a gradebook.ClassSummary: every number is the summary's, the page only lays them out."""
    env = _environment(templates, html_text, autoescape=True)
    return env.get_template("class.html.j2").render(summary=summary, course=course, lang=lang, t=CLASS_LABELS[lang])
