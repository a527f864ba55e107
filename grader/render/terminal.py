"""The short per-exercise table printed after grading."""

from __future__ import annotations

from grader.render.labels import LABELS
from grader.render.safe_text import terminal_text
from grader.report.model import Report


def render_table(report: Report, lang: str) -> str:
    t = LABELS[lang]
    width = max([len(e.id) for e in report.exercises] + [len(t["total"]), 8])
    lines = [f"{t['submission']}: {terminal_text(report.submission)}    {t['sandbox']}: {report.sandbox['level']}    "
             f"{t['seed']}: {report.seed}", ""]
    for e in report.exercises:
        score = f"{e.score:g}/{e.max_score:g}"
        lines.append(f"  {e.id:<{width}}  {score:>9}  {t[e.status]:<13}  {terminal_text(e.message[lang])[:90]}")
    total = f"{report.score:g}/{report.max_score:g}"
    lines.append(f"  {t['total']:<{width}}  {total:>9}  ({report.percent:g}%)")
    return "\n".join(lines)
