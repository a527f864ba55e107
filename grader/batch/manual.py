"""Written answers graded by hand: each question's rubric, the reviewers' grades and the log of every change.

Theory of operation. A question's rubric starts as course.toml's `[[exercise.question.rubric]]` items (ids "1".."N"
in their order), copied into the gradebook the first time the question is read; from then on the gradebook's copy is
the rubric, which reviewers edit (an item's points or text) and add to. A review names the items it applies, by id,
so an item edited later changes every answer graded with it: the points are always computed from the rubric as it
is now (`question_points`). Reviews are keyed by the student (the submission's name), the exercise and the question,
with no grader key, like the instructor's overrides: every regrade and re-judging keeps them.

Several reviewers may grade at once. Each review carries a version, counted up by every save; a save states the
version it was made on, and one made on an older version raises Conflict with the review as it is now, changing
nothing but the log, which holds both attempts. Every change (a save, a refused save, an item edited or added) is a
row of review_log: who, when, what it was before and after.

The answers reviewed are those of each submission's newest grading (its record of observations, else its
report.json). How the points join the grade, and from when, is grader.batch.grades's.
"""

from __future__ import annotations

import hashlib
import json
import math
import sqlite3
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from grader.batch.grades import now
from grader.course import Course, Question

# review_log's actions
SEEDED, SAVED, CONFLICT, ITEM_EDITED, ITEM_ADDED = "seeded", "saved", "conflict", "item_edited", "item_added"


class ReviewError(ValueError):
    """A review or an edit the course or the rubric does not allow (an unknown question or item): one sentence."""


@dataclass(frozen=True)
class RubricItem:
    id: str
    position: int                   # its place in the rubric, 0-based (keys 1-9 apply the first nine)
    points: float                   # added when applied; negative takes points off
    text: dict[str, str]            # language -> what the item says
    removed: bool = False           # taken out of the rubric: counts for nothing, kept for the reviews naming it


@dataclass(frozen=True)
class Review:
    """A reviewer's grade of one student's answer to one question, as stored."""

    student: str
    exercise: str
    question: str
    items: tuple[str, ...]          # the rubric items applied, by id
    adjustment: float               # points added (or taken) beyond the items
    comment: str                    # shown to the student
    author: str
    at: str                         # ISO 8601, UTC
    version: int                    # 1 for the first save, one more for each save since
    answer_digest: str              # `digest` of the answer it graded

    def record(self) -> dict:
        return {**asdict(self), "items": list(self.items)}


class Conflict(Exception):
    """A save made on a version of the review other than the current one: `current` is the review as it is now (None
    when there is none: the save expected one that was never stored)."""

    def __init__(self, current: Review | None, expected: int | None):
        super().__init__(f"the review of {current.student if current else '?'} was saved meanwhile "
                         f"(version {current.version if current else None}, this save was made on {expected})")
        self.current = current
        self.expected = expected


@dataclass(frozen=True)
class AppliedItem:
    """A rubric item as a graded answer shows it."""

    id: str
    points: float
    text: dict[str, str]


@dataclass(frozen=True)
class Graded:
    """A question's grade: its points now, from the rubric as it is now."""

    points: float
    max_points: float
    items: tuple[AppliedItem, ...]
    adjustment: float
    comment: str
    author: str
    at: str

    def record(self) -> dict:
        return {"points": self.points, "max_points": self.max_points, "adjustment": self.adjustment,
                "items": [asdict(i) for i in self.items], "comment": self.comment, "reviewer": self.author,
                "at": self.at}


@dataclass(frozen=True)
class Autograde:
    """What the grader's criteria gave an exercise, shown beside an answer."""

    score: float
    max_score: float
    status: str                     # the exercise's standing by its criteria: passed, partial, failed, not_attempted
    passed: int                     # criteria passed
    total: int                      # criteria


@dataclass(frozen=True)
class AnswerRow:
    """One student's answer to a question, with its review and the exercise's autograded result."""

    student: str
    text: str                       # "" when unanswered
    digest: str                     # alike answers (whitespace aside) share it: one decision may grade them all
    review: Review | None           # None: awaiting review
    autograde: Autograde

    @property
    def changed(self) -> bool:
        """Graded on an answer other than this one (the student submitted again since)."""
        return self.review is not None and self.review.answer_digest != self.digest


def digest(text: str) -> str:
    """The same for answers that differ in whitespace alone, the empty answer included."""
    return hashlib.sha256(" ".join(text.split()).encode("utf-8", "surrogatepass")).hexdigest()[:16]


def question_of(course: Course, exercise: str, question: str) -> Question:
    ex = course.exercise(exercise)
    found = next((q for q in ex.questions if q.id == question), None)
    if found is None:
        raise ReviewError(f"exercise {exercise} has no question {question!r} (its questions: "
                          f"{', '.join(q.id for q in ex.questions) or 'none'})")
    return found


# --- the rubric ------------------------------------------------------------------------------------------------


def rubric_items(book, course: Course, exercise: str, question: str, removed: bool = False) -> list[RubricItem]:
    """The question's rubric in its order (seeded from course.toml on first use); `removed` adds removed items."""
    _seed(book, course, exercise, question)
    items = _items(book.db, exercise, question)
    return items if removed else [i for i in items if not i.removed]


def edit_item(book, course: Course, exercise: str, question: str, item: str, *, points: float | None = None,
              text_en: str | None = None, text_zh: str | None = None, removed: bool | None = None,
              author: str) -> int:
    """Change an item's points, text or removal; returns how many reviews apply it (whose points change)."""
    _points(points)
    _seed(book, course, exercise, question)
    with _transaction(book.db):
        before = next((i for i in _items(book.db, exercise, question) if i.id == item), None)
        if before is None:
            raise ReviewError(f"{exercise}/{question} has no rubric item {item!r}")
        after = RubricItem(before.id, before.position, before.points if points is None else float(points),
                           {"en": before.text["en"] if text_en is None else text_en,
                            "zh": before.text["zh"] if text_zh is None else text_zh},
                           before.removed if removed is None else removed)
        book.db.execute("UPDATE rubric SET points=?, text_en=?, text_zh=?, removed=? WHERE exercise=? AND question=? "
                        "AND item=?", (after.points, after.text["en"], after.text["zh"], int(after.removed),
                                       exercise, question, item))
        _log(book.db, author, ITEM_EDITED, "", exercise, question, {"before": asdict(before), "after": asdict(after)})
        return sum(item in r.items for r in _reviews(book.db, exercise=exercise, question=question))


def add_item(book, course: Course, exercise: str, question: str, *, points: float, text_en: str, text_zh: str,
             author: str) -> RubricItem:
    """A new item at the end of the question's rubric."""
    _points(points)
    _seed(book, course, exercise, question)
    with _transaction(book.db):
        items = _items(book.db, exercise, question)
        new = RubricItem(str(max((int(i.id) for i in items if i.id.isdigit()), default=0) + 1),
                         max((i.position for i in items), default=-1) + 1, float(points),
                         {"en": text_en, "zh": text_zh})
        _insert_item(book.db, exercise, question, new)
        _log(book.db, author, ITEM_ADDED, "", exercise, question, {"before": None, "after": asdict(new)})
    return new


def _points(points: float | None) -> None:
    """Fails closed: NaN or an infinity would make every sum it joins meaningless."""
    if points is not None and not (isinstance(points, (int, float)) and math.isfinite(points)):
        raise ReviewError(f"{points!r} is not a number of points")


def _seed(book, course: Course, exercise: str, question: str) -> None:
    q = question_of(course, exercise, question)
    if book.db.execute("SELECT 1 FROM rubric WHERE exercise=? AND question=? LIMIT 1",
                       (exercise, question)).fetchone():
        return
    with _transaction(book.db):
        if book.db.execute("SELECT 1 FROM rubric WHERE exercise=? AND question=? LIMIT 1",
                           (exercise, question)).fetchone():
            return   # another process seeded it meanwhile
        items = [RubricItem(str(n), n - 1, item.points, dict(item.text)) for n, item in enumerate(q.rubric, 1)]
        for item in items:
            _insert_item(book.db, exercise, question, item)
        _log(book.db, "course.toml", SEEDED, "", exercise, question,
             {"before": None, "after": [asdict(i) for i in items]})


def _insert_item(db: sqlite3.Connection, exercise: str, question: str, item: RubricItem) -> None:
    db.execute("INSERT INTO rubric VALUES (?,?,?,?,?,?,?,?)", (exercise, question, item.id, item.position,
                                                               item.points, item.text["en"], item.text["zh"],
                                                               int(item.removed)))


def _items(db: sqlite3.Connection, exercise: str, question: str) -> list[RubricItem]:
    rows = db.execute("SELECT item, position, points, text_en, text_zh, removed FROM rubric WHERE exercise=? AND "
                      "question=? ORDER BY position, item", (exercise, question)).fetchall()
    return [RubricItem(item, position, points, {"en": en, "zh": zh}, bool(removed))
            for item, position, points, en, zh, removed in rows]


# --- reviews -----------------------------------------------------------------------------------------------------


def save_review(book, course: Course, *, student: str, exercise: str, question: str, items: Sequence[str],
                adjustment: float, comment: str, author: str, expected_version: int | None,
                answer_digest: str = "") -> Review:
    """Store a reviewer's grade of an answer, made on `expected_version` of its review (None: made with no review
    there). Conflict (and nothing changed but the log) when the review is at another version now."""
    return save_reviews(book, course, students={student: expected_version}, exercise=exercise, question=question,
                        items=items, adjustment=adjustment, comment=comment, author=author,
                        answer_digest=answer_digest)[0]


def save_reviews(book, course: Course, *, students: Mapping[str, int | None], exercise: str, question: str,
                 items: Sequence[str], adjustment: float, comment: str, author: str,
                 answer_digest: str = "") -> list[Review]:
    """One decision for several answers (alike ones: `answer_digest` is theirs), each student's made on the version
    of their review given: all saved, or none when any of them is at another version now (Conflict names the first;
    the log holds every refused attempt)."""
    q = question_of(course, exercise, question)
    known = {i.id for i in rubric_items(book, course, exercise, question)}
    unknown = [i for i in items if i not in known]
    if unknown:
        raise ReviewError(f"{exercise}/{q.id} has no rubric item {', '.join(map(repr, unknown))}")
    _points(adjustment)
    held = {name for (name,) in book.db.execute("SELECT DISTINCT submission FROM submissions")}
    strangers = [name for name in students if name not in held]
    if strangers:
        raise ReviewError(f"the gradebook holds no submission {', '.join(map(repr, strangers))}")
    with _transaction(book.db):
        at = now()
        currents = {student: _review(book.db, student, exercise, question) for student in students}
        attempts = {student: Review(student, exercise, question, tuple(dict.fromkeys(items)), float(adjustment),
                                    comment, author, at, (current.version if current else 0) + 1, answer_digest)
                    for student, current in currents.items()}
        stale = [student for student, current in currents.items()
                 if (current.version if current else None) != students[student]]
        for student in stale:   # the refused attempts, kept in the log: none of the group is saved
            _log(book.db, author, CONFLICT, student, exercise, question,
                 {"before": _record(currents[student]), "attempt": attempts[student].record(),
                  "expected_version": students[student]})
        if not stale:
            for student, attempt in attempts.items():
                book.db.execute("INSERT OR REPLACE INTO reviews VALUES (?,?,?,?,?,?,?,?,?,?)",
                                (student, exercise, question, json.dumps(list(attempt.items)), attempt.adjustment,
                                 attempt.comment, attempt.author, attempt.at, attempt.version, attempt.answer_digest))
                _log(book.db, author, SAVED, student, exercise, question,
                     {"before": _record(currents[student]), "after": attempt.record()})
    if stale:   # after the commit: the refusals stay in the log
        raise Conflict(currents[stale[0]], students[stale[0]])
    return list(attempts.values())


def _record(found: Review | None) -> dict | None:
    return found.record() if found else None


def review(book, student: str, exercise: str, question: str) -> Review | None:
    return _review(book.db, student, exercise, question)


def _review(db: sqlite3.Connection, student: str, exercise: str, question: str) -> Review | None:
    found = _reviews(db, student=student, exercise=exercise, question=question)
    return found[0] if found else None


def _reviews(db: sqlite3.Connection, **where: str) -> list[Review]:
    clause = " AND ".join(f"{column}=?" for column in where) or "1"
    rows = db.execute(f"SELECT student, exercise, question, items, adjustment, comment, author, at, version, "
                      f"answer_digest FROM reviews WHERE {clause} ORDER BY student, exercise, question",
                      tuple(where.values())).fetchall()
    return [Review(s, e, q, tuple(json.loads(items)), adj, comment, author, at, version, dg)
            for s, e, q, items, adj, comment, author, at, version, dg in rows]


def question_points(course: Course, items: Iterable[RubricItem], review: Review) -> float:
    """The answer's points: its applied items' (as the rubric says now; a removed one counts for nothing) plus the
    adjustment, within 0 and the question's points."""
    q = question_of(course, review.exercise, review.question)
    applied = sum(i.points for i in items if i.id in review.items and not i.removed)
    return round(min(max(applied + review.adjustment, 0.0), q.points), 4)


def manual_grades(book, course: Course, student: str | None = None
                  ) -> dict[tuple[str, str], Graded] | dict[str, dict[tuple[str, str], Graded]]:
    """The student's graded answers, (exercise, question) -> Graded (a question absent awaits review); with no
    student, every student's, by student. Reviews of a question the course no longer has are left out."""
    everyone = graded_answers(book, course)
    return everyone if student is None else everyone.get(student, {})


def written_count(book, course: Course) -> bool:
    """Whether written answers count in the grades: reviewing has begun (an answer to a question of the course is
    graded). Until then every grade and maximum is the criteria's alone, as for a course graded elsewhere."""
    asked = {(ex.id, q.id) for ex in course.exercises for q in ex.questions}
    return any(tuple(key) in asked for key in book.db.execute("SELECT DISTINCT exercise, question FROM reviews"))


def graded_answers(book, course: Course) -> dict[str, dict[tuple[str, str], Graded]]:
    """Every student's graded answers: student -> (exercise, question) -> Graded."""
    asked = {(ex.id, q.id) for ex in course.exercises for q in ex.questions}
    reviews = [r for r in _reviews(book.db) if (r.exercise, r.question) in asked]
    # read as stored (a review's question was seeded when it was saved): reading the grades writes nothing
    rubrics = {key: _items(book.db, *key) for key in {(r.exercise, r.question) for r in reviews}}
    found: dict[str, dict[tuple[str, str], Graded]] = {}
    for r in reviews:
        items = rubrics[(r.exercise, r.question)]
        applied = tuple(AppliedItem(i.id, i.points, dict(i.text)) for i in items if i.id in r.items and not i.removed)
        found.setdefault(r.student, {})[(r.exercise, r.question)] = Graded(
            question_points(course, items, r), question_of(course, r.exercise, r.question).points, applied,
            r.adjustment, r.comment, r.author, r.at)
    return found


# --- the answers to review ---------------------------------------------------------------------------------------


def answers_to_review(book, course: Course, exercise: str, question: str) -> list[AnswerRow]:
    """Every submission's answer to the question, from its newest grading (the record of its observations, else its
    report.json), in the gradebook's order of names, with its review and its exercise's autograded result."""
    question_of(course, exercise, question)
    rows = []
    for name, key, report_dir in book.db.execute(
            "SELECT submission, grader_key, report_dir FROM submissions s WHERE rowid = (SELECT MAX(rowid) FROM "
            "submissions WHERE submission = s.submission) ORDER BY submission").fetchall():
        text = _answer(book, name, key, report_dir, exercise, question)
        rows.append(AnswerRow(name, text, digest(text), _review(book.db, name, exercise, question),
                              _autograde(book.db, name, key, exercise)))
    return rows


def _answer(book, name: str, key: str, report_dir: str | None, exercise: str, question: str) -> str:
    row = book.db.execute("SELECT record FROM observed WHERE submission=? AND grader_key=?", (name, key)).fetchone()
    if row is not None:
        try:
            answers = json.loads(row[0])["exercises"][exercise].get("answers")
        except (ValueError, KeyError, TypeError, AttributeError):
            answers = None
        if isinstance(answers, dict):
            text = answers.get(question, "")
            return text if isinstance(text, str) else ""
    if report_dir:   # graded with no record kept: the report holds the answers (schema 3.2 and later)
        try:
            report = json.loads((Path(report_dir) / "report.json").read_text(encoding="utf-8"))
            ex = next(e for e in report["exercises"] if e["id"] == exercise)
            return next((a["text"] for a in ex.get("answers", []) if a["id"] == question), "")
        except (OSError, ValueError, KeyError, TypeError, StopIteration):
            pass
    return ""


def _autograde(db: sqlite3.Connection, name: str, key: str, exercise: str) -> Autograde:
    rows = db.execute("SELECT status, points, max_points FROM results WHERE submission=? AND grader_key=? AND "
                      "exercise=?", (name, key, exercise)).fetchall()
    score, most = round(sum(r[1] for r in rows), 4), round(sum(r[2] for r in rows), 4)
    passed = sum(r[0] == "passed" for r in rows)
    if rows and all(r[0] == "not_attempted" for r in rows):
        status = "not_attempted"
    elif most > 0 and score >= most:
        status = "passed"
    else:
        status = "partial" if score > 0 else "failed"
    return Autograde(score, most, status, passed, len(rows))


# --- the log -----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LogEntry:
    seq: int
    at: str
    author: str
    action: str
    student: str
    exercise: str
    question: str
    detail: dict


def review_log(book, exercise: str | None = None, question: str | None = None,
               student: str | None = None) -> list[LogEntry]:
    """The log's rows, oldest first, those of one question or student when given."""
    where = {k: v for k, v in (("exercise", exercise), ("question", question), ("student", student)) if v is not None}
    clause = " AND ".join(f"{column}=?" for column in where) or "1"
    return [LogEntry(seq, at, author, action, s, e, q, json.loads(detail)) for seq, at, author, action, s, e, q, detail
            in book.db.execute(f"SELECT seq, at, author, action, student, exercise, question, detail FROM review_log "
                               f"WHERE {clause} ORDER BY seq", tuple(where.values()))]


def _log(db: sqlite3.Connection, author: str, action: str, student: str, exercise: str, question: str,
         detail: dict) -> None:
    db.execute("INSERT INTO review_log (at, author, action, student, exercise, question, detail) VALUES "
               "(?,?,?,?,?,?,?)", (now(), author, action, student, exercise, question,
                                   json.dumps(detail, ensure_ascii=False)))


class _transaction:
    """BEGIN IMMEDIATE ... COMMIT (ROLLBACK on an exception): one writer at a time, so that a version is read and
    counted up by one save alone."""

    def __init__(self, db: sqlite3.Connection):
        self.db = db

    def __enter__(self) -> None:
        self.db.execute("BEGIN IMMEDIATE")

    def __exit__(self, exc_type, *_) -> None:
        self.db.execute("ROLLBACK" if exc_type else "COMMIT")


# --- writing the reports again -----------------------------------------------------------------------------------


def rewrite_after_review(out_dir: Path, course: Course, students: Iterable[str] = ()) -> dict:
    """Write the reports of the students whose grade changed (`students`: those just reviewed; every report whose
    grade differs from the gradebook's is written again, theirs among them) and the class files, as `grader override`
    does, with the settings the last batch wrote them with. Returns publish's tallies. grader.batch.run.BatchBusy
    when a batch holds `out_dir`: the reviews are stored all the same, and that batch writes them when it ends."""
    from grader.batch.run import batch_lock, publish, stored_settings

    del students   # publish finds every report whose grade the gradebook changed, these among them
    settings = stored_settings(out_dir)
    with batch_lock(out_dir):
        return publish(course, out_dir, settings["lang"], settings["roster"], settings["excel"], settings["formats"])

