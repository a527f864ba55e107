"""Notebook submissions (grader/grading/notebooks.py): an exercise's code cells, graded as that exercise's file would
be."""

import pytest
import dataclasses
import os
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat

from grader.classroom.github import fetch_exercises
from grader.course import load_course
from grader.grading.pipeline import grade
from grader.classroom.handout import write_handout
from grader.sandbox.levels import choose, strict_missing
from grader.sandbox.staging import stage
from grader.review.selftest import mutant_text

from conftest import ROOT

# end to end: every test here grades in a sandbox (`pytest -m "not slow"` leaves them out)
pytestmark = pytest.mark.slow

COURSE = load_course(ROOT)
WRONG_ATTENTION = mutant_text(COURSE, "attention",
                              ROOT / "solutions" / "attention" / "mutants" / "softmax_over_queries")


def cells_of(code: str) -> list[str]:
    """A file's code as a student splits it into cells: one per top-level block (two blank lines apart)."""
    return code.rstrip("\n").split("\n\n\n")


def write_notebook(path: Path, cells: list[tuple[str, list[str]]], markdown: str | None = "Notes, not code") -> None:
    """A notebook of code cells (source, tags), after a Markdown cell, as Jupyter writes one."""
    made = [nbformat.v4.new_markdown_cell(markdown)] if markdown else []
    for source, tags in cells:
        cell = nbformat.v4.new_code_cell(source)
        if tags:
            cell.metadata["tags"] = tags
        made.append(cell)
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nbformat.v4.new_notebook(cells=made), str(path))


def staged(submission: Path, exercise_id: str, tmp_path: Path):
    ex = COURSE.exercise(exercise_id)
    return stage(submission, ex.id, ex.file, COURSE.stub(ex), tmp_path / "scratch" / ex.id)


def report_of(submission: Path, exercise_ids: list[str]) -> dict:
    """The report of a grading, without what differs from one grading to the next (times, the folder's name)."""
    report = grade(COURSE, submission, exercise_ids, choose("basic" if strict_missing() else "strict"))
    data = dataclasses.asdict(report)
    for key in ("submission", "started_at", "duration_s"):
        data.pop(key)
    for ex in data["exercises"]:
        ex["run"] = {k: v for k, v in ex["run"].items() if k not in ("wall_s", "cpu_s", "max_rss_mb")}
    return data


def test_a_notebook_is_graded_like_the_same_code_as_a_file(tmp_path):
    """The same code as files, as an exercise's own notebook and as tagged cells of one notebook: the same report,
    down to the line a raise is reported at."""
    heads = COURSE.solution(COURSE.exercise("heads")).read_text()
    masks = COURSE.solution(COURSE.exercise("masks")).read_text().replace(
        "def masked_softmax(scores: torch.Tensor, mask: torch.Tensor, dim: int = -1) -> torch.Tensor:\n",
        "def masked_softmax(scores: torch.Tensor, mask: torch.Tensor, dim: int = -1) -> torch.Tensor:\n"
        "    raise ValueError('not written yet')\n")
    assert "not written yet" in masks
    codes = {"attention": WRONG_ATTENTION, "heads": heads, "masks": masks}
    files = tmp_path / "files"
    for exercise, source in codes.items():
        (files / exercise).mkdir(parents=True)
        (files / exercise / COURSE.exercise(exercise).file).write_text(source)
    notebooks = tmp_path / "notebooks"
    write_notebook(notebooks / "attention" / "attention.ipynb", [(c, []) for c in cells_of(codes["attention"])])
    # heads and masks as tagged cells of one notebook, beside cells that are no exercise's (a magic among them)
    write_notebook(notebooks / "transformer.ipynb", [("%timeit sum(range(10))", []),
                                                     *[(c, ["heads"]) for c in cells_of(heads)],
                                                     ("print('trying it out')", ["scratch"]),
                                                     *[(c, ["masks"]) for c in cells_of(masks)]])
    (notebooks / "heads").mkdir()
    shutil.copyfile(COURSE.stub(COURSE.exercise("heads")), notebooks / "heads" / "heads.py")   # the stub, untouched
    as_files, as_notebooks = report_of(files, list(codes)), report_of(notebooks, list(codes))
    assert as_notebooks == as_files
    statuses = {e["id"]: e["status"] for e in as_files["exercises"]}
    assert statuses == {"attention": "partial", "heads": "passed", "masks": "partial"}   # every verdict is at stake
    raised_at = next(n for n, line in enumerate(masks.splitlines(), start=1) if "not written yet" in line)
    where = f"masks.py:{raised_at}"
    assert where in str(as_notebooks), "the raise is reported at its line of the exercise's file"


def test_a_magic_is_refused_naming_its_cell(tmp_path):
    code = cells_of(COURSE.solution(COURSE.exercise("rope")).read_text())
    write_notebook(tmp_path / "rope" / "rope.ipynb", [(code[0], []), ("%load_ext autoreload\n%autoreload 2", []),
                                                      *[(c, []) for c in code[1:]]])
    found = staged(tmp_path, "rope", tmp_path)
    assert found.status == "error" and found.path is None
    said = found.message.render("en")
    assert said.startswith("rope/rope.ipynb, cell 3: `%load_ext autoreload` is IPython syntax"), said
    assert "rope/rope.ipynb 第 3 个单元格" in found.message.render("zh")
    # tagged cells: the magic in a tagged cell is refused, the same magic in an untagged cell is left alone
    write_notebook(tmp_path / "all.ipynb", [("!pip install torch", ["rope"]), *[(c, ["rope"]) for c in code]])
    (tmp_path / "rope" / "rope.ipynb").unlink()
    found = staged(tmp_path, "rope", tmp_path)
    assert found.status == "error" and "all.ipynb, cell 2: `!pip install torch`" in found.message.render("en")
    assert "move it to a cell not tagged `rope`" in found.message.render("en")
    write_notebook(tmp_path / "all.ipynb", [("!pip install torch", []), *[(c, ["rope"]) for c in code]])
    assert staged(tmp_path, "rope", tmp_path).path is not None


def test_a_percent_sign_in_valid_code_is_not_a_magic(tmp_path):
    source = 'HELP = """\n%d heads\n!important\n"""\n\n\n' + COURSE.solution(COURSE.exercise("heads")).read_text()
    write_notebook(tmp_path / "heads" / "heads.ipynb", [(c, []) for c in cells_of(source)])
    found = staged(tmp_path, "heads", tmp_path)
    assert found.path is not None and found.path.read_text() == source.rstrip("\n") + "\n"


def test_the_file_counts_unless_it_is_still_the_stub(tmp_path):
    ex = COURSE.exercise("heads")
    write_notebook(tmp_path / "heads" / "heads.ipynb", [(COURSE.solution(ex).read_text(), [])])
    shutil.copyfile(COURSE.stub(ex), tmp_path / "heads" / "heads.py")
    assert staged(tmp_path, "heads", tmp_path).path.read_text() == COURSE.solution(ex).read_text()
    mine = "def split_heads(x, n_heads):\n    return x\n"
    (tmp_path / "heads" / "heads.py").write_text(mine)
    assert staged(tmp_path, "heads", tmp_path).path.read_text() == mine


def test_what_cannot_be_read_as_a_notebook_is_said(tmp_path):
    (tmp_path / "heads").mkdir()
    (tmp_path / "heads" / "heads.ipynb").write_text("{not json")
    found = staged(tmp_path, "heads", tmp_path)
    assert found.status == "error" and found.message.render("en").startswith(
        "heads/heads.ipynb is not a notebook nbformat can read: ")
    (tmp_path / "heads" / "heads.ipynb").unlink()
    (tmp_path / "heads" / "heads.ipynb").symlink_to(ROOT / "solutions" / "heads" / "heads.py")
    found = staged(tmp_path, "heads", tmp_path)
    assert found.status == "error" and "is a symbolic link" in found.message.render("en")
    (tmp_path / "heads" / "heads.ipynb").unlink()
    write_notebook(tmp_path / "heads" / "heads.ipynb", [], markdown="no code at all")
    found = staged(tmp_path, "heads", tmp_path)
    assert found.status == "not_attempted"
    assert found.message.render("en") == "heads/heads.ipynb holds no code for `heads`"
    os.unlink(tmp_path / "heads" / "heads.ipynb")
    for name in ("a.ipynb", "b.ipynb"):
        write_notebook(tmp_path / name, [("x = 1", ["heads"])])
    found = staged(tmp_path, "heads", tmp_path)
    assert found.status == "error" and "more than one notebook (a.ipynb, b.ipynb)" in found.message.render("en")
    assert staged(tmp_path, "masks", tmp_path).status == "not_attempted"   # no cell is tagged masks


class _Tree:
    """Just enough of GitHub's git trees and blobs for `fetch_exercises`: a commit's files by path."""

    def __init__(self, files: dict[str, bytes]):
        self.files = files
        self.fetched: list[str] = []

    def tree(self, owner, repo, sha, recursive=False):
        prefix = "" if sha == "root" else sha + "/"
        entries = {}
        for path, data in self.files.items():
            if path.startswith(prefix):
                name, _, rest = path[len(prefix):].partition("/")
                entries[name] = ({"mode": "040000", "type": "tree", "sha": prefix + name} if rest else
                                 {"mode": "100644", "type": "blob", "sha": prefix + name, "size": len(data)})
                if recursive and rest:   # every path below, as GitHub's ?recursive=1 lists it
                    entries.update({f"{name}/{k}": v for k, v in self.tree(owner, repo, prefix + name, True).items()})
        return entries

    def blob(self, owner, repo, sha, size):
        self.fetched.append(sha)
        return self.files[sha]


def test_classroom_takes_an_exercises_notebooks_and_nothing_else(tmp_path):
    github = _Tree({"exercises/heads/heads.ipynb": b"{}", "exercises/transformer.ipynb": b"{}",
                    "exercises/heads/scratch.ipynb": b"{}", "exercises/nope/nope.ipynb": b"{}",
                    "notes.ipynb": b"{}", "exercises/heads/heads.py": b"x = 1\n"})
    target = tmp_path / "sub"
    fetch_exercises(github, "org", "repo", "root", COURSE, target)
    taken = sorted(p.relative_to(target).as_posix() for p in target.rglob("*") if p.is_file())
    assert taken == ["heads/heads.ipynb", "heads/heads.py", "transformer.ipynb"]
    assert sorted(github.fetched) == ["exercises/heads/heads.ipynb", "exercises/heads/heads.py",
                                      "exercises/transformer.ipynb"]


def test_grader_check_shows_a_refused_notebook_in_one_line(tmp_path):

    repo = tmp_path / "repo"
    write_handout(COURSE, repo)
    write_notebook(repo / "exercises" / "heads" / "heads.ipynb", [("%matplotlib inline", [])])
    env = {**os.environ, "PYTHONPATH": str(repo / "checker")}
    env.pop("GITHUB_STEP_SUMMARY", None)
    done = subprocess.run([sys.executable, "-m", "grader", "check", "heads"], capture_output=True,
                          text=True, cwd=repo, env=env, timeout=300)
    assert done.returncode == 1
    assert "✘ heads  heads/heads.ipynb, cell 2: `%matplotlib inline` is IPython syntax" in done.stdout
