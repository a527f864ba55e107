"""The instructor's overrides: `grader override` stores the points with a comment, its time and author, in a table
of their own; they are applied after grading (criteria, then exercises, then the whole), shown in the student's
report (written again, no grading) and in class.html, kept across `--regrade`, listed by `--list`, removed by
`--remove`; one whose criterion the grading no longer holds is reported as not applied, never dropped.

The first half applies overrides to rows written by hand; the second grades a class of two once and corrects it."""

from __future__ import annotations

import csv
import io
import json
import sqlite3
from pathlib import Path

import jsonschema
import pytest

from conftest import ROOT, course_copy, run_grader
from grader.course import load_course
from grader.batch.grades import Override, grade_of
from grader.report.model import SCHEMA_PATH
from grader.review.selftest import mutant_text

COURSE = load_course(ROOT)


def rows(points: dict[tuple[str, str], tuple[float, float]]) -> list[dict]:
    return [{"exercise": ex, "criterion": c, "points": p, "max_points": m} for (ex, c), (p, m) in points.items()]


def override(exercise: str = "", criterion: str = "", points: float = 0.0, student: str = "ann") -> Override:
    return Override(student, exercise, criterion, points, "why", "tutor", "2026-12-02T10:00:00+00:00")


GRADED = rows({("heads", "split_shape"): (1, 1), ("heads", "split_values"): (0, 2), ("rope", "custom_base"): (0, 1),
               ("rope", "norm_preserved"): (1, 1)})


def test_criteria_then_exercises_then_the_whole():
    grade = grade_of(COURSE, GRADED, [override("heads", "split_values", 2)])
    split_values = grade.criterion_points[("heads", "split_values")]
    assert (grade.graded, grade.raw, grade.exercise_points["heads"], split_values) == (2, 4, 3, 2)
    assert grade.overrides[0].graded == 0 and grade.overrides[0].applied
    # an exercise's override sets its total, whatever its criteria's say; the whole grade's sets the total
    both = grade_of(COURSE, GRADED, [override("heads", "", 1.5), override("heads", "split_values", 2),
                                     override("", "", 9)])
    assert [(a.override.target, a.graded) for a in both.overrides] == [("heads/split_values", 0), ("heads", 3),
                                                                      ("", 2.5)]
    assert (both.exercise_points["heads"], both.raw) == (1.5, 9)
    capped = grade_of(COURSE, GRADED, [override("heads", "split_shape", 5)])
    assert capped.criterion_points[("heads", "split_shape")] == 1, "never above what the criterion is worth"


def test_an_override_of_what_the_grading_no_longer_holds_is_kept_and_not_applied():
    grade = grade_of(COURSE, GRADED, [override("heads", "gone", 1), override("no_such_exercise", "", 3)])
    assert grade.raw == grade.graded == 2
    assert [(a.override.target, a.applied) for a in grade.overrides] == [("heads/gone", False),
                                                                         ("no_such_exercise", False)]
    record = grade.record()["overrides"][0]
    assert record["applied"] is False and record["graded_points"] is None
    assert "not applied" in grade.overrides[0].said().texts()["en"]


# --- A class of two, graded once and corrected -------------------------------------------------------------------

MUTANT = ROOT / "solutions" / "heads" / "mutants" / "merge_no_transpose"


@pytest.fixture(scope="module")
def corrected(tmp_path_factory):
    folder = tmp_path_factory.mktemp("overrides")
    course = course_copy(folder / "course", ["heads"])
    room = folder / "class"
    for name, text in (("ann", (ROOT / "solutions" / "heads" / "heads.py").read_text()),
                       ("bo", mutant_text(load_course(ROOT), "heads", MUTANT))):
        (room / name / "heads").mkdir(parents=True)
        (room / name / "heads" / "heads.py").write_text(text)
    room.chmod(0o700)
    (folder / "roster.csv").write_text("id,name,email\n2024001,Ann Lee,ann@uni.edu\n2024002,Bo Chen,bo@uni.edu\n")
    out = folder / "out"
    batch = ["--course", str(course), "batch", str(room), "--out", str(out), "--sandbox", "basic", "--jobs", "2",
             "--roster", str(folder / "roster.csv")]
    first = run_grader(*batch, timeout=900)
    assert first.returncode == 0, first.stderr[-3000:]
    return course, out, batch


def report_of(out: Path, name: str) -> dict:
    return json.loads((out / "students" / name / "report.json").read_text(encoding="utf-8"))


def grades_of(out: Path) -> dict[str, dict]:
    return {r["submission"]: r for r in csv.DictReader(io.StringIO((out / "grades.csv").read_text()))}


@pytest.mark.slow
def test_an_override_is_stored_shown_and_survives_a_regrade(corrected):
    course, out, batch = corrected
    failed = [c for c in report_of(out, "bo")["exercises"][0]["criteria"] if c["status"] != "passed"]
    assert failed, "the mutant fails a criterion"
    target = failed[0]
    done = run_grader("--course", str(course), "override", str(out), "2024002", f"heads/{target['id']}",
                      "--points", f"{target['max_points']:g}", "--comment", "the transpose is there, line 12",
                      "--author", "Dr. Wu")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"override stored: heads/{target['id']} of bo earns {target['max_points']:g}")

    def check() -> None:
        report = report_of(out, "bo")
        jsonschema.validate(report, json.loads(SCHEMA_PATH.read_text()))
        criterion = next(c for c in report["exercises"][0]["criteria"] if c["id"] == target["id"])
        assert criterion["points"] == 0 and criterion["status"] == target["status"], "the verdict stays the grader's"
        grade = report["grade"]
        assert grade["raw"] == report["score"] + target["max_points"] == grade["final"]
        [applied] = grade["overrides"]
        said = (applied["points"], applied["graded_points"], applied["comment"], applied["author"], applied["applied"])
        assert said == (target["max_points"], 0, "the transpose is there, line 12", "Dr. Wu", True)
        page = (out / "students" / "bo" / "report.html").read_text(encoding="utf-8")
        assert "the transpose is there, line 12" in page and '<div class="total">' + f"{grade['final']:g} / 10" in page
        assert "the transpose is there, line 12" in (out / "students" / "bo" / "scorecard.md").read_text()
        row = grades_of(out)["bo"]
        assert (float(row["heads (10)"]), float(row["raw (10)"]), float(row["total (10)"])) == (grade["raw"],) * 3
        klass = (out / "class.html").read_text(encoding="utf-8")
        assert 'class="flag overridden"' in klass and "Dr. Wu" in klass and 'data-target="heads/' in klass

    check()
    graded_before = report_of(out, "bo")["started_at"]
    again = run_grader(*batch, "--regrade", timeout=900)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "2 submissions: 2 graded" in again.stdout
    assert report_of(out, "bo")["started_at"] != graded_before, "graded again"
    check()


@pytest.mark.slow
def test_overrides_are_listed_and_removed(corrected):
    course, out, _ = corrected
    whole = run_grader("--course", str(course), "override", str(out), "ann", "--points", "9", "--comment", "late fix")
    assert whole.returncode == 0, whole.stderr
    assert report_of(out, "ann")["grade"]["final"] == 9
    listing = run_grader("--course", str(course), "override", "--list", str(out / "gradebook.sqlite"))
    assert listing.returncode == 0, listing.stderr
    lines = listing.stdout.splitlines()
    assert any(line.startswith("Ann Lee (2024001) the whole grade: 9 (graded 10) · late fix · ") for line in lines)
    assert lines[-1].endswith("overrides")
    removed = run_grader("--course", str(course), "override", str(out), "ann", "--remove")
    assert removed.returncode == 0, removed.stderr
    assert "grade" not in report_of(out, "ann"), "nothing corrects it now: the score is the grade"
    assert grades_of(out)["ann"]["total (10)"] == "10"
    again = run_grader("--course", str(course), "override", str(out), "ann", "--remove")
    assert again.returncode == 2 and "ann has no override of the whole grade" in again.stderr


@pytest.mark.slow
def test_an_override_of_a_criterion_no_longer_graded_is_reported_not_dropped(corrected):
    """A criterion course.toml dropped (here: an override stored for one the grading does not hold)."""
    course, out, batch = corrected
    db = sqlite3.connect(out / "gradebook.sqlite")
    with db:
        db.execute("INSERT OR REPLACE INTO overrides VALUES ('ann', 'heads', 'retired_criterion', 1, 'old', 'tutor', "
                   "'2026-11-01T00:00:00+00:00')")
    db.close()
    resumed = run_grader(*batch, timeout=600)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert "override heads/retired_criterion of Ann Lee (2024001) is not applied" in resumed.stderr
    listing = run_grader("--course", str(course), "override", "--list", str(out), "--lang", "zh")
    assert "未生效" in listing.stdout and "heads/retired_criterion" in listing.stdout
    [stale] = report_of(out, "ann")["grade"]["overrides"]
    assert (stale["criterion"], stale["applied"]) == ("retired_criterion", False)
    assert 'class="not-applied"' in (out / "class.html").read_text(encoding="utf-8")


def test_bad_overrides_are_refused_in_one_line():
    """Checked before anything is stored: a target the course does not have, more points than it is worth, no
    comment, a student the gradebook does not hold (a hand-written gradebook: no grading)."""
    import tempfile

    from grader.batch.gradebook import Gradebook, grader_key
    from grader.judge.session import criteria_of

    with tempfile.TemporaryDirectory() as tmp:
        course = load_course(course_copy(Path(tmp) / "course", ["heads"]))
        out = Path(tmp) / "out"
        book = Gradebook(out / "gradebook.sqlite")
        points = course.exercise("heads").points
        book.store("ann", "h", grader_key(course), {"score": 10, "max_score": 10, "percent": 100, "status": "passed",
                                                    "message": {"en": "m", "zh": "m"}, "graded_at": "t",
                                                    "report_dir": None},
                   [{"exercise": "heads", "criterion": m.id, "kind": m.kind, "status": "passed",
                     "points": points[m.id], "max_points": points[m.id], "message": {"en": "m", "zh": "m"}}
                    for m in criteria_of("heads")])
        book.close()
        base = ["--course", str(course.root), "override", str(out)]
        for args, said in [(["ann", "rope", "--points", "1", "--comment", "x"], "the course has no exercise rope"),
                           (["ann", "heads/nope", "--points", "1", "--comment", "x"], "has no criterion nope"),
                           (["ann", "heads/split_shape", "--points", "3", "--comment", "x"], "more than heads/split"),
                           (["ann", "heads", "--points", "3"], "needs --points N and --comment TEXT"),
                           (["zoe", "--points", "3", "--comment", "x"], "no submission or roster student zoe"),
                           (["ann", "--points", "-1", "--comment", "x"], "not a number of points")]:
            done = run_grader(*base, *args)
            assert done.returncode == 2 and said in done.stderr, (args, done.stderr)
        book = Gradebook(out / "gradebook.sqlite")
        assert book.overrides() == []
        book.close()
        missing = run_grader("--course", str(course.root), "override", str(Path(tmp) / "nowhere"), "--list")
        assert missing.returncode == 2 and "holds no gradebook.sqlite" in missing.stderr
