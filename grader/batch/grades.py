"""A submission's grade: what the grader's criteria gave, the instructor's overrides, the late penalty, the final.

Theory of operation. The grader's verdicts are never changed: the gradebook's `results` rows and each report's
criteria stay as the grading made them, so a regrade or a re-judging replaces them freely. Overrides live in a
table of their own, keyed by the student and what they correct (a criterion, an exercise, or the whole), and are
applied after grading, every time a grade is shown, in that order: criteria, then exercises, then the whole. The
late penalty is applied last, to the points the work earned with the overrides (`raw`); to waive it, give the
student an extension. An override that names what the grading no longer holds (a criterion course.toml dropped)
is kept and reported as not applied, never dropped.

Written answers graded by hand (grader.batch.manual) join an exercise's points after its criterion overrides and
before its exercise override: an exercise's points are its criteria's and its graded answers', and an exercise
override sets that sum. They count once reviewing has begun (the gradebook holds a review of any answer): from then
on the written questions' points are part of every maximum, an answer not graded yet earns 0 and says it awaits
review. Before, the grade is the autograded one alone, as for a course whose written answers are graded elsewhere.
"""

from __future__ import annotations

import datetime as dt
import getpass
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from grader.course import Course, ExerciseConfig
from grader.i18n import Text, join, t, verbatim
from grader.policy import TOO_LATE, Lateness

if TYPE_CHECKING:
    from grader.batch.manual import Graded

# What an override corrects, by which of its keys are set.
WHOLE, EXERCISE, CRITERION = "whole", "exercise", "criterion"


@dataclass(frozen=True)
class Override:
    """The instructor's points for one target of one student's grade, with why, who and when."""

    student: str        # the submission's name in the gradebook
    exercise: str       # "" for the whole grade
    criterion: str      # "" for the whole exercise (or the whole grade)
    points: float
    comment: str
    author: str
    at: str             # ISO 8601, UTC

    @property
    def scope(self) -> str:
        return CRITERION if self.criterion else EXERCISE if self.exercise else WHOLE

    @property
    def target(self) -> str:
        """As the command line names it: `exercise/criterion`, `exercise`, or "" for the whole grade."""
        return f"{self.exercise}/{self.criterion}" if self.criterion else self.exercise


def author() -> str:
    """Who is making an override when --author does not say: the account running the command."""
    try:
        return getpass.getuser()
    except (KeyError, OSError):   # no name for this uid (a container's)
        import os

        return f"uid {os.getuid()}"


def now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


@dataclass(frozen=True)
class Applied:
    """An override as it met one grading: the points the grader had given its target (None when the grading holds
    no such target) and whether it took effect."""

    override: Override
    graded: float | None
    max_points: float | None

    @property
    def applied(self) -> bool:
        return self.graded is not None

    def record(self) -> dict:
        o = self.override
        return {"exercise": o.exercise or None, "criterion": o.criterion or None, "points": o.points,
                "graded_points": self.graded, "max_points": self.max_points, "applied": self.applied,
                "comment": o.comment, "author": o.author, "at": o.at}

    def said(self) -> Text:
        target = verbatim(self.override.target) if self.override.target else t("the whole grade")
        if not self.applied:
            return t("{target}: not applied, the grading has no such criterion or exercise now", target=target)
        return t("{target}: {points:g} points instead of {graded:g}", target=target, points=self.override.points,
                 graded=self.graded)


@dataclass
class Grade:
    """One graded submission's points, from the criteria to the final grade."""

    graded: float                              # the criteria's points, as the grader gave them
    raw: float                                 # ... with the overrides
    penalty: float                             # what the lateness takes from raw
    max_score: float
    exercise_points: dict[str, float]          # each exercise's points with the overrides
    criterion_points: dict[tuple[str, str], float]
    overrides: list[Applied] = field(default_factory=list)
    lateness: Lateness | None = None
    # The written answers graded by hand, (exercise, question) -> Graded; None: written answers do not count (no
    # review in the gradebook yet), and the maxima are the criteria's alone.
    written: dict[tuple[str, str], Graded] | None = None
    awaiting: list[tuple[str, str]] = field(default_factory=list)   # the questions not graded yet (when they count)
    written_max: float = 0.0                   # the written questions' points, when they count

    @property
    def written_points(self) -> float:
        return round(sum(g.points for g in (self.written or {}).values()), 4)

    @property
    def final(self) -> float:
        return round(self.raw - self.penalty, 4)

    @property
    def percent(self) -> float:
        return round(100 * self.final / self.max_score, 2) if self.max_score else 0.0

    @property
    def adjusted(self) -> bool:
        """Whether anything beyond the grading has a say: an override, or a late policy."""
        return bool(self.overrides) or self.lateness is not None or self.written is not None

    def overridden(self, exercise: str, criterion: str = "") -> Applied | None:
        return next((a for a in self.overrides if a.applied and a.override.exercise == exercise
                     and a.override.criterion == criterion), None)

    def said(self) -> Text:
        """The grade's story in one sentence: graded, corrected, penalised, final."""
        parts = [t("graded {graded:g}", graded=self.graded)]
        if self.written is not None:
            parts.append(t("written answers {points:g}/{most:g}", points=self.written_points, most=self.written_max))
            if self.awaiting:
                parts.append(t("{count} not reviewed yet", count=len(self.awaiting)))
        if self.raw != round(self.graded + self.written_points, 4) or any(a.applied for a in self.overrides):
            parts.append(t("{raw:g} with the instructor's corrections", raw=self.raw))
        if self.lateness is not None and (self.penalty or self.lateness.state == TOO_LATE):
            parts.append(t("{penalty:g} off for lateness", penalty=self.penalty))
        parts.append(t("final {final:g}/{max_score:g} ({percent:g}%)", final=self.final, max_score=self.max_score,
                       percent=self.percent))
        return join(parts, t("; "))

    def record(self) -> dict:
        """report.json's `grade` (schema 3.1; 3.3 adds `written` when written answers count)."""
        written = {} if self.written is None else {"written": {
            "points": self.written_points, "max_points": self.written_max,
            "answers": [{"exercise": e, "question": q, **g.record()} for (e, q), g in self.written.items()],
            "awaiting": [{"exercise": e, "question": q} for e, q in self.awaiting]}}
        return {"graded": self.graded, "raw": self.raw, "penalty": self.penalty, "final": self.final,
                "max_score": self.max_score, "percent": self.percent,
                "exercises": {ex: points for ex, points in self.exercise_points.items()},
                "overrides": [a.record() for a in self.overrides],
                "late": ({**self.lateness.record(), "message": self.lateness.said().texts()}
                         if self.lateness else None),
                "message": self.said().texts(), **written}


def exercise_max(ex: ExerciseConfig, written: bool) -> float:
    """An exercise's most points: its criteria's, and its written questions' when written answers count."""
    return round(ex.max_points + (sum(q.points for q in ex.questions) if written else 0.0), 4)


def course_max(course: Course, written: bool) -> float:
    """The course's most points (see exercise_max): what grades.csv's totals, Canvas and Moodle are out of."""
    return round(sum(exercise_max(ex, written) for ex in course.exercises), 4)


def grade_of(course: Course, rows: Iterable, overrides: Iterable[Override] = (),
             lateness: Lateness | None = None, written: Mapping[tuple[str, str], Graded] | None = None) -> Grade:
    """The grade of a submission whose criteria's rows (each with exercise, criterion, points, max_points) are
    `rows`: criterion overrides first, then the written answers graded by hand (`written`, None when they do not
    count), then exercise overrides, then the whole; then the lateness's penalty."""
    rows = list(rows)
    criterion_points = {(r["exercise"], r["criterion"]): float(r["points"]) for r in rows}
    criterion_max = {(r["exercise"], r["criterion"]): float(r["max_points"]) for r in rows}
    graded = round(sum(criterion_points.values()), 4)
    counts = written is not None
    asked = [(ex.id, q.id) for ex in course.exercises for q in ex.questions]   # in the course's order
    kept = {key: written[key] for key in asked if written is not None and key in written}
    max_score = course_max(course, counts)
    ordered = sorted(overrides, key=lambda o: ({CRITERION: 0, EXERCISE: 1, WHOLE: 2}[o.scope], o.exercise,
                                               o.criterion))
    applied: list[Applied] = []
    for o in (o for o in ordered if o.scope == CRITERION):
        key = (o.exercise, o.criterion)
        if key not in criterion_points:
            applied.append(Applied(o, None, None))
            continue
        applied.append(Applied(o, criterion_points[key], criterion_max[key]))
        criterion_points[key] = min(o.points, criterion_max[key])
    exercise_points = {ex.id: round(sum(p for (e, _), p in criterion_points.items() if e == ex.id)
                                    + sum(g.points for (e, _), g in kept.items() if e == ex.id), 4)
                       for ex in course.exercises}
    for o in (o for o in ordered if o.scope == EXERCISE):
        ex = next((e for e in course.exercises if e.id == o.exercise), None)
        if ex is None or not any(e == o.exercise for e, _ in criterion_points):
            applied.append(Applied(o, None, None))
            continue
        most = exercise_max(ex, counts)
        applied.append(Applied(o, exercise_points[ex.id], most))
        exercise_points[ex.id] = min(o.points, most)
    raw = round(sum(exercise_points.values()), 4)
    for o in (o for o in ordered if o.scope == WHOLE):
        applied.append(Applied(o, raw, max_score))
        raw = min(o.points, max_score)
    penalty = lateness.penalty(raw, max_score) if lateness is not None else 0.0
    return Grade(graded, raw, penalty, max_score, exercise_points, criterion_points, applied, lateness,
                 kept if counts else None, [key for key in asked if key not in kept] if counts else [],
                 round(max_score - course_max(course, False), 4))
