"""Writing a report's files: each written whole to a temporary name, then renamed into place."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from grader.render.templated import render_html, render_markdown
from grader.report.model import Report


def write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def write_reports(report: Report, out: Path, templates: Path, lang: str) -> list[Path]:
    files = {
        out / "report.json": report.to_json() + "\n",
        out / "report.html": render_html(report, templates, lang),
        out / "scorecard.md": render_markdown(report, templates, lang),
    }
    for path, text in files.items():
        write_atomic(path, text)
    summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if summary:
        with open(summary, "a", encoding="utf-8") as fh:
            fh.write(files[out / "scorecard.md"] + "\n")
    return list(files)
