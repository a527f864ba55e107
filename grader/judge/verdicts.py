"""How a criterion ends other than passing. Each exception carries the status and message the report shows."""

from __future__ import annotations

from grader.i18n import Text
from grader.worker.protocol import Status


class Verdict(Exception):
    status = Status.FAILED
    # what the report shows as the hint instead of the criterion's own, when the cause is not the criterion's subject
    # (a file that does not import is told how to make it import, not how to write the algorithm)
    hint: Text | None = None

    def __init__(self, message: Text, **evidence):
        self.message = as_text(message)
        super().__init__(str(self.message))
        self.evidence = evidence


def as_text(message: Text) -> Text:
    """A verdict's message is a `t(...)` sentence, shown in the student's language: a plain string would be
    English in every report, so it is refused (the criterion then ends as the grader's error)."""
    if not isinstance(message, Text):
        raise TypeError(f"a verdict's message must be a t(...) template, not {type(message).__name__}")
    return message


class CriterionFailed(Verdict):
    """The student's code ran, and what it did is not what the contract asks."""

    status = Status.FAILED


class StudentRaised(Verdict):
    """The student's code raised where the contract asks it to return."""

    status = Status.ERROR


class ImportFailed(StudentRaised):
    """The student's file did not import: said once per exercise (by its first criterion), with a hint about
    importing; every other criterion of the exercise is `blocked` on it."""


class NotAttempted(Verdict):
    """The stub is untouched, or the file is missing."""

    status = Status.NOT_ATTEMPTED


class TimedOut(Verdict):
    status = Status.TIMEOUT


class Crashed(Verdict):
    status = Status.CRASHED


class Blocked(Verdict):
    """A criterion this one needs did not pass, so judging this one would say nothing new."""

    status = Status.BLOCKED


class GraderFault(Verdict):
    """The grader failed (its sandbox could not start, a child died before the student's import): no point is
    taken for it, and the submission is graded again."""

    status = Status.GRADER_ERROR
