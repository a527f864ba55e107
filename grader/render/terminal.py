"""The short per-exercise table printed after grading.

Columns are measured in display columns, not code points: a CJK character takes two columns in a terminal,
so a Chinese status word padded by its length would push the columns after it out of line."""

from __future__ import annotations

from wcwidth import wcswidth, wcwidth

from grader.render.labels import LABELS
from grader.render.safe_text import terminal_text
from grader.report.model import Report

MESSAGE_COLUMNS = 90   # a message longer than this is cut, so that each exercise keeps to one line
ELLIPSIS = "…"


def display_width(text: str) -> int:
    """Columns `text` takes in a terminal (wcwidth counts a character it cannot measure as -1: taken as 0)."""
    width = wcswidth(text)
    return width if width >= 0 else sum(max(wcwidth(ch), 0) for ch in text)


def fit(text: str, columns: int) -> str:
    """`text` cut to at most `columns` display columns, an ellipsis marking the cut."""
    if display_width(text) <= columns:
        return text
    kept, used = [], display_width(ELLIPSIS)
    for ch in text:
        used += max(wcwidth(ch), 0)
        if used > columns:
            break
        kept.append(ch)
    return "".join(kept) + ELLIPSIS


def pad(text: str, columns: int) -> str:
    """`text` followed by spaces up to `columns` display columns."""
    return text + " " * max(columns - display_width(text), 0)


def render_table(report: Report, lang: str) -> str:
    words = LABELS[lang]
    id_width = max([display_width(e.id) for e in report.exercises] + [display_width(words["total"]), 8])
    status_width = max(display_width(words[e.status]) for e in report.exercises) if report.exercises else 0
    colon = words["colon"]
    lines = [f"{words['submission']}{colon}{terminal_text(report.submission)}    {words['sandbox']}{colon}"
             f"{report.sandbox['level']}", ""]
    for e in report.exercises:
        score = f"{e.score:g}/{e.max_score:g}"
        lines.append(f"  {pad(e.id, id_width)}  {score:>9}  {pad(words[e.status], status_width)}  "
                     f"{fit(terminal_text(e.message[lang]), MESSAGE_COLUMNS)}".rstrip())
    total = f"{report.score:g}/{report.max_score:g}"
    lines.append(f"  {pad(words['total'], id_width)}  {total:>9}  ({report.percent:g}%)")
    return "\n".join(lines)
