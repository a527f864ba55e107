"""Notebook submissions: an exercise's code written in Jupyter cells instead of its .py file.

Two layouts, read only where the exercise's .py file is missing or still the stub:
- `<id>/<id>.ipynb`: the exercise's code cells in order (only those tagged `<id>` when some are, so that cells
  that try things out can stay untagged);
- one notebook at the submission's top level (any name ending in .ipynb) whose code cells for the exercise carry
  its id as a tag (Jupyter's "Add tag" writes it into the cell's metadata).

The cells are read with nbformat and joined, two blank lines apart, into the text of the exercise's file, which is
staged and graded as that file would be: the same code gives the same report either way. IPython's own syntax (a
`%magic`, a `%%cell magic`, a `!shell` line) is not Python: a cell holding one is refused by number, rather than
graded as a syntax error somewhere in a file the student never saw.

Notebooks are read like every file of a submission: no link followed, size capped, and before nbformat sees one,
its JSON nesting, its number of values and its number of cells are capped too. nbformat reads (and validates) it in
a child process with time and memory limits of its own, so that a crafted notebook costs its own submission a
refusal ("reading the notebook took more than 10 s of CPU time") and never the grading process the class shares.
Student text is taken from the notebook as valid text: a lone surrogate (`\\ud800`, legal in JSON, impossible in
UTF-8) is written out as that escape, so the code graded, the record stored and every report agree.
"""

from __future__ import annotations

import ast
import errno
import hashlib
import json
import os
import signal
import subprocess
import sys
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

from grader.i18n import Text, t, verbatim
from grader.nolinks import LINK, REGULAR, read_without_links

SUFFIX = ".ipynb"
MAX_NOTEBOOK_BYTES = 16 << 20   # a notebook keeps its outputs (pictures included): larger than its code
MAX_DEPTH = 64                  # JSON nesting: nbformat's own structure is 7 deep; metadata and JSON outputs add some
MAX_VALUES = 100_000            # JSON values: reading one costs ~12 us of CPU; a course notebook holds a few thousand
MAX_CELLS = 5_000               # a course notebook has hundreds; reading one costs ~0.1 ms of CPU
READ_CPU_S = 10                 # the reading child's CPU time: a notebook at the caps takes about 1 s
READ_TIMEOUT_S = 60.0           # its wall time: on a busy machine, a share of a core gives it that CPU time slowly
READ_MEMORY_BYTES = 2 << 30     # the reading child's address space: 16 MiB of small JSON values takes ~1 GiB
CACHED = 32                     # notebooks' answers kept by digest: a submission's, for each of its exercises
IPYTHON_STARTS = ("%", "!")     # line magics, cell magics and shell commands


@dataclass(frozen=True)
class FromNotebook:
    """The exercise's code as a notebook holds it, or why it cannot be graded (`problem`, an `error`)."""

    source: str                 # the notebook, as the student names it ("attention/attention.ipynb")
    code: bytes | None
    problem: Text | None = None


def notebook_code(submission: Path, exercise_id: str) -> FromNotebook | None:
    """The exercise's code from the submission's notebooks; None when no notebook holds any."""
    _read_ahead(submission)
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
            return FromNotebook(valid_text(name), None, t("`{link}` is a symbolic link: submit plain files",
                                                          link=valid_text(str(found.link))))
        if found.kind != REGULAR:
            continue
        cells = _read(valid_text(name), found.data)
        if isinstance(cells, FromNotebook):   # unreadable: it may hold this exercise's cells, so it is said
            return cells
        if any(exercise_id in _tags(cell) for cell in cells):
            tagged.append((valid_text(name), found.data))
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


def notebook_paths(submission: Path, exercise_ids) -> list[str]:
    """The notebooks of a submission staging may read (`/`-separated paths inside it), whether or not they exist:
    each exercise's own, and every one at the top level."""
    return [f"{e}/{e}{SUFFIX}" for e in exercise_ids] + _top_level_notebooks(submission)


def _top_level_notebooks(submission: Path) -> list[str]:
    try:
        return sorted(name for name in os.listdir(submission) if name.endswith(SUFFIX))
    except OSError:
        return []


def valid_text(text: str) -> str:
    """`text` as UTF-8 can hold it: a lone surrogate written out as its escape (`\\ud800`)."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


# How a child ended by its CPU limit ends (the soft limit's signal; the hard one's); none on Windows
_CPU_LIMIT_SIGNALS = tuple(-getattr(signal, name) for name in ("SIGXCPU", "SIGKILL") if hasattr(signal, name))
_read_cache: OrderedDict[bytes, list[dict] | dict] = OrderedDict()   # sha256 of a notebook -> the child's answer
_read_ahead_of: list = [None]   # the submission last read ahead (its notebooks' sizes and times), their digests


def _read(source: str, data: bytes) -> list[dict] | FromNotebook:
    """The notebook's cells ({"cell_type", "tags", "source"}, a code cell's source as valid text), or why it cannot
    be read."""
    if len(data) > MAX_NOTEBOOK_BYTES:
        return FromNotebook(source, None, t("{file} is {size:,} bytes; a notebook may be at most {most:,}",
                                            file=source, size=len(data), most=MAX_NOTEBOOK_BYTES))
    digest = hashlib.sha256(data).digest()
    read = _read_cache.get(digest)
    if read is None:
        [read] = _read_in_child([data])
        _remember(digest, read)
    else:
        _read_cache.move_to_end(digest)
    return read if isinstance(read, list) else _problem(source, read)


def _remember(digest: bytes, read: list[dict] | dict) -> None:
    _read_cache[digest] = read
    while len(_read_cache) > CACHED:
        _read_cache.popitem(last=False)


def _read_ahead(submission: Path) -> None:
    """Every notebook of the submission that staging may read, read in one child when the first exercise asks (a
    child's start and nbformat's import cost ~0.3 s of CPU, a notebook itself far less). Read again only when the
    submission or one of its notebooks (size, time) is not what was last read, or its answers left the cache."""
    candidates = _top_level_notebooks(submission)
    try:
        candidates += [f"{e.name}/{e.name}{SUFFIX}" for e in os.scandir(submission)
                       if e.is_dir(follow_symlinks=False)]
    except OSError:
        return
    stamps = []
    for relative in candidates:
        try:
            st = os.lstat(submission / relative)
        except OSError:
            continue
        stamps.append((relative, st.st_size, st.st_mtime_ns))
    stamp = (str(submission), tuple(stamps))
    if _read_ahead_of[0] is not None and _read_ahead_of[0][0] == stamp and all(
            digest in _read_cache for digest in _read_ahead_of[0][1]):
        return
    unread: dict[bytes, bytes] = {}
    kept: list[bytes] = []
    for relative, size, _ in stamps[:CACHED]:
        if size > MAX_NOTEBOOK_BYTES:
            continue
        try:
            found = read_without_links(submission, tuple(relative.split("/")), MAX_NOTEBOOK_BYTES + 1)
        except OSError:
            continue
        if found.kind == REGULAR and len(found.data) <= MAX_NOTEBOOK_BYTES:
            digest = hashlib.sha256(found.data).digest()
            kept.append(digest)
            if digest not in _read_cache:
                unread[digest] = found.data
    for digest, read in zip(unread, _read_in_child(list(unread.values())) if unread else [], strict=True):
        _remember(digest, read)
    _read_ahead_of[0] = (stamp, kept)


def _read_in_child(notebooks: list[bytes]) -> list[list[dict] | dict]:
    """Each notebook's cells as the reading child answers, or the problem it found ({"problem": ...}). One child
    reads them in turn, each within its own CPU time; a notebook it did not answer for (time or memory ran out,
    it failed) is that notebook's problem, and a new child reads the ones after it."""
    root = str(Path(__file__).resolve().parents[2])   # the folder holding `grader`, however this process found it
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, (root, os.environ.get("PYTHONPATH"))))}
    answers: list[list[dict] | dict] = []
    while len(answers) < len(notebooks):
        rest = notebooks[len(answers):]
        given = b"".join(len(data).to_bytes(8, "big") + data for data in rest)
        try:
            done = subprocess.run([sys.executable, "-m", "grader.grading.notebooks", str(READ_MEMORY_BYTES),
                                   str(READ_CPU_S)], input=given, capture_output=True,
                                  timeout=READ_TIMEOUT_S * len(rest), env=env)
            said, code = done.stdout, done.returncode
        except subprocess.TimeoutExpired as exc:
            said, code = exc.stdout or b"", None
        for line in said.split(b"\n")[:-1][:len(rest)]:   # whole lines only: the last may be cut off
            try:
                answer = json.loads(line)
            except ValueError:
                break
            cells = answer.get("cells") if isinstance(answer, dict) else None
            answers.append(cells if isinstance(cells, list) else answer if isinstance(answer, dict) else
                           {"problem": "ended", "code": code})
        if len(answers) < len(notebooks):   # the child stopped at this one
            answers.append({"problem": "time"} if code is None else {"problem": "cpu"} if code in _CPU_LIMIT_SIGNALS
                           else {"problem": "ended", "code": code})
    return answers


def _problem(source: str, answer: dict) -> FromNotebook:
    """The child's problem said to the student."""
    problem = answer.get("problem")
    said = (t("{file}: the notebook took longer than {seconds:g} s to read", file=source, seconds=READ_TIMEOUT_S)
            if problem == "time" else
            t("{file}: reading the notebook took more than {seconds:g} s of CPU time", file=source,
              seconds=READ_CPU_S) if problem == "cpu" else
            t("{file}: the notebook needed more than {mib:,} MiB of memory to read", file=source,
              mib=READ_MEMORY_BYTES >> 20) if problem == "memory" else
            t("{file} nests its JSON more than {most} levels deep; a notebook may nest at most {most}", file=source,
              most=MAX_DEPTH) if problem == "depth" else
            t("{file} holds more than {most:,} JSON values; a notebook may hold at most {most:,}", file=source,
              most=MAX_VALUES) if problem == "values" else
            t("{file} has {cells:,} cells; a notebook may have at most {most:,}", file=source,
              cells=answer.get("cells_count", 0), most=MAX_CELLS) if problem == "cells" else
            t("{file} is not a notebook nbformat can read: {error}", file=source,
              error=verbatim(answer.get("error", ""))) if problem == "unreadable" else
            t("{file} could not be read: its reader ended with exit {code}", file=source, code=answer.get("code")))
    return FromNotebook(source, None, said)


def _tags(cell: dict) -> list:
    return cell["tags"]


def _code(source: str, data: bytes, exercise_id: str, tagged_only: bool) -> FromNotebook:
    cells = _read(source, data)
    if isinstance(cells, FromNotebook):
        return cells
    numbered = [(number, cell) for number, cell in enumerate(cells, start=1) if cell.get("cell_type") == "code"]
    if tagged_only or any(exercise_id in _tags(cell) for _, cell in numbered):
        numbered = [(number, cell) for number, cell in numbered if exercise_id in _tags(cell)]
    parts = []
    for number, cell in numbered:
        text = cell["source"]
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


# --- the reading child: `python -m grader.grading.notebooks MEMORY_BYTES CPU_SECONDS`, notebooks on its input ------


def _shape_problem(value) -> dict | None:
    """The first cap the parsed JSON breaks (cells, nesting, values), before nbformat sees it."""
    cells = value.get("cells") if isinstance(value, dict) else None
    if isinstance(cells, list) and len(cells) > MAX_CELLS:
        return {"problem": "cells", "cells_count": len(cells)}
    stack, values = [(value, 1)], 0
    while stack:
        item, depth = stack.pop()
        values += 1
        if depth > MAX_DEPTH:
            return {"problem": "depth"}
        if values > MAX_VALUES:
            return {"problem": "values"}
        if isinstance(item, dict):
            stack.extend((v, depth + 1) for v in item.values())
        elif isinstance(item, list):
            stack.extend((v, depth + 1) for v in item)
    return None


def _first_line(exc: BaseException) -> str:
    said = str(exc).strip()
    return valid_text(said.splitlines()[0][:200] if said else type(exc).__name__)


def read_notebook(data: bytes) -> dict:
    """The child's answer for a notebook's bytes: {"cells": [...]} or {"problem": ...}."""
    try:
        text = data.decode("utf-8")
        value = json.loads(text)
    except RecursionError:   # nested past the interpreter's own limit: deeper than MAX_DEPTH
        return {"problem": "depth"}
    except ValueError as exc:   # not UTF-8, not JSON
        return {"problem": "unreadable", "error": _first_line(exc)}
    problem = _shape_problem(value)
    if problem is not None:
        return problem
    del value
    import nbformat

    try:
        notebook = nbformat.reads(text, as_version=4)
    except RecursionError:
        return {"problem": "depth"}
    except MemoryError:
        raise
    except Exception as exc:  # noqa: BLE001 - not a notebook, a version nbformat cannot convert: the same verdict
        return {"problem": "unreadable", "error": _first_line(exc)}
    cells = notebook.get("cells")
    read = []
    for cell in (c for c in cells if isinstance(c, dict)) if isinstance(cells, list) else ():
        metadata = cell.get("metadata")   # nbformat only logs what its schema refuses: any JSON may be here
        tags = metadata.get("tags") if isinstance(metadata, dict) else None
        code = cell.get("cell_type") == "code"
        source = (cell.get("source") or "") if code else ""
        read.append({"cell_type": "code" if code else "other",
                     "tags": [valid_text(tag) for tag in tags if isinstance(tag, str)] if isinstance(tags, list)
                     else [],
                     "source": valid_text("".join(map(str, source)) if isinstance(source, list) else str(source))})
    return {"cells": read}


def _limit_memory(memory_bytes: int) -> None:
    """This child's address space, limited before it reads anything (not on Windows, where its parent's time
    limit alone ends it; macOS refuses the limit)."""
    try:
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
    except (ImportError, ValueError, OSError):
        pass


def _cpu_for_one(seconds: int) -> None:
    """The next notebook's CPU time: the soft limit set that far past what this child has used (its signal ends
    the child, and its parent says which notebook it was reading). The hard limit is left: a limit lowered could
    not be raised again for the next notebook."""
    try:
        import resource
    except ImportError:
        return
    used = resource.getrusage(resource.RUSAGE_SELF)
    _, hard = resource.getrlimit(resource.RLIMIT_CPU)
    soft = int(used.ru_utime + used.ru_stime + seconds)
    if hard == resource.RLIM_INFINITY or soft <= hard:
        resource.setrlimit(resource.RLIMIT_CPU, (soft, hard))


def main() -> None:
    """Notebooks on the input, each its length (8 bytes, big-endian) then its bytes; one line of JSON out for each,
    written as soon as it is read."""
    _limit_memory(int(sys.argv[1]))
    seconds = int(sys.argv[2])
    given = sys.stdin.buffer
    while len(head := given.read(8)) == 8:
        data = given.read(int.from_bytes(head, "big"))
        _cpu_for_one(seconds)
        try:
            answer = read_notebook(data)
        except MemoryError:
            answer = {"problem": "memory"}
        except OSError as exc:   # an import or a file nbformat opens, refused its memory
            if exc.errno != errno.ENOMEM:
                raise
            answer = {"problem": "memory"}
        del data
        sys.stdout.write(json.dumps(answer) + "\n")   # ASCII: every character outside it escaped
        sys.stdout.flush()


if __name__ == "__main__":
    main()
