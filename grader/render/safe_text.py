"""Student-controlled text made safe for each output format: one function per format, used by every renderer.

Messages, evidence, exception types and messages, the program's output and the submission's (folder) name all
carry text a student chose. Each function below turns such text into something that format shows literally:
it can start no heading, table row, link or image, move no cursor, and break no file.
"""

from __future__ import annotations

import csv
import io
import math
import re
from collections.abc import Iterable, Sequence

from grader.report.model import valid_unicode

# C0 and C1 controls and DEL (cursor moves, erasing, ESC sequences, CR overwriting a line), the Unicode line
# and paragraph separators, and the bidirectional marks, embeddings, overrides and isolates that reorder how
# a line is displayed (a "0/11" shown as "11/0").
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
_NAMED = {"\t": "\\t", "\n": "\\n", "\r": "\\r"}

# XML 1.0's Char production: what a well-formed document may hold at all.
_NOT_XML_CHAR = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")

# Markdown: characters that open emphasis, code, links, images, raw HTML, math, tables or escapes.
_MARKDOWN_ESCAPE = str.maketrans({c: "\\" + c for c in "\\`*_~[]!|$:@"}
                                 | {"&": "&amp;", "<": "&lt;", ">": "&gt;"})
# GFM and markdown-it link bare URLs ("www.x.org", "https://x", "//x"); a domain's dot and a "//" escaped
# are no longer one.
_DOMAIN_DOT = re.compile(r"(?<=\w)\.(?=[^\W\d_])")
_SLASHES = re.compile("//")
_LEADING_HASH = re.compile(r"^(\s*)#")

# A spreadsheet runs a cell that starts with one of these as a formula (OWASP's rule; tab and CR never reach a
# cell, visible_controls writes them out), their full-width forms included, which some input methods type. A
# spreadsheet may open a CSV file with any of the separators below (Excel in German, French, Spanish, Italian and
# Russian locales splits on ";"), so a trigger after a separator inside a cell, spaces or double quotes between,
# starts a cell too: each such start gets a single quote, which a spreadsheet shows as text.
_FORMULA_TRIGGERS = "=+\\-@\uff1d\uff0b\uff0d\uff20"
_SEPARATORS = ",;\t|"
_FORMULA_CELL = re.compile(f"(^|[{_SEPARATORS}])(?=[\\s\"]*[{_FORMULA_TRIGGERS}])")


def _shown_escaped(match: re.Match) -> str:
    char = match.group()
    if char in _NAMED:
        return _NAMED[char]
    return f"\\x{ord(char):02x}" if ord(char) <= 0xFF else f"\\u{ord(char):04x}"


def visible_controls(text: str, keep: str = "") -> str:
    """`text` with lone surrogates replaced and every control character but those in `keep` written out as
    an escape (ESC as `\\x1b`, CR as `\\r`), so it is seen rather than obeyed."""
    text = valid_unicode(str(text))
    if _CONTROL.search(text) is None:
        return text   # the common case: no substitution to set up
    return _CONTROL.sub(lambda m: m.group() if m.group() in keep else _shown_escaped(m), text)


def terminal_text(text: str) -> str:
    """One line for a terminal: no control character reaches the screen, not even a newline."""
    return visible_controls(text)


def html_text(text: str) -> str:
    """For an autoescaping HTML template: line breaks and tabs stay (the output is shown in <pre>)."""
    return visible_controls(text, keep="\n\t")


def markdown_text(text: str) -> str:
    """Inline Markdown (a table cell, a heading's text) that renders as exactly these characters."""
    text = visible_controls(text).translate(_MARKDOWN_ESCAPE)
    text = _SLASHES.sub(r"\/\/", _DOMAIN_DOT.sub(r"\.", text))
    return _LEADING_HASH.sub(r"\1\#", text)


def junit_text(text: str) -> str:
    """An XML attribute or text node: controls written out (a CI log may print it), whatever XML 1.0 forbids
    dropped, so the document stays well-formed."""
    return _NOT_XML_CHAR.sub("", visible_controls(text, keep="\n\t"))


def gradescope_text(text: str) -> str:
    """A Gradescope test's output: plain lines, no terminal sequence."""
    return visible_controls(text, keep="\n\t")


def csv_cell(value: str | float | None) -> str:
    """A CSV cell: a number the grader computed as a number (`:g`; a penalty of -2 stays -2), None as a blank, and
    text anyone chose (a folder, a roster's name, a course's title) as text a spreadsheet shows, whatever separator
    it splits on: no control character, and no formula at its start or after any separator in it."""
    if value is None:
        return ""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return f"{value:g}" if isinstance(value, float) else str(value)
    return _FORMULA_CELL.sub(r"\1'", visible_controls(str(value)))


def csv_text(rows: Iterable[Sequence[str | float | None]]) -> str:
    """A whole CSV file as the grader writes them all: comma-separated, one line a row, every cell a csv_cell."""
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerows([csv_cell(cell) for cell in row] for row in rows)
    return out.getvalue()
