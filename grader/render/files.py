"""Writing a report's files: each written whole to a temporary name, then renamed into place."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from grader.render.exports import render_gradescope, render_junit
from grader.render.templated import render_html, render_markdown
from grader.report.model import Report

FORMATS = {
    "json": ("report.json", lambda report, templates, lang: report.to_json() + "\n"),
    "html": ("report.html", render_html),
    "md": ("scorecard.md", render_markdown),
    "gradescope": ("results.json", lambda report, templates, lang: render_gradescope(report, lang)),
    "junit": ("junit.xml", lambda report, templates, lang: render_junit(report, lang)),
}
DEFAULT_FORMATS = ("json", "html", "md")


def write_atomic(path: Path, text: str, durable: bool = True) -> None:
    """`path` holds `text` whole or what it held before, never a part. `durable`: on the disk before this returns
    (what a gradebook's commit after it stands on); otherwise a marker whose loss costs only work done again."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            if durable:
                os.fsync(fh.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def write_reports(report: Report, out: Path, templates: Path, lang: str,
                  formats: tuple[str, ...] = DEFAULT_FORMATS) -> list[Path]:
    """Write each requested format to `out`, report.json first: it is the record, so no other format's
    failure can cost it."""
    written = []
    for fmt in sorted(formats, key=lambda f: f != "json"):
        name, render = FORMATS[fmt]
        write_atomic(out / name, render(report, templates, lang))
        written.append(out / name)
    return written


def append_step_summary(scorecard: Path) -> None:
    """Append the Markdown scorecard to $GITHUB_STEP_SUMMARY (a CI job's summary) when that is set; an
    OSError is the caller's to report, it says nothing about the grading."""
    summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if summary:
        with open(summary, "a", encoding="utf-8") as fh:
            fh.write(scorecard.read_text(encoding="utf-8") + "\n")
