"""The class gradebook: an embedded SQLite database, one row per submission × criterion.

Rows are keyed by the submission's name, the hash of the files the grader reads, and the grader key
(grader version and a digest of course.toml), so a changed submission or a changed course is regraded
and an unchanged one is not. Each submission's rows are written in one transaction: a batch killed at
any moment leaves whole submissions or none. The tables, and how a gradebook of an earlier version is brought up
to date, are grader.batch.schema's.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import tomllib
import urllib.parse
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import grader
from markupsafe import Markup

from grader.course import COURSE_FILE, Course
from grader.nolinks import LINK, REGULAR, read_without_links
from grader.render.safe_text import csv_text
from grader.batch.catches import CatchTally, report_catches, tally
from grader.batch.grades import Grade, Override, course_max, exercise_max, grade_of
from grader.batch.manual import graded_answers, written_count
from grader.batch.schema import open_schema
from grader.i18n import LANGS
from grader.policy import Submitted, lateness, student_dates
from grader.batch.roster import Student, match
from grader.worker.protocol import Status

# A submission's status when the grader, not the submission, failed: no verdict, graded again next run.
GRADER_ERROR = Status.GRADER_ERROR   # a submission whose grading failed stands as its criteria do
# A submission whose grading killed the Dask worker running it, twice: final (never retried forever) until it
# changes or --regrade asks again.
KILLED_WORKERS = "killed_workers"
# A submission that holds nothing the grader may read (a link, an archive zipfile cannot open): final.
UNREADABLE = "unreadable"
# In grades.csv's `roster` column: a submission whose name fits no student of the roster.
NOT_IN_ROSTER = "not in roster"


def grader_key(course: Course) -> str:
    """The grader version and a digest of what course.toml sets, its [policy] table left out: deadlines and late
    penalties are applied to grades after grading, so setting or changing them grades nothing again. The digest is
    of the settings (canonical JSON), not of the text: a comment or a blank line changes no grading either."""
    settings = tomllib.loads((course.root / COURSE_FILE).read_text(encoding="utf-8"))
    settings.pop("policy", None)
    canonical = json.dumps(settings, sort_keys=True, ensure_ascii=False, default=str)
    return f"{grader.__version__}+{hashlib.sha256(canonical.encode()).hexdigest()[:10]}"


def content_hash(course: Course, submission: Path) -> str:
    """A hash of exactly what the grader reads: each exercise's contract file, or what stands in its place (a
    link is hashed as a link, never as its target's content), and where a notebook is graded instead of the file,
    the code taken from it (or why none could be): a changed notebook is a changed submission. Its written answers
    too, when it has any: an answer changed alone is a changed submission."""
    from grader.grading.pipeline import written_answers
    from grader.sandbox.staging import graded_code

    h = hashlib.sha256()
    for ex in course.exercises:
        h.update(f"{ex.id}/{ex.file}\0".encode())
        try:
            found = read_without_links(submission, (ex.id, ex.file), 2 << 20)
        except OSError:
            h.update(b"<unreadable>")
            continue
        if found.kind == REGULAR:
            h.update(found.data)
        else:
            h.update(f"<link {found.link}>".encode() if found.kind == LINK else b"<absent>")
        try:
            graded = graded_code(submission, ex.id, ex.file, course.stub(ex))
        except OSError:
            h.update(b"<unreadable notebook>")
            continue
        if graded.from_notebook:
            said = graded.data if graded.data is not None else str(graded.message).encode("utf-8", "backslashreplace")
            h.update(f"\0<notebook {graded.source}>\0".encode("utf-8", "backslashreplace") + said)
    answers = written_answers(submission, list(course.exercises))
    if any(text for texts in answers.values() for text in texts.values()):   # none: the hash is what it was before
        h.update(b"\0<answers>\0" + json.dumps(answers, sort_keys=True).encode())
    return h.hexdigest()[:20]


def said(stored: str) -> dict[str, str]:
    """A stored message in each language (a gradebook written before messages were bilingual holds English)."""
    try:
        value = json.loads(stored)
    except ValueError:
        value = None
    return value if isinstance(value, dict) and set(LANGS) <= set(value) else dict.fromkeys(LANGS, stored)


class EncodedRecord(str):
    """A record of kept observations already encoded as the gradebook stores it (`encoded_record`), by a process
    other than the batch's own (a re-judging's report process): stored as it is."""


def encoded_record(kept: dict | EncodedRecord) -> str:
    """The text the gradebook stores a record of kept observations as."""
    return kept if isinstance(kept, EncodedRecord) else json.dumps(kept, ensure_ascii=False)


class Gradebook:
    def __init__(self, path: Path):
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self.db = sqlite3.connect(path, isolation_level=None)  # explicit transactions below
        try:   # before WAL: a gradebook refused is left as it was, header and all
            open_schema(self.db, path)
        except BaseException:
            self.db.close()
            raise
        self.db.execute("PRAGMA journal_mode=WAL")

    def close(self) -> None:
        self.db.close()

    def is_graded(self, submission: str, chash: str, key: str) -> bool:
        """Stored for this content and grader, by a grading that reached a verdict: a grader-side failure is kept
        for the instructor to see but graded again by the next run."""
        row = self.db.execute("SELECT 1 FROM submissions WHERE submission=? AND content_hash=? AND grader_key=? "
                              "AND status != ?", (submission, chash, key, GRADER_ERROR)).fetchone()
        return row is not None

    def store(self, submission: str, chash: str, key: str, summary: dict, rows: list[dict],
              kept: dict | EncodedRecord | None = None) -> None:
        """Replace a submission's rows in one transaction, with the record of its kept observations when given."""
        self.store_many([(submission, chash, key, summary, rows, kept)])

    def store_many(self, gradings: list[tuple[str, str, str, dict, list[dict], dict | EncodedRecord | None]]) -> None:
        """`store` for several submissions (submission, chash, key, summary, rows, kept), in one transaction: one
        commit, and its wait for the disk, for all of them."""
        with self._transaction():
            for grading in gradings:
                self._store(*grading)

    def _store(self, submission: str, chash: str, key: str, summary: dict, rows: list[dict],
               kept: dict | EncodedRecord | None) -> None:
        self.db.execute("DELETE FROM results WHERE submission=? AND grader_key=?", (submission, key))
        self.db.execute("DELETE FROM observed WHERE submission=? AND grader_key=?", (submission, key))
        if kept is not None:
            self.db.execute("INSERT INTO observed VALUES (?,?,?,?)", (submission, chash, key, encoded_record(kept)))
        self.db.execute("INSERT OR REPLACE INTO submissions (submission, content_hash, grader_key, "
                        "score, max_score, "
                        "percent, status, message, report_dir, graded_at, sandbox) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                        (submission, chash, key, summary["score"], summary["max_score"], summary["percent"],
                         summary["status"], json.dumps(summary["message"], ensure_ascii=False),
                         summary.get("report_dir"), summary["graded_at"],
                         summary.get("sandbox")))
        self.db.executemany("INSERT INTO results VALUES (?,?,?,?,?,?,?,?,?,?)",
                            [(submission, chash, key, r["exercise"], r["criterion"], r["kind"], r["status"],
                              r["points"], r["max_points"], json.dumps(r["message"], ensure_ascii=False))
                             for r in rows])

    def _transaction(self):
        db = self.db

        class Tx:
            def __enter__(self):
                db.execute("BEGIN IMMEDIATE")

            def __exit__(self, exc_type, *_):
                db.execute("ROLLBACK" if exc_type else "COMMIT")

        return Tx()

    def submissions(self, key: str) -> list[sqlite3.Row]:
        self.db.row_factory = sqlite3.Row
        return self.db.execute("SELECT * FROM submissions WHERE grader_key=? ORDER BY submission", (key,)).fetchall()

    def results(self, key: str) -> list[sqlite3.Row]:
        self.db.row_factory = sqlite3.Row
        return self.db.execute("SELECT * FROM results WHERE grader_key=? ORDER BY submission, rowid", (key,)).fetchall()

    def observed(self, submission: str, chash: str) -> dict | None:
        """The newest record of kept observations of these files of the submission, whatever grader key it was
        graded under (re-judging is for a changed course)."""
        row = self.db.execute("SELECT record FROM observed WHERE submission=? AND content_hash=? ORDER BY rowid DESC "
                              "LIMIT 1", (submission, chash)).fetchone()
        return json.loads(row[0]) if row else None

    def latest_rows(self, submission: str) -> list[dict]:
        """The criteria rows of the submission's newest grading, whatever its grader key."""
        row = self.db.execute("SELECT grader_key FROM submissions WHERE submission=? ORDER BY rowid DESC LIMIT 1",
                              (submission,)).fetchone()
        if row is None:
            return []
        return [{"exercise": e, "criterion": c, "points": p, "status": st} for e, c, p, st in self.db.execute(
            "SELECT exercise, criterion, points, status FROM results WHERE submission=? AND grader_key=? "
            "ORDER BY rowid", (submission, row[0]))]

    # --- the instructor's overrides ------------------------------------------------------------------------------

    def set_override(self, override: Override) -> None:
        with self._transaction():
            self.db.execute("INSERT OR REPLACE INTO overrides VALUES (?,?,?,?,?,?,?)",
                            (override.student, override.exercise, override.criterion, override.points,
                             override.comment, override.author, override.at))

    def remove_override(self, student: str, exercise: str, criterion: str) -> bool:
        with self._transaction():
            gone = self.db.execute("DELETE FROM overrides WHERE student=? AND exercise=? AND criterion=?",
                                   (student, exercise, criterion))
        return gone.rowcount > 0

    def overrides(self) -> list[Override]:
        """Every override, by student, then in the order grader.batch.grades applies them."""
        self.db.row_factory = sqlite3.Row
        rows = self.db.execute("SELECT * FROM overrides ORDER BY student, exercise = '', criterion = '', exercise, "
                               "criterion").fetchall()
        return [Override(r["student"], r["exercise"], r["criterion"], r["points"], r["comment"], r["author"], r["at"])
                for r in rows]

    # --- when each submission was handed in ----------------------------------------------------------------------

    def set_submitted(self, times: dict[str, Submitted | None]) -> None:
        """Record when each submission was handed in; None forgets what was recorded (the time is not known)."""
        with self._transaction():
            self.db.executemany("DELETE FROM submitted WHERE submission=?",
                                [(name,) for name, s in times.items() if s is None])
            self.db.executemany("INSERT OR REPLACE INTO submitted VALUES (?,?,?)",
                                [(name, s.at.isoformat(), s.how) for name, s in times.items() if s is not None])

    def submitted(self) -> dict[str, Submitted]:
        from grader.policy import parse_moment

        return {name: Submitted(parse_moment(at), how)
                for name, at, how in self.db.execute("SELECT submission, at, how FROM submitted").fetchall()}

    # --- the files each submission was graded on, and the pairs found alike ---------------------------------------

    def store_sources(self, submission: str, chash: str, files: dict[str, str]) -> None:
        with self._transaction():
            self.db.execute("DELETE FROM sources WHERE submission=?", (submission,))
            self.db.executemany("INSERT INTO sources VALUES (?,?,?,?)",
                                [(submission, ex, chash, code) for ex, code in files.items()])

    def sources(self) -> dict[str, tuple[str, dict[str, str]]]:
        """submission -> (the content hash its files were stored with, exercise id -> code)."""
        found: dict[str, tuple[str, dict[str, str]]] = {}
        for name, ex, chash, code in self.db.execute("SELECT submission, exercise, content_hash, code FROM sources "
                                                     "ORDER BY submission, exercise"):
            found.setdefault(name, (chash, {}))[1][ex] = code
        return found

    def store_similar(self, pairs: list[dict]) -> None:
        with self._transaction():
            self.db.execute("DELETE FROM similar")
            self.db.executemany("INSERT INTO similar VALUES (?,?,?,?,?,?,?,?)",
                                [(p["exercise"], p["first"], p["second"], p["similarity"], p["first_share"],
                                  p["second_share"], p["first_html"], p["second_html"]) for p in pairs])

    def similar(self) -> list[sqlite3.Row]:
        self.db.row_factory = sqlite3.Row
        return self.db.execute("SELECT * FROM similar ORDER BY exercise, similarity DESC, first, second").fetchall()

    # --- settings, and what was sent where -----------------------------------------------------------------------

    def setting(self, key: str, default=None):
        row = self.db.execute("SELECT value FROM settings WHERE key=?", (key,)).fetchone()
        return json.loads(row[0]) if row else default

    def set_settings(self, values: dict) -> None:
        with self._transaction():
            self.db.executemany("INSERT OR REPLACE INTO settings VALUES (?,?)",
                                [(k, json.dumps(v, ensure_ascii=False)) for k, v in values.items()])

    def sent(self, target: str) -> dict[str, str]:
        return dict(self.db.execute("SELECT submission, digest FROM sent WHERE target=?", (target,)).fetchall())

    def mark_sent(self, target: str, submission: str, digest: str, at: str) -> None:
        with self._transaction():
            self.db.execute("INSERT OR REPLACE INTO sent VALUES (?,?,?,?)", (target, submission, digest, at))


# What a submission's row says it is, in grades.csv and class.html: the gradebook's status and its rows decide.
COMPLETE, PARTIAL, EMPTY, MISSING = "complete", "partial", "empty", "missing"
STANDING_WORDS = {COMPLETE: "complete", PARTIAL: "partial", EMPTY: "empty", UNREADABLE: "unreadable",
                  GRADER_ERROR: "grader error", KILLED_WORKERS: "killed workers", MISSING: "missing"}
# Standings with no verdict on the student's work: counted apart, never in the class's score distribution
# (and neither is a roster's student with no submission).
NOT_JUDGED = (EMPTY, UNREADABLE, GRADER_ERROR, KILLED_WORKERS, MISSING)
# A criterion the student tried and did not meet (not_attempted and blocked say nothing about the attempt).
FAILING = (Status.FAILED, Status.ERROR, Status.TIMEOUT, Status.CRASHED)


def standing(status: str, score: float, max_score: float, criterion_statuses: list[str]) -> str:
    """`complete` (full marks), `partial`, `empty` (no exercise attempted), or the stored status of a submission
    the grader reached no verdict on (`unreadable`, `grader_error`, `killed_workers`)."""
    if status in (UNREADABLE, GRADER_ERROR, KILLED_WORKERS):
        return status
    if all(s == Status.NOT_ATTEMPTED for s in criterion_statuses):
        return EMPTY
    return COMPLETE if max_score > 0 and score >= max_score else PARTIAL


def _results_by_submission(book: Gradebook, key: str) -> dict[str, list[sqlite3.Row]]:
    rows: dict[str, list[sqlite3.Row]] = {}
    for r in book.results(key):
        rows.setdefault(r["submission"], []).append(r)
    return rows


@dataclass
class GradedLine:
    """One line of the class files: a roster's student and/or a submission, its standing, and its grade (None when
    there is no verdict on the student's work)."""

    student: Student | None
    how: str                        # how the submission was matched to the roster (grades.csv's roster column)
    submission: sqlite3.Row | None  # None for a roster's student with no submission
    rows: list[sqlite3.Row]
    standing: str
    grade: Grade | None

    @property
    def name(self) -> str:
        return self.submission["submission"] if self.submission is not None else ""

    @property
    def reason(self) -> dict[str, str] | None:
        return reason(self.standing, self.submission["message"] if self.submission is not None else None)


def graded_lines(course: Course, book: Gradebook, key: str, roster: list[Student] | None = None
                 ) -> list[GradedLine]:
    """Every line of the class files in their order (see with_roster), each graded as grader.batch.grades says: the
    criteria's points, the written answers graded by hand (once reviewing has begun), the overrides, and under
    course.toml's [policy] the lateness of the time the gradebook holds for the submission, by the student's
    extension."""
    from grader.policy import load_policy

    policy = load_policy(course)
    results = _results_by_submission(book, key)
    overrides: dict[str, list[Override]] = {}
    for o in book.overrides():
        overrides.setdefault(o.student, []).append(o)
    submitted = book.submitted() if policy is not None and policy.due is not None else {}
    written = graded_answers(book, course)   # empty: no answer reviewed, written answers do not count yet
    lines = []
    for student, how, s in with_roster(book.submissions(key), roster):
        if s is None:
            lines.append(GradedLine(student, how, None, [], MISSING, None))
            continue
        rows = results.get(s["submission"], [])
        kind = standing(s["status"], s["score"], s["max_score"], [r["status"] for r in rows])
        if kind in NOT_JUDGED:
            lines.append(GradedLine(student, how, s, rows, kind, None))
            continue
        late = None
        if policy is not None and policy.due is not None:
            dates = student_dates(policy, student.column("extension") if student else "")
            late = lateness(policy, dates, submitted.get(s["submission"])) if dates else None
        grade = grade_of(course, rows, overrides.get(s["submission"], []), late,
                         written.get(s["submission"], {}) if written else None)
        kind = COMPLETE if grade.max_score > 0 and grade.raw >= grade.max_score else PARTIAL
        lines.append(GradedLine(student, how, s, rows, kind, grade))
    return lines


# grades.csv's `late` column: what the submission's time makes of it under course.toml's [policy].
LATE_WORDS = {"on_time": "on time", "late": "late", "too_late": "after the cutoff", "unknown": "time unknown"}


def grades_csv(course: Course, book: Gradebook, key: str, roster: list[Student] | None = None,
               lang: str = "en") -> str:
    """One line per submission, ready for a learning management system's import: the student, the status word,
    each exercise's points (its criteria's and, once reviewing has begun, its written answers') with the
    instructor's overrides, `raw` (their sum), the late `penalty`, `total` (the
    final grade) and its percent, the maxima in the headers; `late` and `submitted_at` under a late policy. Where
    there is no grade (no verdict on the student's work, or no submission) every grade cell is blank, never 0, and
    `reason` says why (in `lang`). With no roster the id is the submission's name; with one, its students come
    first in its order (matched as grader.batch.roster says), then the submissions it does not name, flagged in the
    `roster` column."""
    counts = written_count(book, course)
    most = course_max(course, counts)
    rows: list[list[str | float | None]] = [
        ["id", "name", "email", "submission", "status",
         *[f"{ex.id} ({exercise_max(ex, counts):g})" for ex in course.exercises], f"raw ({most:g})",
         "penalty", f"total ({most:g})", "percent", "late", "submitted_at", "reason", "roster",
         "content_hash"]]
    for line in graded_lines(course, book, key, roster):
        student, s, grade = line.student, line.submission, line.grade
        who = ([student.id, student.name, student.email] if student
               else ["" if roster else line.name, "", ""])
        late = grade.lateness if grade else None
        points: list[float | None] = ([None for _ in course.exercises] + [None, None, None, None] if grade is None
                                      else [*[grade.exercise_points[ex.id] for ex in course.exercises], grade.raw,
                                            grade.penalty, grade.final, grade.percent])
        why = line.reason
        rows.append([*who, line.name, STANDING_WORDS[line.standing], *points,
                     LATE_WORDS[late.state] if late else "",
                     late.submitted.at.isoformat(timespec="seconds") if late and late.submitted else "",
                     why[lang] if why else "", line.how, s["content_hash"] if s is not None else ""])
    return csv_text(rows)


def with_roster(submissions: list[sqlite3.Row], roster: list[Student] | None
                ) -> list[tuple[Student | None, str, sqlite3.Row | None]]:
    """(student, how matched, submission) in the order the class files list them: with no roster, each submission
    alone; with one, its students in its order (with None for a student with no submission), then the submissions
    it does not name (`not in roster` or `ambiguous`). Two submissions of one student are both listed and say so."""
    if roster is None:
        return [(None, "", s) for s in submissions]
    theirs: dict[str, list[tuple[sqlite3.Row, str]]] = {}
    strangers = []
    for s in submissions:
        student, how = match(s["submission"], roster)
        if student is None:
            strangers.append((None, how or NOT_IN_ROSTER, s))
        else:
            theirs.setdefault(student.id, []).append((s, how))
    listed: list[tuple[Student | None, str, sqlite3.Row | None]] = []
    for student in roster:
        found = theirs.get(student.id, [])
        listed.extend((student, how if len(found) == 1 else f"{how}; one of {len(found)} submissions", s)
                      for s, how in found)
        if not found:
            listed.append((student, "", None))
    return listed + strangers


# An exercise's state in a student's row of class.html, as its criteria's rows say (the report's own words for them):
# full marks, some points, tried and no point, or not started (every criterion `not_attempted`).
CELL_STATES = ("passed", "partial", "failed", "not_attempted")


@dataclass
class ExerciseCell:
    """One exercise of one submission."""

    exercise: str
    points: float
    max_points: float
    state: str                    # one of CELL_STATES
    link: str | None              # the exercise's section of the student's report.html
    overridden: bool = False      # the instructor's override set its points, or one of its criteria's


@dataclass
class Flag:
    """Something to look at beside a student's grade, shown in their row of class.html; it changes no point. Its
    words are class.html's label named after its kind; `others` are the students it concerns, each linked."""

    kind: str                                 # "identical": the same files, byte for byte, as `others`;
                                              # "similar": near-identical code in one exercise
                                              # (grader.review.similarity);
                                              # "overridden": the instructor changed the grade
    others: list[tuple[str, str]]             # (the name shown, its anchor in class.html: their row, the pair's
                                              # section, the override's line)


@dataclass
class StudentLine:
    """One submission as the class report lists it."""

    submission: str               # "" for a student of the roster with no submission
    student: str                  # the roster's name and id of the student ("" with no roster or no match)
    roster: str                   # how the submission was matched to the roster (grades.csv's roster column)
    standing: str                 # a key of STANDING_WORDS
    score: float
    max_score: float
    percent: float
    cells: list[ExerciseCell]     # in the course's exercise order
    report_link: str | None       # the student's report.html, relative to the class report's folder
    content_hash: str = ""        # the hash of the files the grader read ("" with no submission)
    reason: dict[str, str] | None = None   # why there is no verdict on the student's work (a NOT_JUDGED standing)
    flags: list[Flag] = field(default_factory=list)
    anchor: str = ""              # the id of the student's row in class.html
    grade: Grade | None = None    # graded, overrides, penalty, final (None without a verdict); score is its final

    @property
    def exercise_points(self) -> list[float]:
        return [cell.points for cell in self.cells]

    @property
    def shown(self) -> str:
        """The name a list of students shows: the roster's, else the submission's."""
        return self.student or self.submission

    @property
    def not_started(self) -> list[ExerciseCell]:
        """The exercises not started; every one when there is no verdict on the student's work."""
        return self.cells if self.reason else [cell for cell in self.cells if cell.state == "not_attempted"]


@dataclass
class ExerciseSummary:
    """One exercise over the submissions with a verdict."""

    id: str
    title: dict[str, str]
    max_points: float
    mean_points: float
    full_marks: int
    not_attempted: int


@dataclass
class FailedBy:
    """A submission that tried a criterion and did not meet it, and what it was told."""

    student: str                  # the name shown
    link: str | None              # the criterion's row in the student's report.html
    message: dict[str, str]


@dataclass
class CriterionRate:
    """One criterion over the submissions with a verdict."""

    exercise: str
    criterion: str
    title: dict[str, str]
    passed: int
    failed: int                   # tried and not met: failed, error, timeout, crashed
    total: int
    common_message: dict[str, str] | None = None   # the most common message of those that failed it
    common_count: int = 0                          # ... and how many failed it with that message
    failed_by: list[FailedBy] = field(default_factory=list)   # those that failed it, in the class's order

    @property
    def rate(self) -> float:
        return self.passed / self.total if self.total else 0.0


@dataclass
class ClassSummary:
    """What the class report draws, every number computed here: the renderer only lays it out."""

    submissions: int                  # every row of the gradebook
    counted: int                      # those with a verdict on the student's work: the distribution's
    left_out: dict[str, int]          # the others by standing (empty, unreadable, ...; missing: the roster's
                                      # students with no submission)
    mean_percent: float
    median_percent: float
    histogram: list[int]              # counts of counted totals in [0,10), [10,20), ..., [90,100]
    students: list[StudentLine]
    exercises: list[ExerciseSummary]
    most_failed: list[CriterionRate]  # the criteria failed most often, most first
    rates: list[CriterionRate]        # every criterion, in course order
    has_roster: bool = False          # a roster names the students
    needs_help: list[StudentLine] = field(default_factory=list)   # below full marks, lowest first
    overrides: list[OverrideLine] = field(default_factory=list)   # every override, by student
    similar: list[SimilarPair] = field(default_factory=list)      # near-identical code, by exercise
    late_policy: bool = False         # course.toml's [policy] sets a due date: the total cells say raw, penalty
    similarity_failed: dict[str, str] | None = None   # why similar code was not compared, when it was not
    catches: list[CatchTally] = field(default_factory=list)   # what the class's own checks caught, per criterion


@dataclass
class OverrideLine:
    """One of the instructor's overrides as class.html lists it."""

    student: str                  # the name shown
    row: str | None               # the student's row in class.html (None: no such submission in the gradebook now)
    link: str | None              # what it corrects in the student's report.html
    target: str                   # "exercise/criterion", "exercise", or "" for the whole grade
    points: float
    graded: float | None          # the points the grader gave (None: not applied)
    comment: str
    author: str
    at: str
    anchor: str
    said: dict[str, str]          # what it did, or why it was not applied


@dataclass
class SimilarPair:
    """Two submissions whose code for one exercise is near-identical (grader.review.similarity), side by side."""

    exercise: str
    title: dict[str, str]
    first: StudentLine
    second: StudentLine
    similarity: float             # the lesser of the two shares: how much of each is the other's
    first_share: float
    second_share: float
    first_html: Markup            # the file, escaped, the shared code marked
    second_html: Markup
    anchor: str


MOST_FAILED = 10   # criteria the class report names as failed most: enough to plan a lesson around
# Whose work is short of full marks by the student's doing: the "needs help" list. A grading the grader did not
# finish (grader_error, killed_workers) says nothing of the student yet; its row says why.
NEEDS_HELP = (PARTIAL, EMPTY, UNREADABLE, MISSING)


def reason(standing_: str, stored_message: str | None) -> dict[str, str] | None:
    """Why a submission (or a roster's student) has no verdict on the student's work, in each language; None when
    it has one. The gradebook holds the reason an entry could not be graded (unreadable, grader error, killed
    workers) as the submission's message."""
    from grader.i18n import t

    if standing_ == MISSING:
        return t("no submission").texts()
    if standing_ == EMPTY:
        return t("nothing attempted: every exercise's file is missing or the unchanged stub").texts()
    if standing_ in NOT_JUDGED:
        return said(stored_message or "")
    return None


def _cells(course: Course, rows: list[sqlite3.Row], report_link: str | None,
           grade: Grade | None = None, counts: bool = False) -> list[ExerciseCell]:
    cells = []
    for ex in course.exercises:
        own = [r for r in rows if r["exercise"] == ex.id]
        points = grade.exercise_points[ex.id] if grade else sum(r["points"] for r in own)
        overridden = grade is not None and any(a.applied and a.override.exercise == ex.id for a in grade.overrides)
        most = exercise_max(ex, counts)
        answered = grade is not None and any(e == ex.id and g.points for (e, _), g in (grade.written or {}).items())
        if all(r["status"] == Status.NOT_ATTEMPTED for r in own) and not answered:
            state = "not_attempted"
        elif points >= most > 0:
            state = "passed"
        else:
            state = "partial" if points > 0 else "failed"
        cells.append(ExerciseCell(ex.id, points, most, state,
                                  f"{report_link}#{ex.id}" if report_link else None, overridden))
    return cells


def _anchor(line_key: str) -> str:
    """A row's id in class.html: the same for the same student on every page, whatever characters the name holds."""
    return "student-" + hashlib.sha256(line_key.encode("utf-8", "surrogatepass")).hexdigest()[:12]


def _flag_identical(counted: list[StudentLine]) -> None:
    """Flag the submissions whose files are the same, byte for byte (the same content hash): at once, before any
    comparison of code. Only submissions with a verdict: every empty folder holds the same (no) files."""
    by_hash: dict[str, list[StudentLine]] = {}
    for line in counted:
        by_hash.setdefault(line.content_hash, []).append(line)
    for same in by_hash.values():
        if len(same) > 1:
            for line in same:
                line.flags.append(Flag("identical", [(o.shown, o.anchor) for o in same if o is not line]))


def class_summary(course: Course, book: Gradebook, key: str, roster: list[Student] | None = None,
                  criteria: dict[str, list] | None = None) -> ClassSummary:
    """Totals, exercises and criteria over the submissions with a verdict on the student's work; empty,
    unreadable and grader-failed ones are listed with the reason, and counted apart, as are the roster's students
    with no submission. `criteria`: each exercise's criteria (CriterionMeta), when the caller has them already."""
    from grader.policy import load_policy

    if criteria is None:
        from grader.judge.listing import criteria_of

        criteria = {ex.id: criteria_of(ex.id, course.solutions) for ex in course.exercises}

    results = _results_by_submission(book, key)
    reviewed = written_count(book, course)
    most = course_max(course, reviewed)
    students = []
    report_dirs: dict[str, str | None] = {}
    for graded in graded_lines(course, book, key, roster):
        student, how, s, grade = graded.student, graded.how, graded.submission, graded.grade
        who = f"{student.name} ({student.id})" if student and student.name else student.id if student else ""
        if s is None:
            students.append(StudentLine("", who, how, MISSING, 0.0, most, 0.0, _cells(course, [], None, None, reviewed),
                                        None,
                                        reason=graded.reason, anchor=_anchor("\0" + (student.id if student
                                                                                       else ""))))
            continue
        link = f"students/{urllib.parse.quote(s['submission'])}/report.html" if s["report_dir"] else None
        report_dirs[s["submission"]] = s["report_dir"]
        score, percent = (grade.final, grade.percent) if grade else (s["score"], s["percent"])
        students.append(StudentLine(
            s["submission"], who, how, graded.standing, score, grade.max_score if grade else s["max_score"], percent,
            _cells(course, graded.rows, link, grade, reviewed), link, s["content_hash"], graded.reason,
            anchor=_anchor(s["submission"]), grade=grade))
    counted = [line for line in students if line.standing not in NOT_JUDGED]
    _flag_identical(counted)
    similar = _similar_pairs(course, book, counted)
    overrides = _override_lines(book, students)
    left_out = {kind: n for kind in NOT_JUDGED if (n := sum(line.standing == kind for line in students))}
    percents = sorted(line.percent for line in counted)
    histogram = [0] * 10
    for p in percents:
        histogram[min(9, int(p // 10))] += 1
    n = len(percents)
    median = (percents[n // 2] if n % 2 else (percents[n // 2 - 1] + percents[n // 2]) / 2) if n else 0.0

    tallies: dict[tuple[str, str], tuple[list[int], Counter, list[FailedBy]]] = {}
    for line in counted:   # in the class's order, so each criterion lists who failed it in that order
        for r in results.get(line.submission, []):
            counts, messages, failed_by = tallies.setdefault((r["exercise"], r["criterion"]),
                                                             ([0, 0, 0], Counter(), []))
            counts[0] += r["status"] == Status.PASSED
            counts[2] += 1
            if r["status"] in FAILING:
                counts[1] += 1
                messages[r["message"]] += 1
                anchor = f"{line.report_link}#{r['exercise']}--{r['criterion']}" if line.report_link else None
                failed_by.append(FailedBy(line.shown, anchor, said(r["message"])))
    exercises = []
    for i, ex in enumerate(course.exercises):
        cells = [line.cells[i] for line in counted]
        exercises.append(ExerciseSummary(
            ex.id, {"en": ex.title_en, "zh": ex.title_zh}, exercise_max(ex, reviewed),
            round(sum(c.points for c in cells) / len(cells), 2) if cells else 0.0,
            sum(c.points >= c.max_points for c in cells), sum(c.state == "not_attempted" for c in cells)))
    rates = []
    for ex in course.exercises:
        for meta in criteria[ex.id]:
            if (ex.id, meta.id) not in tallies:
                continue
            (passed, failed, total), messages, failed_by = tallies[(ex.id, meta.id)]
            # ties go to the message that sorts first, so the same gradebook always draws the same page
            common = min(messages.items(), key=lambda item: (-item[1], item[0])) if messages else None
            rates.append(CriterionRate(ex.id, meta.id, dict(meta.title), passed, failed, total,
                                       said(common[0]) if common else None, common[1] if common else 0, failed_by))
    most_failed = sorted((r for r in rates if r.failed), key=lambda r: -r.failed)[:MOST_FAILED]
    order = {id(line): i for i, line in enumerate(students)}
    # lowest first; at the same total, whoever has more not started, then the class's order
    needs_help = sorted((line for line in students if line.standing in NEEDS_HELP),
                        key=lambda line: (line.percent, -len(line.not_started), order[id(line)]))
    policy = load_policy(course)
    caught = tally([(ex.id, meta.id, dict(meta.title)) for ex in course.exercises for meta in criteria[ex.id]],
                   [report_catches(report_dirs.get(line.submission)) for line in counted])
    return ClassSummary(sum(line.submission != "" for line in students), n, left_out,
                        round(sum(percents) / n, 2) if n else 0.0, round(median, 2), histogram, students, exercises,
                        most_failed, rates, roster is not None, needs_help, overrides, similar,
                        policy is not None and policy.due is not None, book.setting("similarity_failed"), caught)


def _similar_pairs(course: Course, book: Gradebook, counted: list[StudentLine]) -> list[SimilarPair]:
    """The gradebook's pairs of near-identical code between submissions with a verdict, each flagged on both rows."""
    by_name = {line.submission: line for line in counted}
    pairs = []
    for r in book.similar():
        first, second = by_name.get(r["first"]), by_name.get(r["second"])
        if first is None or second is None or r["exercise"] not in {ex.id for ex in course.exercises}:
            continue   # a submission that has no verdict now, or an exercise the course no longer has
        ex = course.exercise(r["exercise"])
        anchor = f"similar-{ex.id}-{_anchor(r['first'] + chr(0) + r['second'])[8:]}"
        pairs.append(SimilarPair(ex.id, {"en": ex.title_en, "zh": ex.title_zh}, first, second, r["similarity"],
                                 r["first_share"], r["second_share"], Markup(r["first_html"]),
                                 Markup(r["second_html"]), anchor))
        for line, other in ((first, second), (second, first)):
            flag = next((f for f in line.flags if f.kind == "similar"), None)
            if flag is None:
                flag = Flag("similar", [])
                line.flags.append(flag)
            flag.others.append((f"{other.shown} · {ex.id}", anchor))
    return pairs


def _override_lines(book: Gradebook, students: list[StudentLine]) -> list[OverrideLine]:
    """Every override, each saying what it did; one whose submission or target the gradebook does not hold now says
    it was not applied. The rows it applies to are flagged."""
    from grader.batch.grades import Applied
    from grader.i18n import t

    by_name = {line.submission: line for line in students if line.submission}
    lines = []
    for o in book.overrides():
        line = by_name.get(o.student)
        applied = next((a for a in line.grade.overrides if a.override == o), None) if line and line.grade else None
        anchor = "override-" + _anchor("\0".join((o.student, o.exercise, o.criterion)))[8:]
        if applied is None:
            said = (t("not applied: {student} has no verdict to correct", student=o.student) if line
                    else t("not applied: the gradebook holds no submission {student} now", student=o.student))
            applied = Applied(o, None, None)
        else:
            said = applied.said()
        target = (f"#{o.exercise}--{o.criterion}" if o.criterion else f"#{o.exercise}") if o.exercise else ""
        link = f"{line.report_link}{target}" if line and line.report_link else None
        lines.append(OverrideLine(line.shown if line else o.student, line.anchor if line else None, link, o.target,
                                  o.points, applied.graded, o.comment, o.author, o.at, anchor, said.texts()))
        if line is not None:
            flag = next((f for f in line.flags if f.kind == "overridden"), None)
            if flag is None:
                flag = Flag("overridden", [])
                line.flags.append(flag)
            flag.others.append((o.target or "*", anchor))
    return lines
