"""A course written by an instructor, outside the checkout, with nothing but the grader's commands and a text editor:
`grader new-exercise` makes two exercises, one of them is edited to judge something real (its input left as it was,
a second criterion with a mutant that fails it), and the course grades a class with `grader --course DIR batch`, passes
`grader --course DIR selftest` with 0 problems, and keeps its probes and solutions out of a hostile student's reach as
the bundled course does (tests/test_isolation.py's attacks, pointed at this course)."""

from __future__ import annotations

import csv
import os
import re
import shutil
import tempfile
from pathlib import Path

import pytest

from conftest import ROOT, run_grader
from grader.course import load_course
from grader.review.unidiff import make_diff
from grader.sandbox.levels import strict_missing
from test_isolation import SECRET_SEED, Course, _exercise, _exercises, _explorer, _grade, _hunting_submission, _report

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(bool(strict_missing()), reason=f"strict sandbox unavailable: {strict_missing()}")]

AS_GENERATED, EDITED = "scale", "pure_double"
DOCS = ROOT / "docs" / "authoring.md"


def documented(language: str, first_line: str) -> str:
    """The code block of docs/authoring.md in `language` that opens with `first_line`: the test makes the edit the
    walkthrough shows, so the page's code is code that works."""
    blocks = re.findall(rf"^```{language}\n(.*?)^```$", DOCS.read_text(encoding="utf-8"), re.M | re.S)
    found = [block for block in blocks if block.startswith(first_line)]
    assert len(found) == 1, f"docs/authoring.md has {len(found)} {language} blocks opening with {first_line!r}"
    return found[0]


# The instructor's edit of EDITED, as docs/authoring.md shows it: the probe records each input as the student's call
# left it, and a second criterion, worth 2 points, compares it with the input drawn. Its positive control is
# `requires`: it is judged only once `doubles` passed, so a function that returned nothing cannot earn it.
RECORD_INPUT = next(line for line in documented("python", "SHAPES = ").splitlines(keepends=True)
                    if "record_input_after" in line)
LEAVES_INPUT = "\n\n" + documented("python", '@criterion("leaves_input"')
IN_PLACE_MANIFEST = documented("toml", "# solutions/double_it/mutants/in_place/manifest.toml")
# the bug's line, as the page's change.diff adds it
IN_PLACE = next(line[1:] for line in documented("console", "$ mkdir solutions/double_it/mutants/in_place")
                .splitlines(keepends=True) if line.startswith("+    return"))


def edit_pure_double(root: Path) -> None:
    """What the instructor does by hand, as docs/authoring.md shows it."""
    mine = root / "solutions" / EDITED
    probes = mine / "probes.py"
    text = probes.read_text(encoding="utf-8")
    assert text.endswith("student.double(handed)))\n")
    probes.write_text(text + RECORD_INPUT, encoding="utf-8")
    with (mine / "criteria.py").open("a", encoding="utf-8") as criteria:
        criteria.write(LEAVES_INPUT)
    solution = (mine / f"{EDITED}.py").read_text(encoding="utf-8")
    mutant = mine / "mutants" / "in_place"
    mutant.mkdir()
    buggy = solution.replace("    return x * 2\n", IN_PLACE)
    assert buggy != solution
    (mutant / "change.diff").write_text(make_diff(solution, buggy, f"a/solutions/{EDITED}/{EDITED}.py",
                                                  f"b/solutions/{EDITED}/{EDITED}.py"), encoding="utf-8")
    (mutant / "manifest.toml").write_text(IN_PLACE_MANIFEST, encoding="utf-8")
    # the skeleton's mutant squares: `doubles` fails, so the new criterion, which requires it, is blocked
    squares = mine / "mutants" / "squares_instead" / "manifest.toml"
    squares.write_text(squares.read_text(encoding="utf-8") + 'blocked = ["leaves_input"]\n', encoding="utf-8")
    config = root / "course.toml"
    text = config.read_text(encoding="utf-8")
    assert text.endswith("[exercise.points]\ndoubles = 1\n")   # EDITED's table is the last one
    config.write_text(text + "leaves_input = 2\n", encoding="utf-8")


@pytest.fixture(scope="module")
def course_root():
    """The course, in a folder of its own under /tmp that every uid may enter (so that at the basic level the
    positive controls find its files), made by the grader's own command."""
    top = Path(tempfile.mkdtemp(prefix="grader-authored-", dir="/tmp"))
    os.chmod(top, 0o755)
    root = top / "course"
    for exercise_id in (AS_GENERATED, EDITED):
        done = run_grader("new-exercise", exercise_id, "--course", str(root))
        assert done.returncode == 0, done.stderr
    edit_pure_double(root)
    yield root
    shutil.rmtree(top, ignore_errors=True)


def submission(folder: Path, files: dict[str, str]) -> None:
    for exercise_id, text in files.items():
        (folder / exercise_id).mkdir(parents=True)
        (folder / exercise_id / f"{exercise_id}.py").write_text(text, encoding="utf-8")


def test_a_class_is_graded_with_the_course(course_root, tmp_path):
    course = load_course(course_root)
    assert [(ex.id, ex.max_points) for ex in course.exercises] == [(AS_GENERATED, 1.0), (EDITED, 3.0)]
    solution = {ex.id: course.solution(ex).read_text(encoding="utf-8") for ex in course.exercises}
    stub = {ex.id: course.stub(ex).read_text(encoding="utf-8") for ex in course.exercises}
    klass = tmp_path / "class"
    # alice: both right. bob: the first untouched, the second doubling in place (the edit's bug). carol: a NaN for
    # every value (the skeleton's criterion fails closed) and the second written another way.
    submission(klass / "alice", solution)
    submission(klass / "bob", {AS_GENERATED: stub[AS_GENERATED],
                               EDITED: solution[EDITED].replace("    return x * 2\n", IN_PLACE)})
    submission(klass / "carol", {AS_GENERATED: solution[AS_GENERATED].replace("return x * 2",
                                                                              'return x * float("nan")'),
                                 EDITED: solution[EDITED].replace("return x * 2", "return x + x")})
    out = tmp_path / "out"
    done = run_grader("--course", str(course_root), "batch", str(klass), "--out", str(out), "--jobs", "2")
    assert done.returncode == 0, done.stdout + done.stderr
    with (out / "grades.csv").open(encoding="utf-8", newline="") as fh:
        rows = {row["id"]: row for row in csv.DictReader(fh)}
    graded = {name: (row[f"{AS_GENERATED} (1)"], row[f"{EDITED} (3)"], row["total (4)"], row["percent"])
              for name, row in rows.items()}
    assert graded == {"alice": ("1", "3", "4", "100"), "bob": ("0", "1", "1", "25"),
                      "carol": ("0", "3", "3", "75")}, graded
    reports = {name: _report(out / "students" / name) for name in rows}
    bob = {c["id"]: c["status"] for c in _exercise(reports["bob"], EDITED)["criteria"]}
    assert bob == {"doubles": "passed", "leaves_input": "failed"}
    assert _exercise(reports["bob"], AS_GENERATED)["status"] == "not_attempted"
    carol = _exercise(reports["carol"], AS_GENERATED)["criteria"][0]
    assert carol["status"] == "failed" and "NaN" in carol["message"]["en"], carol
    # in Chinese from the course's own catalog (solutions/<id>/zh.po), as the skeleton wrote it
    assert carol["title"]["zh"] == "double(x) 返回 2 * x" and "与 2 * x 不一致" in carol["message"]["zh"], carol


def test_the_course_passes_its_selftest(course_root):
    done = run_grader("--course", str(course_root), "selftest", timeout=900)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "2 solutions, 2 variants, 3 mutants; 0 problems" in done.stdout, done.stdout
    # the edit's criterion is proven: the in-place mutant fails it, and nothing else
    assert re.search(r"^\| `in_place`: .* \| · \| ✗ \|$", done.stdout, re.M), done.stdout


def test_the_selftest_refuses_the_course_when_a_criterion_catches_no_mutant(course_root, tmp_path):
    """The positive control of the selftest above: without its mutant, the edit's criterion is unproven."""
    copy = tmp_path / "course"
    shutil.copytree(course_root, copy)
    shutil.rmtree(copy / "solutions" / EDITED / "mutants" / "in_place")
    done = run_grader("--course", str(copy), "selftest", "--exercise", EDITED, timeout=900)
    assert done.returncode == 1, done.stdout + done.stderr
    assert f"criterion {EDITED}/leaves_input catches no mutant itself" in done.stdout, done.stdout


@pytest.fixture
def classroom(tmp_path):
    room = tmp_path / "srv-class"
    room.mkdir()
    os.chmod(tmp_path, 0o755)
    return room


@pytest.mark.parametrize("level", ["strict", "basic"])
def test_a_hostile_file_cannot_read_the_courses_solutions_or_probes(course_root, classroom, level):
    """tests/test_isolation.py's explorer, handed in for this course's exercise: in the box it finds none of the
    course's paths or files (its solution, probes.py, criteria.py, course.toml); the positive control, at the basic
    level, finds them."""
    course = Course(course_root, AS_GENERATED, (EDITED,))
    out = classroom / "reports" / "alice"
    done = _grade(_explorer(classroom, out, course), out, "--exercise", EDITED, "--sandbox", level, course=course)
    assert done.returncode == 0, done.stderr
    tail = _exercise(_report(out), EDITED)["run"]["output_tail"]
    assert "EXPLORED" in tail, tail
    if level == "strict":
        assert int(tail.split("EXPLORED ")[1].split()[0]) > 20, tail
        assert "LEAK" not in tail and "READ" not in tail, tail
    else:
        assert "LEAK" in tail, tail


def test_no_other_exercises_probe_code_nor_the_seed_reaches_student_code(course_root, tmp_path):
    """tests/test_isolation.py's hunter, in this course's first exercise: the course's probe code is staged
    root-only, the running exercise's alone (its own module is found loaded: the positive control)."""
    course = Course(course_root, AS_GENERATED, (EDITED,))
    out = tmp_path / "out"
    done = _grade(_hunting_submission(tmp_path / "alice", course), out, *_exercises(course), "--sandbox", "strict",
                  env={"GRADER_SEED": str(SECRET_SEED)}, course=course)
    assert done.returncode == 0, done.stderr
    host = _exercise(_report(out), AS_GENERATED)
    tail = host["run"]["output_tail"]
    assert tail.count("HUNTED") == 2, tail
    assert f"OWN grader.probes.{AS_GENERATED}" in tail, tail
    assert re.search(r"PROBE-SEED \d+ FOUND", tail), tail
    assert not [line for line in tail.splitlines() if line.startswith("LEAK")], tail
    assert host["score"] == host["max_score"], host["message"]
