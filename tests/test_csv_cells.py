"""Every CSV file the grader writes is a table a spreadsheet shows, never one it runs: a class whose folders,
roster and course title are formulas gets grades.csv, canvas.csv, moodle.csv, similarity.csv and rejudge-diff.csv
in which no cell starts a formula, whichever separator the file is opened with (`,`, `;` as Excel does in German,
French, Spanish, Italian and Russian locales, a tab, `|`), while the grader's own numbers, a negative one
included, stay numbers. No grading: the gradebook is written by hand."""

from __future__ import annotations

import csv
import io
import re
from types import SimpleNamespace

import pytest

from conftest import course_copy
from grader.batch.gradebook import Gradebook, grader_key, grades_csv
from grader.batch.roster import Student
from grader.batch.run import similarity_csv
from grader.classroom.lms import canvas_csv, moodle_csv
from grader.course import load_course
from grader.grading.rejudge import diff_csv
from grader.judge.session import criteria_of
from grader.render.safe_text import csv_cell

HOSTILE = ["=1+1", '=HYPERLINK("http://x","y")', "@SUM(1)", "+SUM(1)", "-1+2", "a;=1+1", "a\t=1", "a\r=1+1",
           "\r=1+1", "a|=1", "a,=1", 'a;"=1', 'a; "=1', "a;;@x", " =1+1", '"=1+1', "\uff1d1+1", "-2", "b;-3"]
SEPARATORS = [",", ";", "\t", "|"]
# A cell a spreadsheet runs: a trigger at its start, after any spaces and double quotes.
FORMULA = re.compile("^[\\s\"]*[=+\\-@\t\r\uff1d\uff0b\uff0d\uff20]")
NUMBER = re.compile(r"-?\d+(\.\d+)?(e[+-]\d+)?")   # the grader's own numbers, as `:g` writes them


def formula_cells(text: str) -> list[tuple[str, str]]:
    """(separator, cell) for each cell that starts a formula when `text` is split on each separator; a whole cell
    that is a number is a number, not a formula."""
    return [(sep, cell) for sep in SEPARATORS for row in csv.reader(io.StringIO(text, newline=""), delimiter=sep)
            for cell in row if FORMULA.match(cell) and not NUMBER.fullmatch(cell)]


def test_the_check_finds_the_formulas_an_unguarded_writer_leaves():
    """The positive control: the same names written by a plain csv.writer are formulas under every separator."""
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerows([["x", name] for name in HOSTILE])
    found = formula_cells(out.getvalue())
    assert {sep for sep, _ in found} == set(SEPARATORS)
    assert (";", "=1+1") in found and ("|", "=1") in found


@pytest.mark.parametrize("name", HOSTILE)
def test_a_cell_is_text_for_every_separator_and_keeps_what_it_said(name):
    cell = csv_cell(name)
    assert formula_cells(cell) == [] and formula_cells(f"x,{cell},y") == []
    assert cell.replace("'", "") == name.replace("\r", "\\r").replace("\t", "\\t")


def test_the_graders_numbers_stay_numbers():
    assert [csv_cell(v) for v in (-2.0, 0.0, 7.5, 10, 1234567, None)] == ["-2", "0", "7.5", "10", "1234567", ""]
    assert csv_cell("-2") == "'-2", "the same characters from a person are text"
    assert csv_cell(float("-inf")) == "'-inf", "no number a spreadsheet reads as a formula"


@pytest.fixture
def hostile_class(tmp_path):
    """A gradebook of submissions named HOSTILE, a roster of students named HOSTILE in every column, and a course
    whose title is a formula."""
    folder = course_copy(tmp_path / "course", ["heads"])
    toml = (folder / "course.toml").read_text()
    (folder / "course.toml").write_text(re.sub(r"(?m)^name = .*$", 'name = "=1+1;@SUM(1)"', toml, count=1))
    course = load_course(folder)
    key = grader_key(course)
    book = Gradebook(tmp_path / "out" / "gradebook.sqlite")
    metas = criteria_of("heads")
    points = course.exercises[0].points
    roster = []
    for i, name in enumerate(HOSTILE):
        rows = [{"exercise": "heads", "criterion": m.id, "kind": m.kind, "status": "passed",
                 "points": points[m.id], "max_points": points[m.id], "message": {"en": name, "zh": name}}
                for m in metas]
        score = sum(r["points"] for r in rows)
        book.store(f"{name}{i}", f"hash{i}", key, {
            "score": score, "max_score": score, "percent": 100.0, "status": "graded",
            "message": {"en": name, "zh": name}, "graded_at": "t", "report_dir": None}, rows)
        columns = dict.fromkeys(("canvas_id", "sis_user_id", "sis_login_id", "section", "idnumber", "username"),
                                name)
        roster.append(Student(f"{name}{i}", name, f"{name}@uni.edu", columns))
    book.store("-9", "hash-9", key, {"score": 0, "max_score": 1, "percent": 0, "status": "unreadable",
                                      "message": {"en": HOSTILE[5], "zh": HOSTILE[5]}, "graded_at": "t",
                                      "report_dir": None}, [])
    yield course, book, roster
    book.close()


def test_every_class_file_is_text_for_every_separator(hostile_class):
    course, book, roster = hostile_class
    pair = [SimpleNamespace(exercise="heads", similarity=0.93, first_share=0.95, second_share=0.93,
                            first=SimpleNamespace(submission=a, student=b), second=SimpleNamespace(submission=b,
                                                                                                   student=a))
            for a, b in zip(HOSTILE, reversed(HOSTILE), strict=True)]
    diff = [{"submission": name, "exercise": "heads", "criterion": name, "old_points": 2.0, "new_points": -2.0,
             "old_status": "passed", "new_status": name, "how": name} for name in HOSTILE]
    files = {"grades.csv": grades_csv(course, book, grader_key(course)),
             "grades.csv with a roster": grades_csv(course, book, grader_key(course), roster),
             "canvas.csv": canvas_csv(course, book, roster), "moodle.csv": moodle_csv(course, book, roster),
             "similarity.csv": similarity_csv(SimpleNamespace(similar=pair)), "rejudge-diff.csv": diff_csv(diff)}
    for name, text in files.items():
        assert len(text.splitlines()) > len(HOSTILE), name
        assert formula_cells(text) == [], name
    grades = list(csv.DictReader(io.StringIO(files["grades.csv"])))
    assert {r["submission"] for r in grades} >= {"'=1+10", "a;'=1+15", "'-217", "'-9"}
    assert {r["total (10)"] for r in grades if r["status"] != "unreadable"} == {"10"}
    canvas = list(csv.reader(io.StringIO(files["canvas.csv"])))
    assert canvas[0][-1] == "'=1+1;'@SUM[1]" and canvas[1][-1] == "10"
    assert list(csv.DictReader(io.StringIO(files["rejudge-diff.csv"])))[0]["new_points"] == "-2"
