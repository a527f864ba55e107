"""Notebooks as hostile input, and as what the grader graded: a lone surrogate in a cell, a notebook nested too deep,
with too many cells or too many values, each costs its own submission a clear refusal and the classmates nothing;
the content hash (resume, --rejudge, the identical-files flag) and the similarity check read the code taken from a
notebook where a notebook was graded.

The first half reads notebooks directly (grader/grading/notebooks.py); the second grades a small class of rope
submissions, then grades it again after a notebook changed, once resumed and once with --rejudge."""

from __future__ import annotations

import csv
import io
import json
import sqlite3
import zipfile
from pathlib import Path

import nbformat
import pytest

from conftest import ROOT, course_copy, run_grader
from grader.batch.gradebook import content_hash
from grader.course import load_course
from grader.grading import notebooks
from grader.grading.notebooks import MAX_CELLS, MAX_DEPTH, MAX_VALUES, notebook_code
from grader.review.selftest import mutant_text
from grader.sandbox.staging import graded_code

COURSE = load_course(ROOT)
ROPE = COURSE.exercise("rope")
SOLUTION = (ROOT / "solutions" / "rope" / "rope.py").read_text()
RENAMED = (ROOT / "tests" / "similarity" / "rope_renamed.py").read_text()   # the solution, renamed and reformatted
INDEPENDENT = {v.parent.name: v.read_text()
               for v in sorted((ROOT / "solutions" / "rope" / "variants").glob("*/rope.py"))}
WRONG = mutant_text(COURSE, "rope", ROOT / "solutions" / "rope" / "mutants" / "rotates_other_way")
SURROGATE = "\ud800"   # legal in JSON (as `\ud800`), impossible in UTF-8


def notebook_text(cells: list[tuple[str, list[str]]]) -> str:
    """A notebook of code cells (source, tags), as JSON with every character outside ASCII escaped (as Jupyter
    may write it): a lone surrogate stays one."""
    made = []
    for source, tags in cells:
        cell = nbformat.v4.new_code_cell(source)
        if tags:
            cell.metadata["tags"] = tags
        made.append(cell)
    return json.dumps(nbformat.v4.new_notebook(cells=made), ensure_ascii=True)


def code_cells(code: str) -> list[tuple[str, list[str]]]:
    return [(c, []) for c in code.rstrip("\n").split("\n\n\n")]


def raw_notebook(cells: list, metadata: object = None) -> str:
    """A notebook's JSON as a crafted file holds it, nbformat never consulted."""
    return json.dumps({"cells": cells, "metadata": metadata or {}, "nbformat": 4, "nbformat_minor": 5})


def code_cell(source: str, outputs: list | None = None) -> dict:
    return {"cell_type": "code", "execution_count": None, "id": f"c{abs(hash((source, len(outputs or []))))}",
            "metadata": {}, "outputs": outputs or [], "source": source}


def nested(depth: int) -> str:
    """A notebook whose metadata nests `depth` levels deep (written as text: no parser nests that deep)."""
    return raw_notebook([code_cell("x = 1")], {"deep": "*"}).replace('"*"', "[" * depth + "]" * depth)


def many_cells(count: int) -> str:
    return raw_notebook([{**code_cell("x = 1"), "id": f"c{i}"} for i in range(count)])


def many_values(count: int) -> str:
    return raw_notebook([code_cell("x = 1", [{"output_type": "stream", "name": "stdout", "text": "a"}] * count)])


def said(found) -> str:
    assert found.code is None and found.problem is not None, found
    return found.problem.render("en")


# --- reading one notebook ----------------------------------------------------------------------------------------

def test_a_lone_surrogate_is_taken_as_its_escape(tmp_path):
    (tmp_path / "rope").mkdir()
    (tmp_path / "rope" / "rope.ipynb").write_text(notebook_text([(f'NOTE = "{SURROGATE}"', [])]))
    found = notebook_code(tmp_path, "rope")
    assert found.problem is None and found.code == b'NOTE = "\\ud800"\n'   # UTF-8, and Python reads the same str
    # in a line the refusal quotes: the message is valid text too, so it can be stored and shown
    (tmp_path / "rope" / "rope.ipynb").write_text(notebook_text([(f'%magic "{SURROGATE}"\nx = (', [])]))
    message = said(notebook_code(tmp_path, "rope"))
    assert '`%magic "\\ud800"` is IPython syntax' in message
    message.encode("utf-8")
    # a tag, and the name of a top-level notebook that is not UTF-8 (os.listdir gives a surrogate for its byte)
    (tmp_path / "rope" / "rope.ipynb").unlink()
    name = tmp_path / "w\udcffork.ipynb"
    name.write_text(notebook_text([(f'%magic "{SURROGATE}"', ["rope", f"t{SURROGATE}"])]))
    message = said(notebook_code(tmp_path, "rope"))
    assert message.startswith("w\\udcffork.ipynb, cell 1: ") and "\\ud800" in message
    message.encode("utf-8")


@pytest.mark.parametrize(("text", "refusal"), [
    (nested(MAX_DEPTH + 1), f"nests its JSON more than {MAX_DEPTH} levels deep"),
    ('{"a":' * 200_000 + "1" + "}" * 200_000, f"nests its JSON more than {MAX_DEPTH} levels deep"),
    (many_cells(MAX_CELLS + 1), f"has {MAX_CELLS + 1:,} cells; a notebook may have at most {MAX_CELLS:,}"),
    (many_values(MAX_VALUES), f"holds more than {MAX_VALUES:,} JSON values"),
], ids=["nested", "nested-past-the-interpreter", "cells", "values"])
def test_a_notebook_past_a_cap_is_refused_before_nbformat_reads_it(tmp_path, text, refusal):
    (tmp_path / "rope").mkdir()
    (tmp_path / "rope" / "rope.ipynb").write_text(text)
    assert refusal in said(notebook_code(tmp_path, "rope"))


def test_a_notebook_at_each_cap_is_read(tmp_path):
    """The positive control of the caps: a notebook just inside each one is read, its code taken."""
    (tmp_path / "rope").mkdir()
    for text in (nested(MAX_DEPTH - 6), many_cells(MAX_CELLS), many_values(MAX_VALUES // 5)):
        (tmp_path / "rope" / "rope.ipynb").write_text(text)
        found = notebook_code(tmp_path, "rope")
        assert found.problem is None and found.code is not None and found.code.startswith(b"x = 1\n")


def test_the_readers_time_cpu_and_memory_limits_each_end_in_a_sentence(tmp_path, monkeypatch):
    (tmp_path / "rope").mkdir()
    (tmp_path / "rope" / "rope.ipynb").write_text(notebook_text(code_cells(SOLUTION)))
    assert notebook_code(tmp_path, "rope").code is not None
    monkeypatch.setattr(notebooks, "_read_cache", type(notebooks._read_cache)())
    monkeypatch.setattr(notebooks, "READ_TIMEOUT_S", 0.01)   # less than starting Python takes
    assert said(notebook_code(tmp_path, "rope")) == "rope/rope.ipynb: the notebook took longer than 0.01 s to read"
    monkeypatch.setattr(notebooks, "_read_cache", type(notebooks._read_cache)())
    monkeypatch.setattr(notebooks, "READ_TIMEOUT_S", 60.0)
    monkeypatch.setattr(notebooks, "READ_CPU_S", 0)   # spent before the child has read a byte
    assert said(notebook_code(tmp_path, "rope")) == ("rope/rope.ipynb: reading the notebook took more than 0 s of CPU "
                                                     "time")
    monkeypatch.setattr(notebooks, "_read_cache", type(notebooks._read_cache)())
    monkeypatch.setattr(notebooks, "READ_CPU_S", 10)
    monkeypatch.setattr(notebooks, "READ_MEMORY_BYTES", 24 << 20)   # less than nbformat's imports take
    assert said(notebook_code(tmp_path, "rope")) == ("rope/rope.ipynb: the notebook needed more than 24 MiB of "
                                                     "memory to read")


def test_the_content_hash_reads_the_code_a_notebook_holds(tmp_path):
    """Two notebook-only submissions with different code have different hashes; the same code, the same hash;
    changing a notebook's code changes it. The code graded is what the similarity check reads."""
    first, second, third = (tmp_path / name for name in ("first", "second", "third"))
    for folder, code in ((first, SOLUTION), (second, INDEPENDENT["complex_halves"]), (third, SOLUTION)):
        (folder / "rope").mkdir(parents=True)
        (folder / "rope" / "rope.ipynb").write_text(notebook_text(code_cells(code)))
    assert content_hash(COURSE, first) != content_hash(COURSE, second)
    assert content_hash(COURSE, first) == content_hash(COURSE, third)
    before = content_hash(COURSE, third)
    (third / "rope" / "rope.ipynb").write_text(notebook_text(code_cells(WRONG)))
    assert content_hash(COURSE, third) != before
    graded = graded_code(second, "rope", ROPE.file, COURSE.stub(ROPE))
    assert graded.source == "rope/rope.ipynb"
    assert graded.data == INDEPENDENT["complex_halves"].rstrip("\n").encode() + b"\n"


# --- a class graded, and graded again ----------------------------------------------------------------------------

def zipped(root: Path, name: str, files: dict[str, str]) -> None:
    with zipfile.ZipFile(root / f"{name}.zip", "w", zipfile.ZIP_DEFLATED) as zf:
        for path, text in files.items():
            zf.writestr(f"{name}/{path}", text)


def write_class(room: Path) -> None:
    def put(path: str, text: str) -> None:
        (room / path).parent.mkdir(parents=True, exist_ok=True)
        (room / path).write_text(text)

    put("ann/rope/rope.py", SOLUTION)
    put("ben/rope/rope.ipynb", notebook_text(code_cells(RENAMED)))      # ann's code, renamed, as a notebook
    put("cat/work.ipynb", notebook_text([(c, ["rope"]) for c, _ in code_cells(INDEPENDENT["rotation_matrix"])]))
    put("dan/rope/rope.ipynb", notebook_text(code_cells(INDEPENDENT["complex_halves"])))
    put("eve/rope/rope.ipynb", notebook_text(code_cells(INDEPENDENT["gpt_neox_cached_tables"] +
                                                        f'\n\nNOTE = "{SURROGATE}"\n')))
    put("fay/rope/rope.ipynb", notebook_text([(f'%magic "{SURROGATE}"', []), *code_cells(SOLUTION)]))
    zipped(room, "gus", {"rope/rope.ipynb": nested(100_000)})
    zipped(room, "hal", {"rope/rope.ipynb": many_cells(4 * MAX_CELLS)})
    zipped(room, "ivy", {f"n{i}.ipynb": many_values(MAX_VALUES) for i in range(2)})


def grades(out: Path) -> dict[str, dict]:
    return {r["submission"]: r for r in csv.DictReader(io.StringIO((out / "grades.csv").read_text(encoding="utf-8")))}


def exercise_of(out: Path, name: str) -> dict:
    [rope] = json.loads((out / "students" / name / "report.json").read_text(encoding="utf-8"))["exercises"]
    return rope


def batch(course: Path, room: Path, out: Path, *extra: str):
    done = run_grader("--course", str(course), "batch", str(room), "--out", str(out), "--sandbox", "basic",
                      "--jobs", "2", *extra, timeout=900)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    return done


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    folder = tmp_path_factory.mktemp("notebook-class")
    course = course_copy(folder / "course", ["rope"])
    room = folder / "class"
    write_class(room)
    room.chmod(0o700)
    out = folder / "out"
    batch(course, room, out)
    return course, room, out


@pytest.mark.slow
def test_hostile_notebooks_cost_their_own_submission_and_the_class_is_graded(graded):
    _, _, out = graded
    rows = grades(out)
    assert set(rows) == {"ann", "ben", "cat", "dan", "eve", "fay", "gus.zip", "hal.zip", "ivy.zip"}
    full = rows["ann"]["total (14)"]
    assert full == "14" and rows["ann"]["status"] == "complete"
    for name in ("ben", "cat", "dan", "eve"):
        assert rows[name]["total (14)"] == full and rows[name]["status"] == "complete", (name, rows[name])
    # the surrogate: graded as the escape it is taken as, and a refusal quoting it, each with its report
    assert exercise_of(out, "eve")["status"] == "passed"
    fay = exercise_of(out, "fay")
    assert fay["status"] == "error" and '`%magic "\\ud800"` is IPython syntax' in fay["message"]["en"]
    assert "\\ud800" in (out / "students" / "fay" / "report.html").read_text(encoding="utf-8")
    refusals = {"gus.zip": f"rope/rope.ipynb nests its JSON more than {MAX_DEPTH} levels deep",
                "hal.zip": f"rope/rope.ipynb has {4 * MAX_CELLS:,} cells; a notebook may have at most {MAX_CELLS:,}",
                "ivy.zip": f"n0.ipynb holds more than {MAX_VALUES:,} JSON values"}
    for name, refusal in refusals.items():
        rope = exercise_of(out, name)
        assert rope["status"] == "error" and rope["message"]["en"].startswith(refusal), (name, rope["message"])
        assert rows[name]["total (14)"] == "0"
    html = (out / "class.html").read_text(encoding="utf-8")
    assert "grader_error" not in {r["status"] for r in rows.values()} and html.count('class="student') >= 9


@pytest.mark.slow
def test_a_copy_handed_in_as_a_notebook_is_flagged_and_honest_notebooks_are_not_identical(graded):
    from browser import parse_dom, text_of, with_class

    _, _, out = graded
    similar = list(csv.DictReader(io.StringIO((out / "similarity.csv").read_text(encoding="utf-8"))))
    assert [(r["exercise"], r["first"], r["second"]) for r in similar] == [("rope", "ann", "ben")]
    rows = grades(out)
    notebook_only = [rows[name]["content_hash"] for name in ("ben", "cat", "dan", "eve", "fay", "gus.zip",
                                                                        "hal.zip", "ivy.zip")]
    assert len(set(notebook_only)) == len(notebook_only)
    dom = parse_dom((out / "class.html").read_text(encoding="utf-8"))
    flagged = {text_of(r.find(".//a[@class='submission']")) for r in with_class(dom, "tr", "student")
               if with_class(r, "span", "identical")}
    assert flagged == set()


@pytest.mark.slow
def test_a_changed_notebook_is_graded_again_resumed_and_rejudged(graded):
    course, room, out = graded
    db = sqlite3.connect(out / "gradebook.sqlite")
    graded_at = dict(db.execute("SELECT submission, graded_at FROM submissions").fetchall())
    (room / "dan" / "rope" / "rope.ipynb").write_text(notebook_text(code_cells(WRONG)))
    done = batch(course, room, out)
    assert "1 graded, 8 already in the gradebook" in done.stdout + done.stderr
    wrong = grades(out)["dan"]
    assert float(wrong["total (14)"]) < 14 and wrong["status"] != "complete"
    assert dict(db.execute("SELECT submission, graded_at FROM submissions WHERE submission != 'dan'").fetchall()) == {
        k: v for k, v in graded_at.items() if k != "dan"}
    # re-judged: a changed notebook has no observations kept for its code, so it is graded afresh
    (room / "dan" / "rope" / "rope.ipynb").write_text(notebook_text(code_cells(INDEPENDENT["complex_halves"])))
    batch(course, room, out, "--rejudge")
    assert grades(out)["dan"]["total (14)"] == "14"
    assert grades(out)["dan"]["content_hash"] != wrong["content_hash"]


def test_a_cluster_worker_gets_the_notebooks_the_grader_would_read(tmp_path):
    """`grader batch --cluster` ships each submission's files to a worker: the notebooks standing in for an
    exercise's file go too (each exercise's own, a top-level one, a link as a link), so a worker grades the code the
    client would, and nothing else goes."""
    from grader.batch.cluster import rebuild_submission, submission_files

    here, there = tmp_path / "here", tmp_path / "there"
    (here / "rope").mkdir(parents=True)
    (here / "rope" / "rope.ipynb").write_text(notebook_text(code_cells(SOLUTION)))
    (here / "work.ipynb").write_text(notebook_text([(c, ["heads"]) for c, _ in code_cells(
        (ROOT / "solutions" / "heads" / "heads.py").read_text())]))
    (here / "linked.ipynb").symlink_to(here / "work.ipynb")
    (here / "rope" / "scratch.ipynb").write_text(notebook_text([("x = 1", [])]))   # no notebook staging reads
    there.mkdir()
    rebuild_submission(COURSE, submission_files(COURSE, here), there)
    for ex in COURSE.exercises:
        graded_here = graded_code(here, ex.id, ex.file, COURSE.stub(ex))
        graded_there = graded_code(there, ex.id, ex.file, COURSE.stub(ex))
        assert (graded_there.source, graded_there.data, str(graded_there.message)) == (
            graded_here.source, graded_here.data, str(graded_here.message)), ex.id
    assert graded_code(there, "rope", ROPE.file, COURSE.stub(ROPE)).data is not None
    assert "is a symbolic link" in str(graded_code(there, "heads", "heads.py", COURSE.stub(COURSE.exercise("heads"))
                                                   ).message)
    assert not (there / "rope" / "scratch.ipynb").exists()


def test_a_submissions_notebooks_are_read_in_one_child_each_answered_in_its_place(tmp_path, monkeypatch):
    """Starting a child and importing nbformat costs more than reading a notebook: a submission's notebooks are read
    in one child when its first exercise asks, and what one of them breaks is its own answer alone."""
    import subprocess

    started = []
    run = subprocess.run
    monkeypatch.setattr(notebooks.subprocess, "run", lambda *a, **k: started.append(1) or run(*a, **k))
    monkeypatch.setattr(notebooks, "_read_cache", type(notebooks._read_cache)())
    heads = COURSE.exercise("heads")
    for exercise, text in (("rope", notebook_text(code_cells(SOLUTION))), ("masks", nested(MAX_DEPTH + 1)),
                           ("heads", notebook_text(code_cells(COURSE.solution(heads).read_text()))),
                           ("attention", many_cells(MAX_CELLS + 1))):
        (tmp_path / exercise).mkdir()
        (tmp_path / exercise / f"{exercise}.ipynb").write_text(text)
    (tmp_path / "work.ipynb").write_text(notebook_text([("y = 2", ["embedding"])]))
    content_hash(COURSE, tmp_path)
    assert len(started) == 1
    assert notebook_code(tmp_path, "rope").code == SOLUTION.rstrip("\n").encode() + b"\n"
    assert notebook_code(tmp_path, "heads").code == COURSE.solution(heads).read_text().rstrip("\n").encode() + b"\n"
    assert notebook_code(tmp_path, "embedding").code == b"y = 2\n"
    assert "nests its JSON" in said(notebook_code(tmp_path, "masks"))
    assert "cells; a notebook may have at most" in said(notebook_code(tmp_path, "attention"))
    assert len(started) == 1, "every exercise's notebook was read already"
    # the child's answers in order, each notebook's own: one that stops the child (here, its CPU time) is answered
    # for, and a new child reads the ones after it
    monkeypatch.setattr(notebooks, "READ_CPU_S", 0)
    started.clear()
    answers = notebooks._read_in_child([b"{}", b"{}"])
    assert answers == [{"problem": "cpu"}, {"problem": "cpu"}] and len(started) == 2
    monkeypatch.setattr(notebooks, "READ_CPU_S", 10)
    answers = notebooks._read_in_child([notebook_text([("a = 1", [])]).encode(), many_cells(MAX_CELLS + 1).encode(),
                                        b"not json", notebook_text([("b = 2", [])]).encode()])
    assert [a[0]["source"] if isinstance(a, list) else a["problem"] for a in answers] == [
        "a = 1", "cells", "unreadable", "b = 2"]
