"""Re-judging: a class graded once, then its course changed (a criterion's points in course.toml, another's
tolerance in its code), judged again from the observations its grading kept, with no student code run."""

from __future__ import annotations

import csv
import json
import re
import shutil
from pathlib import Path

import pytest

from conftest import ROOT, course_copy, run_grader
from grader.course import load_course
from grader.review.selftest import mutant_text

# end to end: every test here grades in a sandbox (`pytest -m "not slow"` leaves them out)
pytestmark = pytest.mark.slow

EXERCISES = ["heads", "rope"]
POINTS = ("heads", "split_values", 2, 5)                       # exercise, criterion, old points, new points
LOOSENED = ("rope", "custom_base")                             # its tolerance loosened in the copy's own code
TIMELESS = ("started_at", "duration_s", "wall_s", "cpu_s", "max_rss_mb")


def _class(folder: Path) -> Path:
    """The reference solution, a mutant that fails custom_base alone, and the bundled sample."""
    course = load_course(ROOT)
    for name in ("reference", "mutant"):
        for ex_id in EXERCISES:
            ex = course.exercise(ex_id)
            target = folder / name / ex_id / ex.file
            target.parent.mkdir(parents=True)
            shutil.copyfile(course.solution(ex), target)
    rope = course.exercise("rope")
    (folder / "mutant" / "rope" / rope.file).write_text(
        mutant_text(course, "rope", ROOT / "solutions" / "rope" / "mutants" / "base_hardcoded"))
    shutil.copytree(ROOT / "examples" / "submissions" / "sample", folder / "sample")
    return folder


def _changed_course(folder: Path) -> Path:
    """The course with split_values worth more and custom_base's tolerance loosened in its own criteria module."""
    course_copy(folder, EXERCISES)
    toml = folder / "course.toml"
    text = toml.read_text()
    text, count = re.subn(rf"(?m)^{POINTS[1]} = {POINTS[2]}$", f"{POINTS[1]} = {POINTS[3]}", text)
    assert count == 1
    toml.write_text(text)
    source = (ROOT / "solutions" / "rope" / "criteria.py").read_text()
    body = source[source.index("def test_custom_base"):]
    body = body[:body.index("\n@criterion")]
    assert "problem = difference(out, want, atol=VALUE_TOLERANCE)" in body
    loosened = body.replace("problem = difference(out, want, atol=VALUE_TOLERANCE)",
                            "problem = difference(out, want, atol=10.0)")
    solutions = folder / "solutions"   # the checkout's, but for rope's criteria module
    solutions.unlink()
    solutions.mkdir()
    for entry in (ROOT / "solutions").iterdir():
        if entry.name != "rope":
            (solutions / entry.name).symlink_to(entry)
    (solutions / "rope").mkdir()
    for entry in (ROOT / "solutions" / "rope").iterdir():
        if entry.name != "criteria.py":
            (solutions / "rope" / entry.name).symlink_to(entry)
    (solutions / "rope" / "criteria.py").write_text(source.replace(body, loosened))
    return folder


def _rows(out: Path) -> dict[tuple[str, str, str], float]:
    """submission, exercise, criterion -> points, from each student's report.json."""
    found = {}
    for report in sorted((out / "students").glob("*/report.json")):
        data = json.loads(report.read_text())
        for e in data["exercises"]:
            for c in e["criteria"]:
                found[(report.parent.name, e["id"], c["id"])] = c["points"]
    return found


PAGES = ("report.json", "report.html", "scorecard.md")


def _written(out: Path, name: str) -> dict[str, tuple[int, int]]:
    """Each report file of a student's folder: which file it is (inode) and when it was written."""
    found = {page: (out / "students" / name / page).stat() for page in PAGES}
    return {page: (info.st_ino, info.st_mtime_ns) for page, info in found.items()}


def _timeless(value):
    if isinstance(value, dict):
        return {k: _timeless(v) for k, v in value.items() if k not in TIMELESS}
    if isinstance(value, list):
        return [_timeless(v) for v in value]
    return value


@pytest.mark.slow
def test_rejudge_matches_a_full_regrade_and_runs_no_student_code(tmp_path, monkeypatch):
    from grader.batch import pool, run as batch
    from grader.grading import pipeline as grading
    from grader.batch.run import run_batch
    from grader.grading.rejudge import DIFF_FILE

    submissions = _class(tmp_path / "class")
    first = course_copy(tmp_path / "course", EXERCISES)
    out = tmp_path / "out"
    done = run_grader("--course", str(first), "batch", str(submissions), "--out", str(out), "--jobs", "2")
    assert done.returncode == 0, done.stderr
    before = _rows(out)
    assert before[("mutant", *LOOSENED)] == 0 and before[("reference", *LOOSENED)] > 0
    # Re-judged with nothing changed, the grading's own report files are found current: none is written again.
    graded = {name: _written(out, name) for name in ("reference", "mutant", "sample")}
    same = run_batch(load_course(first), submissions, out, 2, False, "strict", "en", rejudge=True)
    assert same["rejudged"] == 3 and same["diff"] == []
    assert {name: _written(out, name) for name in graded} == graded
    corrected = run_grader("--course", str(first), "override", str(out), "sample", "heads/round_trip", "--points",
                           "1", "--comment", "checked by hand")
    assert corrected.returncode == 0, corrected.stderr

    changed = _changed_course(tmp_path / "changed")
    full = tmp_path / "full"
    shutil.copytree(out, full)
    regraded = run_grader("--course", str(changed), "batch", str(submissions), "--out", str(full), "--regrade")
    assert regraded.returncode == 0, regraded.stderr

    # Nothing that starts a sandbox may run: the supervisor, a pre-started sandbox, a grading process.
    started = []

    def refuse(what):
        def call(*args, **kwargs):
            started.append(what)
            raise AssertionError(f"{what} started during a re-judging")
        return call

    for module, name in ((grading, "run_jobs"), (grading, "SandboxSession"), (batch, "_engine"),
                         (pool.WarmPool, "__init__")):
        monkeypatch.setattr(module, name, refuse(name))
    with pytest.raises(AssertionError):   # the positive control: a grading is stopped by these
        run_batch(load_course(changed), submissions, tmp_path / "control", 1, True, "strict", "en")
    assert started == ["_engine"]
    started.clear()

    outcome = run_batch(load_course(changed), submissions, out, 2, False, "strict", "en", rejudge=True)
    assert started == []
    assert outcome["rejudged"] == 3 and outcome["afresh"] == []

    after, expected = _rows(out), _rows(full)
    assert after == expected
    want = {key for key in expected if expected[key] != before.get(key)}
    assert {(name, *POINTS[:2]) for name in ("reference", "mutant", "sample")} <= want
    assert ("mutant", *LOOSENED) in want
    with open(out / DIFF_FILE, newline="") as fh:
        diff = list(csv.DictReader(fh))
    assert {(d["submission"], d["exercise"], d["criterion"]) for d in diff} == want
    for d in diff:
        key = (d["submission"], d["exercise"], d["criterion"])
        assert (float(d["old_points"]), float(d["new_points"])) == (before[key], expected[key])
        assert d["how"] == "rejudged"
    # grades.csv as a full regrade writes it, the override still applied; each report the same but for times
    assert (out / "grades.csv").read_text() == (full / "grades.csv").read_text()
    assert "checked by hand" in (out / "students" / "sample" / "report.json").read_text()
    for name in ("reference", "mutant", "sample"):
        ours = json.loads((out / "students" / name / "report.json").read_text())
        theirs = json.loads((full / "students" / name / "report.json").read_text())
        assert _timeless(ours) == _timeless(theirs)

    # Re-judged again with nothing changed: each report comes out as it is on the disk, so no file is written again,
    # but the one whose page was changed by hand since, which is written whole again.
    html = out / "students" / "mutant" / "report.html"
    kept_html = html.read_text()
    html.write_text("edited by hand\n")
    before_again = {name: _written(out, name) for name in ("reference", "mutant")}
    again = run_batch(load_course(changed), submissions, out, 2, False, "strict", "en", rejudge=True)
    assert again["rejudged"] == 3 and again["diff"] == []
    assert _written(out, "reference") == before_again["reference"]
    assert all(_written(out, "mutant")[page] != before_again["mutant"][page] for page in PAGES)
    assert html.read_text() == kept_html


@pytest.mark.slow
def test_rejudge_grades_afresh_what_the_probes_no_longer_match(tmp_path):
    """A kept record from other probe code (its version changed) is graded from scratch, and the output says so."""
    import sqlite3

    submissions = tmp_path / "class"
    shutil.copytree(ROOT / "examples" / "submissions" / "sample", submissions / "sample")
    course = course_copy(tmp_path / "course", ["heads"])
    out = tmp_path / "out"
    assert run_grader("--course", str(course), "batch", str(submissions), "--out", str(out)).returncode == 0
    db = sqlite3.connect(out / "gradebook.sqlite")
    (record,), = db.execute("SELECT record FROM observed").fetchall()
    record = json.loads(record)
    record["exercises"]["heads"]["probe_version"] = "older probes"
    db.execute("UPDATE observed SET record=?", (json.dumps(record),))
    db.commit()
    db.close()
    done = run_grader("--course", str(course), "batch", str(submissions), "--out", str(out), "--rejudge")
    assert done.returncode == 0, done.stderr
    assert "0 submissions re-judged" in done.stdout
    assert "sample: graded again from scratch: the probes of heads changed since it was graded" in done.stdout
    assert "no grade changed" in done.stdout
    db = sqlite3.connect(out / "gradebook.sqlite")
    (fresh,), = db.execute("SELECT record FROM observed ORDER BY rowid DESC LIMIT 1").fetchall()
    assert json.loads(fresh)["exercises"]["heads"]["probe_version"] != "older probes"
