"""Deadlines, late work and extensions: course.toml's [policy] read and checked; each day (or hour) begun after the
due date costs its share of the maximum points, up to the cap, and after the cutoff nothing counts; an extension
moves a student's due date and cutoff; a submission's time comes from the roster, a --submitted-at file, the push's
arrival or Gradescope's metadata, never from a file's modification time (unknown: no penalty, and it says so).

The second half grades one small class once, with a late policy, and reads its grades.csv, reports and class.html."""

from __future__ import annotations

import csv
import datetime as dt
import io
import json
import os
import shutil
from pathlib import Path

import jsonschema
import pytest

from conftest import ROOT, course_copy, run_grader
from grader.course import load_course
from grader.batch.gradebook import grader_key
from grader.batch.grades import grade_of
from grader.policy import (FROM_GRADESCOPE, FROM_ROSTER, LATE, LATEST, ON_TIME, TOO_LATE, UNKNOWN, Dates, Policy,
                           PolicyError, Submitted, gradescope_lateness, lateness, load_policy, parse_moment,
                           read_submission_times, student_dates)
from grader.report.model import SCHEMA_PATH, SCHEMA_VERSION
from grader.batch.roster import RosterError, read_roster

TZ = dt.timezone(dt.timedelta(hours=8))
DUE = dt.datetime(2026, 12, 1, 23, 59, 59, tzinfo=TZ)
POLICY_TOML = """
[policy]
due = "2026-12-01T23:59:59+08:00"
late_penalty_percent = 10
per = "day"
max_penalty_percent = 30
cutoff = "2026-12-08T23:59:59+08:00"
"""
RATE = Policy(DUE, 10.0, "day", 30.0, DUE + dt.timedelta(days=7))


def policy_course(folder: Path, exercises: list[str], text: str = POLICY_TOML) -> Path:
    course_copy(folder, exercises)
    with open(folder / "course.toml", "a", encoding="utf-8") as fh:
        fh.write(text)
    return folder


# --- The rules ----------------------------------------------------------------------------------------------------

def at(**delta) -> Submitted:
    return Submitted(DUE + dt.timedelta(**delta), FROM_ROSTER)


@pytest.mark.parametrize("submitted, state, units, percent", [
    (at(hours=-1), ON_TIME, 0, 0.0),
    (at(seconds=0), ON_TIME, 0, 0.0),                 # at the due date itself: on time
    (at(seconds=1), LATE, 1, 10.0),                   # a day begun counts whole
    (at(days=1), LATE, 1, 10.0),
    (at(days=1, seconds=1), LATE, 2, 20.0),
    (at(days=6), LATE, 6, 30.0),                      # capped at 30%
    (at(days=7), LATE, 7, 30.0),                      # at the cutoff itself: still counts
    (at(days=7, seconds=1), TOO_LATE, 0, 100.0),      # after the cutoff nothing counts
    (None, UNKNOWN, 0, 0.0),                          # no time known: no penalty
])
def test_each_day_begun_costs_its_share_up_to_the_cap(submitted, state, units, percent):
    late = lateness(RATE, Dates(RATE.due, RATE.cutoff), submitted)
    assert (late.state, late.units, late.penalty_percent) == (state, units, percent)
    earned = 20.0
    expected = {ON_TIME: 0.0, UNKNOWN: 0.0, LATE: 50 * percent / 100, TOO_LATE: earned}[state]
    assert late.penalty(earned, 50) == expected   # a share of the maximum (50), never more than was earned
    assert late.penalty(1.0, 50) <= 1.0


def test_per_hour():
    hourly = Policy(DUE, 5.0, "hour", 100.0)
    late = lateness(hourly, Dates(DUE, None), at(hours=2, minutes=1))
    assert (late.state, late.units, late.penalty_percent) == (LATE, 3, 15.0)
    far = lateness(hourly, Dates(DUE, None), at(days=30))
    assert (far.state, far.penalty_percent) == (LATE, 100.0)   # no cutoff: it counts, at the capped penalty
    assert "3 hours late" in late.said().texts()["en"] and "迟交 3 小时" in late.said().texts()["zh"]


@pytest.mark.parametrize("extension, due, cutoff", [
    ("", DUE, DUE + dt.timedelta(days=7)),
    ("3", DUE + dt.timedelta(days=3), DUE + dt.timedelta(days=10)),
    ("1.5", DUE + dt.timedelta(days=1.5), DUE + dt.timedelta(days=8.5)),
    ("2026-12-04", DUE + dt.timedelta(days=3), DUE + dt.timedelta(days=10)),    # the due date's time of day
    ("2026-12-04T12:00", dt.datetime(2026, 12, 4, 12, tzinfo=TZ), None),        # the due date's zone
    ("2026-12-04T12:00Z", dt.datetime(2026, 12, 4, 12, tzinfo=dt.UTC), None),
    ("2026-11-20", DUE, DUE + dt.timedelta(days=7)),                            # never earlier
])
def test_an_extension_moves_the_due_date_and_the_cutoff_with_it(extension, due, cutoff):
    dates = student_dates(RATE, extension)
    assert dates.due == due
    assert dates.cutoff == (cutoff if cutoff is not None else RATE.cutoff + (due - DUE))
    assert dates.extension == extension.strip()


def test_a_late_submission_with_and_without_an_extension():
    submitted = at(days=2, hours=1)
    plain = lateness(RATE, student_dates(RATE, ""), submitted)
    extended = lateness(RATE, student_dates(RATE, "3"), submitted)
    assert (plain.state, plain.penalty_percent) == (LATE, 30.0)
    assert (extended.state, extended.penalty_percent) == (ON_TIME, 0.0)
    assert "with an extension (3)" in extended.said().texts()["en"]


def test_the_policy_is_read_and_checked(tmp_path):
    course = load_course(policy_course(tmp_path / "ok", ["heads"]))
    assert load_policy(course) == Policy(DUE, 10.0, "day", 30.0, DUE + dt.timedelta(days=7))
    assert load_policy(load_course(course_copy(tmp_path / "none", ["heads"]))) is None
    for i, (text, said) in enumerate([('due = "next friday"', "is not an ISO 8601 time"),
                                      ("late_penalty_percent = 150", "is not a percentage"),
                                      ('per = "week"', 'choose "day" or "hour"'),
                                      ("deadline = 1", "no setting deadline"),
                                      ('due = "2026-12-01T00:00Z"\ncutoff = "2026-11-01T00:00Z"', "not before it")]):
        bad = load_course(policy_course(tmp_path / f"bad{i}", ["heads"], f"\n[policy]\n{text}\n"))
        with pytest.raises(PolicyError, match=said) as raised:
            load_policy(bad)
        assert raised.value.said.texts()["zh"] != raised.value.said.texts()["en"]


def test_changing_the_policy_grades_nothing_again(tmp_path):
    """The grader key leaves [policy] out: a penalty is applied to grades, it changes no grading."""
    plain = load_course(course_copy(tmp_path / "plain", ["heads"]))
    with_policy = load_course(policy_course(tmp_path / "policy", ["heads"]))
    other = load_course(policy_course(tmp_path / "other", ["heads"], POLICY_TOML.replace("= 10", "= 25")))
    assert grader_key(plain) == grader_key(with_policy) == grader_key(other)
    (tmp_path / "policy" / "course.toml").write_text(
        (tmp_path / "policy" / "course.toml").read_text().replace("seed = 20261130", "seed = 7"))
    assert grader_key(load_course(tmp_path / "policy")) != grader_key(plain), "a grading setting still counts"


def test_roster_extensions_and_times_are_checked_when_read(tmp_path):
    roster = tmp_path / "roster.csv"
    roster.write_text("ID,Name,Extension,Submitted At\n1,A,3,2026-12-01T20:00:00+08:00\n2,B,2026-12-04,\n")
    first, second = read_roster(roster)
    assert (first.column("extension"), first.column("submitted_at"), second.column("extension")) == \
        ("3", "2026-12-01T20:00:00+08:00", "2026-12-04")
    for text, said in [("id,extension\n1,soon\n", "line 2: extension 'soon' is neither"),
                       ("id,extension\n1,-2\n", "neither a number of days"),
                       ("id,submitted_at\n1,yesterday\n", "submitted_at 'yesterday' is not a time")]:
        roster.write_text(text)
        with pytest.raises(RosterError, match=said):
            read_roster(roster)


def test_a_submitted_at_file_is_read_and_checked(tmp_path):
    times = tmp_path / "times.csv"
    times.write_text("submission,submitted_at\nann.zip,2026-12-01T20:00:00+08:00\n\nbo,2026-12-02\n")
    assert read_submission_times(times) == {"ann.zip": "2026-12-01T20:00:00+08:00", "bo": "2026-12-02"}
    for text, said in [("name,when\nann,2026-12-01\n", "must name the columns"),
                       ("id,submitted_at\nann,tomorrow\n", "line 2: submitted_at 'tomorrow'"),
                       ("id,submitted_at\n,2026-12-01\n", "line 2: no id")]:
        times.write_text(text)
        with pytest.raises(PolicyError, match=said):
            read_submission_times(times)


def test_out_of_range_inputs_are_refused_when_read_with_the_file_and_line(tmp_path):
    """An extension of 1e10 days, or a time in 9999, would overflow a date after the whole class was graded."""
    roster = tmp_path / "roster.csv"
    head = "id,extension,submitted_at\n1,,\n2,3,\n"
    roster.write_text(head + "3,3650,2999-12-31T23:59:59Z\n4,2999-12-31,1970-01-01T00:00:00Z\n")
    assert [s.column("extension") for s in read_roster(roster)] == ["", "3", "3650", "2999-12-31"], "the edges"
    for row, said in [("4,1e10,", "roster.csv, line 4: extension '1e10' is out of range (at most 3650 days)"),
                      ("4,3651,", "line 4: extension '3651' is out of range (at most 3650 days)"),
                      ("4,9999-12-31,", "line 4: extension '9999-12-31' is out of range (a time from 1970 to 2999)"),
                      ("4,,9999-12-31T23:59:59Z", "line 4: submitted_at '9999-12-31T23:59:59Z' is out of range"),
                      ("4,,1969-12-31T23:59:59Z", "line 4: submitted_at '1969-12-31T23:59:59Z' is out of range")]:
        roster.write_text(head + row + "\n")
        with pytest.raises(RosterError) as raised:
            read_roster(roster)
        assert said in str(raised.value)
        assert raised.value.said.texts()["zh"] != raised.value.said.texts()["en"]
    times = tmp_path / "times.csv"
    times.write_text("id,submitted_at\nann,2026-12-01\nbo,9999-12-31\n")
    with pytest.raises(PolicyError, match=r"times.csv, line 3: submitted_at '9999-12-31' is out of range \(a time"):
        read_submission_times(times)
    course = load_course(policy_course(tmp_path / "course", ["heads"], '\n[policy]\ndue = "9999-12-31"\n'))
    with pytest.raises(PolicyError, match=r"due = '9999-12-31' is out of range \(a time from 1970 to 2999\)"):
        load_policy(course)


def test_a_batch_with_an_out_of_range_extension_is_refused_before_grading(tmp_path):
    room = tmp_path / "class"
    (room / "ann" / "heads").mkdir(parents=True)
    room.chmod(0o700)
    (tmp_path / "roster.csv").write_text("id,name,email,extension\nann,Ann,ann@uni.edu,1e10\n")
    course = policy_course(tmp_path / "course", ["heads"])
    done = run_grader("--course", str(course), "batch", str(room), "--out", str(tmp_path / "out"), "--sandbox",
                      "basic", "--roster", str(tmp_path / "roster.csv"), timeout=300)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().endswith("roster.csv, line 2: extension '1e10' is out of range (at most 3650 days)")
    assert "Traceback" not in done.stderr and not (tmp_path / "out").exists(), "nothing graded, nothing written"


@pytest.mark.parametrize("extension", ["1e10", "999999999", "9999-12-31"])
def test_an_extension_read_before_the_bound_moves_the_dates_no_further_than_a_policy_reckons(extension):
    dates = student_dates(RATE, extension)
    assert dates.due == LATEST and dates.cutoff == LATEST + (RATE.cutoff - DUE)
    assert lateness(RATE, dates, at(days=400)).state == ON_TIME


@pytest.mark.parametrize("when", ["9999-12-31T23:59:59+00:00", "9999-12-31T23:59:59-12:00", "0001-01-01T00:00+14:00"])
def test_a_time_out_of_range_is_not_reckoned_with_and_says_so(when):
    late = lateness(RATE, student_dates(RATE, "3"), Submitted(parse_moment(when), FROM_ROSTER))
    assert (late.state, late.penalty_percent) == (UNKNOWN, 0.0)
    assert late.record()["submitted_at"] == when.replace("00:00+14", "00:00:00+14")
    said = late.said().texts()
    assert "out of range (a time from 1970 to 2999)" in said["en"] and when[:10] in said["en"] and said["zh"]


def test_a_time_out_of_range_in_the_gradebook_still_gets_the_class_files_written(tmp_path):
    """A gradebook written before times were checked when read: the class files are written, and the row says it."""
    from grader.batch.gradebook import Gradebook
    from grader.batch.run import _write_class_files
    from grader.batch.roster import Student
    from grader.judge.session import criteria_of

    course = load_course(policy_course(tmp_path / "course", ["heads"]))
    out = tmp_path / "out"
    book = Gradebook(out / "gradebook.sqlite")
    points = course.exercises[0].points
    rows = [{"exercise": "heads", "criterion": m.id, "kind": m.kind, "status": "passed", "points": points[m.id],
             "max_points": points[m.id], "message": {"en": "ok", "zh": "ok"}} for m in criteria_of("heads")]
    for name in ("ann", "bo"):
        book.store(name, f"hash-{name}", grader_key(course), {
            "score": 10.0, "max_score": 10.0, "percent": 100.0, "status": "graded", "message": {"en": "m", "zh": "m"},
            "graded_at": "t", "report_dir": None}, rows)
    book.set_submitted({"ann": Submitted(parse_moment("9999-12-31T23:59:59-12:00"), FROM_ROSTER),
                        "bo": Submitted(DUE + dt.timedelta(days=1), FROM_ROSTER)})
    book.close()
    roster = [Student("ann", "Ann", "ann@uni.edu", {"extension": "1e10", "idnumber": "1"}),
              Student("bo", "Bo", "bo@uni.edu", {"extension": "", "idnumber": "2"})]
    _write_class_files(load_course(course.root), out, "en", roster, False, ("moodle",))
    grades = rows_of(out)
    assert (grades["ann"]["late"], grades["ann"]["penalty"], grades["ann"]["total (10)"]) == ("time unknown", "0", "10")
    assert grades["ann"]["submitted_at"] == "9999-12-31T23:59:59-12:00", "the row shows the time it did not use"
    assert (grades["bo"]["late"], grades["bo"]["penalty"]) == ("late", "1"), "the classmate's penalty, as alone"
    moodle = {r["ID number"]: r["Final grade" if "Final grade" in r else course.name] for r in
              csv.DictReader(io.StringIO((out / "moodle.csv").read_text()))}
    assert moodle == {"1": "10", "2": "9"}
    assert 'data-late="unknown"' in (out / "class.html").read_text(encoding="utf-8")


# --- Gradescope's submission_metadata.json ------------------------------------------------------------------------

def metadata(created: str, users: list[dict], due="2026-12-01T23:59:59.000000+08:00", late=None) -> dict:
    """As Gradescope's documentation lays it out: the assignment's dates, and each submitting user's own."""
    return {"id": 123456, "created_at": created, "submission_method": "upload", "previous_submissions": [],
            "assignment": {"due_date": due, "late_due_date": late, "id": 25828, "course_id": 1234,
                           "release_date": "2026-11-01T00:00:00.000000+08:00", "title": "Transformer",
                           "total_points": "24.0", "group_size": None, "group_submission": False},
            "users": users}


def user(name: str, due: str | None = None, late: str | None = None) -> dict:
    own = {"release_date": "2026-11-01T00:00:00.000000+08:00", "due_date": due or "2026-12-01T23:59:59.000000+08:00",
           "late_due_date": late}
    return {"email": f"{name}@uni.edu", "id": len(name), "name": name, "sid": "1", "assignment": own}


def test_gradescope_dates_come_from_its_metadata_extensions_included():
    two_days_late = "2026-12-03T20:00:00.000000+08:00"
    plain = gradescope_lateness(RATE, metadata(two_days_late, [user("ann")]))
    assert (plain.state, plain.units, plain.submitted.how, plain.dates.extension) == (LATE, 2, FROM_GRADESCOPE, "")
    assert plain.dates.cutoff is None   # Gradescope set no late due date: the policy's cutoff is not guessed
    extended = gradescope_lateness(RATE, metadata(two_days_late, [user("bo", due="2026-12-04T23:59:59+08:00")]))
    assert (extended.state, extended.dates.extension) == (ON_TIME, "2026-12-04T23:59+08:00")
    group = gradescope_lateness(RATE, metadata(two_days_late, [user("cy"), user("di", due="2026-12-05T00:00+08:00")]))
    assert group.state == ON_TIME, "a group's due date is the latest of its members'"
    closed = gradescope_lateness(RATE, metadata(two_days_late, [user("ed", late="2026-12-02T23:59:59+08:00")]))
    assert closed.state == TOO_LATE
    nobody = gradescope_lateness(RATE, metadata(two_days_late, []))
    assert (nobody.state, nobody.dates.due) == (LATE, DUE)   # the assignment's own dates
    with pytest.raises(KeyError):
        gradescope_lateness(RATE, {"assignment": {"due_date": "2026-12-01T00:00Z"}})


def test_gradescope_results_score_the_final_grade(tmp_path):
    """With [policy], run_autograder's results carry the penalised score and say why; without, nothing changes."""
    from hostile_report import hostile_report

    from grader.classroom.gradescope import METADATA, late_work
    from grader.render.exports import render_gradescope

    course = load_course(policy_course(tmp_path / "course", ["heads"]))
    report = hostile_report()
    (tmp_path / METADATA).write_text(json.dumps(metadata("2026-12-02T10:00:00+08:00", [user("ann")])))
    assert late_work(course, report, tmp_path) == []
    assert report.grade["late"]["state"] == LATE and report.grade["penalty"] == min(report.score,
                                                                                     report.max_score * 0.1)
    results = json.loads(render_gradescope(report, "zh"))
    assert results["score"] == report.grade["final"] == round(report.score - report.grade["penalty"], 4)
    assert "迟交 1 天" in results["output"]
    jsonschema.validate(report.to_dict(), json.loads(SCHEMA_PATH.read_text()))

    (tmp_path / METADATA).write_text("{not json")
    unread = hostile_report()
    notes = late_work(course, unread, tmp_path)
    assert unread.grade is None and "no late penalty applied" in notes[0].texts()["en"]
    plain = hostile_report()
    assert late_work(load_course(course_copy(tmp_path / "plain", ["heads"])), plain, tmp_path) == []
    assert plain.grade is None and json.loads(render_gradescope(plain))["score"] == plain.score


def test_the_penalty_is_taken_from_the_points_earned_with_the_overrides():
    course = load_course(ROOT)
    rows = [{"exercise": "heads", "criterion": "split_shape", "points": 1.0, "max_points": 1.0}]
    late = lateness(RATE, Dates(DUE, None), at(days=1))
    grade = grade_of(course, rows, (), late)
    assert (grade.graded, grade.raw, grade.penalty, grade.final) == (1.0, 1.0, 1.0, 0.0)   # 10% of 156 > 1
    assert grade.percent == 0.0


# --- A class graded once, with a late policy ----------------------------------------------------------------------

EXERCISES = ["heads"]
ROSTER = ("id,name,email,extension,submitted_at\n"
          "ann,Ann,ann@uni.edu,,2026-12-01T20:00:00+08:00\n"      # on time
          "ben,Ben,ben@uni.edu,,2026-12-03T08:00:00+08:00\n"      # 2 days late: 20%
          "cat,Cat,cat@uni.edu,3,2026-12-03T08:00:00+08:00\n"     # the same, with 3 more days: on time
          "dan,Dan,dan@uni.edu,2026-12-02,2026-12-12T08:00:00\n"  # after his cutoff (moved a day): nothing counts
          "eve,Eve,eve@uni.edu,,\n"                               # no time known: no penalty, and it says so
          "fay,Fay,fay@uni.edu,,2026-12-01T20:00:00+08:00\n")     # the --submitted-at file says otherwise
TIMES = "id,submitted_at\nfay,2026-12-02T05:00:00+08:00\nzed,2026-12-01T00:00:00Z\n"


@pytest.fixture(scope="module")
def late_class(tmp_path_factory):
    folder = tmp_path_factory.mktemp("late-class")
    course = policy_course(folder / "course", EXERCISES)
    room = folder / "class"
    solution = ROOT / "solutions" / "heads" / "heads.py"
    for name in ("ann", "ben", "cat", "dan", "eve", "fay"):
        (room / name / "heads").mkdir(parents=True)
        shutil.copyfile(solution, room / name / "heads" / "heads.py")
        os.utime(room / name / "heads" / "heads.py", (0, 0))   # 1970: a modification time decides nothing
    room.chmod(0o700)
    (folder / "roster.csv").write_text(ROSTER)
    (folder / "times.csv").write_text(TIMES)
    out = folder / "out"
    done = run_grader("--course", str(course), "batch", str(room), "--out", str(out), "--jobs", "2", "--sandbox",
                      "basic", "--roster", str(folder / "roster.csv"), "--submitted-at", str(folder / "times.csv"),
                      timeout=1200)
    assert done.returncode == 0, done.stderr[-3000:]
    return course, out, done


def rows_of(out: Path) -> dict[str, dict]:
    return {r["id"]: r for r in csv.DictReader(io.StringIO((out / "grades.csv").read_text(encoding="utf-8")))}


@pytest.mark.slow
def test_the_csv_shows_raw_penalty_and_final(late_class):
    course, out, done = late_class
    rows = rows_of(out)
    full = sum(load_course(course).exercise("heads").points.values())
    expected = {"ann": (0.0, "on time"), "ben": (0.2 * full, "late"), "cat": (0.0, "on time"),
                "dan": (full, "after the cutoff"), "eve": (0.0, "time unknown"), "fay": (0.1 * full, "late")}
    for student, (penalty, late) in expected.items():
        r = rows[student]
        assert (float(r["raw (10)"]), float(r["penalty"]), float(r["total (10)"]), r["late"]) == \
            (full, penalty, full - penalty, late), student
    assert rows["fay"]["submitted_at"] == "2026-12-02T05:00:00+08:00", "the --submitted-at file wins"
    assert rows["dan"]["submitted_at"] == "2026-12-12T08:00:00+08:00", "a time without a zone is in the due date's"
    assert rows["eve"]["submitted_at"] == "" and rows["ben"]["percent"] == "80"
    assert "--submitted-at names zed, which fits no submission" in done.stderr


@pytest.mark.slow
def test_each_report_says_how_the_grade_came(late_class):
    _, out, _ = late_class
    schema = json.loads(SCHEMA_PATH.read_text())
    ben = json.loads((out / "students" / "ben" / "report.json").read_text(encoding="utf-8"))
    jsonschema.validate(ben, schema)
    assert ben["schema_version"] == SCHEMA_VERSION and ben["score"] == 10, "the criteria's score stays as graded"
    grade = ben["grade"]
    assert (grade["graded"], grade["raw"], grade["penalty"], grade["final"], grade["late"]["units"]) == \
        (10, 10, 2, 8, 2)
    assert grade["late"]["how"] == "roster" and "2 days late" in grade["late"]["message"]["en"]
    eve = json.loads((out / "students" / "eve" / "report.json").read_text(encoding="utf-8"))
    assert eve["grade"]["late"]["state"] == "unknown" and "no late penalty applied" in \
        eve["grade"]["late"]["message"]["en"]
    scorecard = (out / "students" / "ben" / "scorecard.md").read_text(encoding="utf-8")
    assert scorecard.startswith("### Grading report: ben — **8 / 10** (80%)") and "2 days late" in scorecard
    page = (out / "students" / "dan" / "report.html").read_text(encoding="utf-8")
    assert '<div class="total">0 / 10' in page and "nothing counts" in page


@pytest.mark.slow
def test_the_class_page_shows_raw_penalty_and_final_in_the_total_cell(late_class):
    from browser import parse_dom, with_class

    _, out, _ = late_class
    dom = parse_dom((out / "class.html").read_text(encoding="utf-8"))
    totals = {}
    for row in with_class(dom, "tr", "student"):
        raw = with_class(row, "span", "raw")
        chip = [s.get("data-late") for s in row.iter("span") if s.get("data-late")]
        totals[row.find(".//span[@class='who']").text] = (raw[0].get("data-raw"), raw[0].get("data-penalty"),
                                                          raw[0].get("data-final"), chip)
    assert totals["Ben (ben)"] == ("10.0", "2.0", "8.0", ["late"])
    assert totals["Cat (cat)"] == ("10.0", "0.0", "10.0", [])
    assert totals["Dan (dan)"] == ("10.0", "10.0", "0.0", ["too_late"])
    assert totals["Eve (eve)"][3] == ["unknown"]


@pytest.mark.slow
def test_a_changed_policy_regrades_nothing_and_moves_the_penalty(late_class):
    """The instructor halves the rate after the batch: the next run grades nothing, and ben loses 10% not 20%."""
    course, out, _ = late_class
    (course / "course.toml").write_text((course / "course.toml").read_text().replace(
        "late_penalty_percent = 10", "late_penalty_percent = 5"))
    try:
        done = run_grader("--course", str(course), "batch", str(out.parent / "class"), "--out", str(out),
                          "--sandbox", "basic", "--roster", str(out.parent / "roster.csv"), timeout=600)
        assert done.returncode == 0, done.stderr[-2000:]
        assert "6 submissions: 0 graded, 6 already in the gradebook" in done.stdout
        rows = rows_of(out)
        assert (rows["ben"]["penalty"], rows["ben"]["total (10)"]) == ("1", "9")
        assert rows["fay"]["submitted_at"] == "2026-12-02T05:00:00+08:00", "a time recorded stays recorded"
        assert json.loads((out / "students" / "ben" / "report.json").read_text())["grade"]["final"] == 9
    finally:
        (course / "course.toml").write_text((course / "course.toml").read_text().replace(
            "late_penalty_percent = 5", "late_penalty_percent = 10"))


def test_parse_moment_reads_what_an_instructor_writes():
    assert parse_moment("2026-12-01T23:59:59Z") == dt.datetime(2026, 12, 1, 23, 59, 59, tzinfo=dt.UTC)
    assert parse_moment("2026-12-01 08:00", TZ) == dt.datetime(2026, 12, 1, 8, tzinfo=TZ)
    assert parse_moment("2026-12-01", TZ, dt.time(9)) == dt.datetime(2026, 12, 1, 9, tzinfo=TZ)
    with pytest.raises(ValueError):
        parse_moment("next friday")
