"""Scores and statuses, computed once, from the judge's outcomes: the only place a score is made."""

from __future__ import annotations

from grader.course import ExerciseConfig
from grader.i18n import rendered, t
from grader.judge.criterion import Outcome
from grader.report.model import (AWAITING_REVIEW, GRADED, PARTIAL, SCHEMA_VERSION, UNANSWERED, AnswerResult,
                                 CriterionResult, ExerciseResult, Report)
from grader.worker.protocol import Status

# The first of these a criterion has names the exercise's status: a grader error first (the grading is
# incomplete and is done again, whatever the student's code did), then the limit that ended the run.
ABORTED = (Status.GRADER_ERROR, Status.TIMEOUT, Status.CRASHED)


def exercise_result(ex: ExerciseConfig, outcomes: list[Outcome], run: dict,
                    answers: dict[str, str] | None = None) -> ExerciseResult:
    criteria = []
    for outcome in outcomes:
        max_points = ex.points.get(outcome.meta.id, 0.0)
        points = criterion_points(outcome, max_points)
        criteria.append(CriterionResult(
            id=outcome.meta.id, kind=outcome.meta.kind, title=outcome.meta.title,
            hint=outcome.hint or outcome.meta.hint,
            points=points, max_points=max_points, status=outcome.status, message=outcome.message,
            evidence=outcome.evidence))
    score = round(sum(c.points for c in criteria), 4)
    max_score = round(sum(c.max_points for c in criteria), 4)
    status, message = _exercise_status(criteria, score, max_score)
    return ExerciseResult(id=ex.id, title={"en": ex.title_en, "zh": ex.title_zh}, file=ex.file, score=score,
                          max_score=max_score, status=status, message=message, criteria=criteria, run=run,
                          answers=answer_results(ex, answers or {}))


def criterion_points(outcome: Outcome, max_points: float) -> float:
    """All its points for a criterion that passed, its share for a failed one that earns part (`Outcome.partial`),
    none otherwise."""
    if outcome.status == Status.PASSED:
        return max_points
    if outcome.status == Status.FAILED and outcome.partial:   # in hundredths, as a person would write them
        return round(max_points * outcome.partial, 2)
    return 0.0


def answer_results(ex: ExerciseConfig, texts: dict[str, str]) -> list[AnswerResult]:
    """Each question's answer as text, awaiting review with 0 points: the score leaves written answers out until a
    reviewer grades them."""
    return [AnswerResult(id=q.id, prompt=dict(q.prompt), text=texts.get(q.id, ""), points=0.0, max_points=q.points,
                         status=AWAITING_REVIEW if texts.get(q.id) else UNANSWERED) for q in ex.questions]


def with_grade(report: Report, grade: dict | None) -> Report:
    """The report with `grade` (grader.batch.grades.Grade.record, None for none) and each written answer as that
    grade says: `graded` with its points, items, comment and reviewer when the grade holds its review, else awaiting
    review (or unanswered) with 0 points. The answers' text stays as the grading read it."""
    reviewed = {(a["exercise"], a["question"]): a for a in ((grade or {}).get("written") or {}).get("answers", [])}
    report.grade = grade
    for ex in report.exercises:
        for answer in ex.answers:
            found = reviewed.get((ex.id, answer.id))
            if found is None:
                answer.status = AWAITING_REVIEW if answer.text else UNANSWERED
                answer.points, answer.items, answer.comment, answer.reviewer = 0.0, None, None, None
            else:
                answer.status, answer.points, answer.max_points = GRADED, found["points"], found["max_points"]
                answer.items, answer.comment, answer.reviewer = found["items"], found["comment"], found["reviewer"]
    return report


def _exercise_status(criteria: list[CriterionResult], score: float,
                     max_score: float) -> tuple[str, dict[str, str]]:
    statuses = [c.status for c in criteria]
    passed = statuses.count(Status.PASSED)
    summary = t("{passed} of {total} criteria passed", passed=passed, total=len(criteria))
    for aborted in ABORTED:
        first = next((c for c in criteria if c.status == aborted), None)
        if first is not None:
            return aborted, t("{summary}; {first}", summary=summary, first=rendered(first.message)).texts()
    if statuses and all(s == Status.NOT_ATTEMPTED for s in statuses):
        return Status.NOT_ATTEMPTED, criteria[0].message
    if score >= max_score and passed == len(criteria):
        return Status.PASSED, summary.texts()
    # `blocked` only echoes a criterion it depends on, so it does not make an import error a mere `failed`
    judged = [c for c in criteria if c.status != Status.BLOCKED]
    if judged and all(c.status == Status.ERROR for c in judged):
        return Status.ERROR, judged[0].message
    # some points earned is not the same as none: an 11/14 is `partial`, a 0/14 that was tried is `failed`
    return (PARTIAL if score > 0 else Status.FAILED), summary.texts()


def stored_report(data: dict) -> Report:
    """A report.json read back (to render it again, in another language) as this grader would have written it: a
    report of schema 2.0 called an exercise with some points `failed` where this one says `partial`; one of 2.0 or
    3.0 recorded the course seed, which this one keeps from the report, and had no `grade`, which 3.1 only adds; one
    before 3.2 had no `answers`; before 3.3 no graded answer and no criterion earning part of its points; nothing
    else it holds differs."""
    data = dict(data)
    if data.get("schema_version") == "2.0":
        data["exercises"] = [{**e, "status": PARTIAL} if e["status"] == Status.FAILED and e["score"] > 0 else e
                             for e in data["exercises"]]
    if data.get("schema_version") in ("2.0", "3.0"):
        data.pop("seed", None)
    # 3.2 only adds the answers an older one had none of, 3.3 graded answers and partial points an older one never had
    if data.get("schema_version") in ("2.0", "3.0", "3.1", "3.2"):
        data["schema_version"] = SCHEMA_VERSION
    return Report.from_dict(data)
