"""Notebook submissions: an exercise's code written in Jupyter cells instead of its .py file.

Two layouts, read only where the exercise's .py file is missing or still the stub:
- `<id>/<id>.ipynb`: the exercise's code cells in order (only those tagged `<id>` when some are, so that cells
  that try things out can stay untagged);
- one notebook at the submission's top level (any name ending in .ipynb) whose code cells for the exercise carry
  its id as a tag (Jupyter's "Add tag" writes it into the cell's metadata).

The cells are read with nbformat and joined, two blank lines apart, into the text of the exercise's file, which is
staged and graded as that file would be: the same code gives the same report either way. IPython's own syntax (a
`%magic`, a `%%cell magic`, a `!shell` line) is not Python: a cell holding one is refused by number, rather than
graded as a syntax error somewhere in a file the student never saw. Notebooks are read like every file of a
submission: no link followed, size capped.
"""

from __future__ import annotations

import ast
import os
from dataclasses import dataclass
from pathlib import Path

from grader.i18n import Text, t, verbatim
from grader.nolinks import LINK, REGULAR, read_without_links

SUFFIX = ".ipynb"
MAX_NOTEBOOK_BYTES = 16 << 20   # a notebook keeps its outputs (pictures included): larger than its code
IPYTHON_STARTS = ("%", "!")     # line magics, cell magics and shell commands


@dataclass(frozen=True)
class FromNotebook:
    """The exercise's code as a notebook holds it, or why it cannot be graded (`problem`, an `error`)."""

    source: str                 # the notebook, as the student names it ("attention/attention.ipynb")
    code: bytes | None
    problem: Text | None = None


def notebook_code(submission: Path, exercise_id: str) -> FromNotebook | None:
    """The exercise's code from the submission's notebooks; None when no notebook holds any."""
    own = (exercise_id, exercise_id + SUFFIX)
    found = read_without_links(submission, own, MAX_NOTEBOOK_BYTES + 1)
    if found.kind == LINK:
        return FromNotebook("/".join(own), None, t("`{link}` is a symbolic link: submit plain files", link=found.link))
    if found.kind == REGULAR:
        return _code("/".join(own), found.data, exercise_id, tagged_only=False)
    tagged = []
    for name in _top_level_notebooks(submission):
        found = read_without_links(submission, (name,), MAX_NOTEBOOK_BYTES + 1)
        if found.kind == LINK:
            return FromNotebook(name, None, t("`{link}` is a symbolic link: submit plain files", link=found.link))
        if found.kind != REGULAR:
            continue
        cells = _read(name, found.data)
        if isinstance(cells, FromNotebook):   # unreadable: it may hold this exercise's cells, so it is said
            return cells
        if any(exercise_id in _tags(cell) for cell in cells):
            tagged.append((name, found.data))
    if len(tagged) > 1:
        return FromNotebook(tagged[0][0], None, t("cells tagged `{id}` are in more than one notebook ({names}): keep "
                                                  "an exercise's cells in one", id=exercise_id,
                                                  names=verbatim(", ".join(name for name, _ in tagged))))
    if tagged:
        return _code(tagged[0][0], tagged[0][1], exercise_id, tagged_only=True)
    return None


def is_submitted_notebook(exercise_ids, relative: str) -> bool:
    """Whether `relative` (a path inside a submission, `/`-separated) names a notebook staging may read: an
    exercise's own `<id>/<id>.ipynb`, or a top-level `<name>.ipynb`. What copies a submission's files from
    elsewhere (a repository's archive) takes these beside each exercise's file."""
    parts = relative.split("/")
    if len(parts) == 2:
        return parts[0] in exercise_ids and parts[1] == parts[0] + SUFFIX
    return len(parts) == 1 and parts[0].endswith(SUFFIX) and not parts[0].startswith(".")


def _top_level_notebooks(submission: Path) -> list[str]:
    try:
        return sorted(name for name in os.listdir(submission) if name.endswith(SUFFIX))
    except OSError:
        return []


def _read(source: str, data: bytes) -> list[dict] | FromNotebook:
    """The notebook's cells, or why it cannot be read."""
    if len(data) > MAX_NOTEBOOK_BYTES:
        return FromNotebook(source, None, t("{file} is {size:,} bytes; a notebook may be at most {most:,}",
                                            file=source, size=len(data), most=MAX_NOTEBOOK_BYTES))
    import nbformat   # only where a notebook is submitted

    try:
        notebook = nbformat.reads(data.decode("utf-8"), as_version=4)
    except Exception as exc:  # noqa: BLE001 - not JSON, not a notebook, not UTF-8: each the same verdict
        said = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__
        return FromNotebook(source, None, t("{file} is not a notebook nbformat can read: {error}", file=source,
                                            error=verbatim(said)))
    cells = notebook.get("cells")
    return [c for c in cells if isinstance(c, dict)] if isinstance(cells, list) else []


def _tags(cell: dict) -> list:
    tags = (cell.get("metadata") or {}).get("tags") or []
    return tags if isinstance(tags, list) else []


def _code(source: str, data: bytes, exercise_id: str, tagged_only: bool) -> FromNotebook:
    cells = _read(source, data)
    if isinstance(cells, FromNotebook):
        return cells
    numbered = [(number, cell) for number, cell in enumerate(cells, start=1) if cell.get("cell_type") == "code"]
    if tagged_only or any(exercise_id in _tags(cell) for _, cell in numbered):
        numbered = [(number, cell) for number, cell in numbered if exercise_id in _tags(cell)]
    parts = []
    for number, cell in numbered:
        text = cell.get("source") or ""
        text = "".join(text) if isinstance(text, list) else str(text)
        if not text.strip():
            continue
        line = _ipython_line(text)
        if line is not None:
            shown = verbatim(line[:80])
            said = (t("{file}, cell {cell}: `{line}` is IPython syntax (a magic or a shell command), not Python, so "
                      "the grader cannot run it: delete that line, or move it to a cell not tagged `{id}`",
                      file=source, cell=number, line=shown, id=exercise_id) if tagged_only else
                    t("{file}, cell {cell}: `{line}` is IPython syntax (a magic or a shell command), not Python, so "
                      "the grader cannot run it: delete that line, or tag the exercise's cells `{id}` and leave this "
                      "one untagged", file=source, cell=number, line=shown, id=exercise_id))
            return FromNotebook(source, None, said)
        parts.append(text.rstrip() + "\n")
    return FromNotebook(source, "\n\n".join(parts).encode("utf-8"))


def _ipython_line(text: str) -> str | None:
    """The first line of a cell that is IPython's syntax rather than Python's, if the cell is not Python as it is
    (a `%` or `!` inside a string of valid code is not a magic)."""
    try:
        ast.parse(text)
        return None
    except (SyntaxError, ValueError):
        pass
    for line in text.splitlines():
        if line.lstrip().startswith(IPYTHON_STARTS):
            return line.strip()
    return None
