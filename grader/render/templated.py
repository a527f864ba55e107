"""HTML report and Markdown scorecard, rendered with Jinja2 from the course's `templates/` folder."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import jinja2
from markupsafe import Markup

from grader.render.labels import CLASS_LABELS, LABELS, STATUS_MARK
from grader.render.safe_text import html_text, markdown_text
from grader.report.model import Report


def _environment(templates: Path, safe_text: Callable[[str], str], autoescape: bool) -> jinja2.Environment:
    """Every string a template prints passes through `safe_text` (the format's), so no field, present or
    added later, reaches the page raw; markup the renderer built itself (Markup) is left as it is."""
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(templates)), autoescape=autoescape,
                             undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True,
                             keep_trailing_newline=True, finalize=lambda value: _printed(value, safe_text))
    env.filters["points"] = lambda x: f"{x:g}"
    env.filters["tojson_compact"] = lambda x: json.dumps(x, ensure_ascii=False)
    env.filters["curve_svg"] = curve_svg
    return env


def _printed(value, safe_text: Callable[[str], str]):
    return safe_text(value) if isinstance(value, str) and not isinstance(value, Markup) else value


def curve_svg(values, width: int = 320, height: int = 80) -> Markup:
    """A loss curve as an inline SVG polyline (no script, no network), log-free and scaled to its range."""
    numbers = [float(v) for v in values if isinstance(v, (int, float))]
    if len(numbers) < 2:
        return Markup("")
    low, high = min(numbers), max(numbers)
    span = (high - low) or 1.0
    points = " ".join(f"{i * (width - 4) / (len(numbers) - 1) + 2:.1f},{height - 2 - (v - low) * (height - 4) / span:.1f}"
                      for i, v in enumerate(numbers))
    return Markup(f'<svg class="curve" width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img" '
                  f'aria-label="curve from {numbers[0]:.4g} to {numbers[-1]:.4g}"><rect width="{width}" height="{height}" '
                  f'fill="#f6f8fa"/><polyline fill="none" stroke="#0969da" stroke-width="1.5" points="{points}"/></svg>')


def render_html(report: Report, templates: Path, lang: str) -> str:
    env = _environment(templates, html_text, autoescape=True)
    return env.get_template("report.html.j2").render(report=report, lang=lang, t=LABELS[lang], mark=STATUS_MARK)


def render_markdown(report: Report, templates: Path, lang: str) -> str:
    env = _environment(templates, markdown_text, autoescape=False)
    return env.get_template("scorecard.md.j2").render(report=report, lang=lang, t=LABELS[lang], mark=STATUS_MARK)


def render_class(summary, course, templates: Path, lang: str) -> str:
    """class.html from a gradebook.ClassSummary: every number is the summary's, the page only lays them out."""
    env = _environment(templates, html_text, autoescape=True)
    return env.get_template("class.html.j2").render(summary=summary, course=course, lang=lang, t=CLASS_LABELS[lang])
