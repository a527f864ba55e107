"""The report of one graded submission. Renderers read it; nothing but the builder computes a score."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field, fields, is_dataclass
from json.encoder import encode_basestring
from pathlib import Path

from grader.worker.protocol import Status

# 3.3: a failed criterion may earn a share of its points (one whose points follow a count: broken models caught of all
# served), so a criterion's `points` lie anywhere from 0 to `max_points`; and a written answer a reviewer graded
# (grader.batch.manual) is `graded`, with its points, the rubric `items` applied (id, points, text), the `comment` and
# the `reviewer`; the `grade` holds the written answers' points (`written`) once reviewing has begun, and its maximum
# counts them. 3.2: an exercise's `answers`: the student's written answers to its questions, as text, each
# `awaiting_review` (or `unanswered`) with 0 points until a reviewer grades it; the score (the criteria's) does not
# count them. 3.1: no `seed` (the course seed is the course's secret, never shown to a student), and an optional
# `grade` (grader.batch.grades): the criteria's points, the instructor's overrides, the late penalty and the final
# grade. 3.0: an exercise that earned some of its points but not all is `partial` (in 2.0 it was `failed`, which now
# means an attempted exercise that earned nothing). 2.0: every message in both languages.
SCHEMA_VERSION = "3.3"
SCHEMA_PATH = Path(__file__).with_name("schema.json")

# Fields that change from one run to the next; everything else is the same for the same submission.
VOLATILE_FIELDS = ("started_at", "duration_s", "run")

# Every status a criterion or an exercise can have (grader/worker/protocol.py's Status, which says what each means);
# schema.json's enum and every renderer's labels follow it.
STATUSES = tuple(Status)
# An exercise has one more: `partial`, some of its points earned and not every criterion passed (a criterion that
# earns part of its points is `failed` with those points: its status says it did not pass).
PARTIAL = "partial"
EXERCISE_STATUSES = (*STATUSES, PARTIAL)

_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def valid_unicode(value):
    """`value` with every lone surrogate in its strings (dict keys included) replaced by U+FFFD.

    Student text can hold them (`raise ValueError("\\ud800")`, a folder name decoded with surrogateescape),
    and no UTF-8 file can: the model holds none, so every report can be written."""
    if type(value) is str and (value.isascii() or _LONE_SURROGATE.search(value) is None):
        return value   # the common case, checked without building a new string (isascii is O(1))
    if isinstance(value, str):
        return _LONE_SURROGATE.sub("\ufffd", value)
    if isinstance(value, dict):
        return {valid_unicode(k): valid_unicode(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        if _numbers_only(value):
            return type(value)(value)   # no string in it: copied as it is (evidence's arrays, a loss curve)
        return type(value)(valid_unicode(v) for v in value)
    return value


_NUMBERS = frozenset({int, float, bool, type(None)})   # exactly these types, written by json as its C encoder does


def _numbers_only(values: list | tuple) -> bool:
    return all(type(v) in _NUMBERS for v in values)


class _ValidUnicode:
    """Cleans the dataclass's own fields when it is built (nested results clean themselves)."""

    def __post_init__(self) -> None:
        for f in fields(self):
            setattr(self, f.name, valid_unicode(getattr(self, f.name)))


@dataclass
class CriterionResult(_ValidUnicode):
    id: str
    kind: str
    title: dict[str, str]
    hint: dict[str, str]
    points: float
    max_points: float
    status: str
    message: dict[str, str]   # language -> what was observed against what was expected
    evidence: dict = field(default_factory=dict)


# A written answer's status until a reviewer grades it (its points are 0 and the score leaves them out), that of a
# question nothing was written for, and that of an answer a reviewer graded (its points count in the grade).
AWAITING_REVIEW = "awaiting_review"
UNANSWERED = "unanswered"
GRADED = "graded"
ANSWER_STATUSES = (AWAITING_REVIEW, UNANSWERED, GRADED)
REVIEW_FIELDS = ("items", "comment", "reviewer")   # a graded answer's alone: left out of the others' JSON


@dataclass
class AnswerResult(_ValidUnicode):
    id: str                   # the question's id (course.toml's [[exercise.question]])
    prompt: dict[str, str]    # language -> the question
    text: str                 # what the student wrote, as text ("" when nothing)
    points: float
    max_points: float
    status: str               # one of ANSWER_STATUSES
    items: list[dict] | None = None   # graded: the rubric items applied, each {id, points, text: {en, zh}}
    comment: str | None = None        # graded: the reviewer's comment to the student (text)
    reviewer: str | None = None       # graded: who graded it


@dataclass
class ExerciseResult(_ValidUnicode):
    id: str
    title: dict[str, str]
    file: str
    score: float
    max_score: float
    status: str
    message: dict[str, str]
    criteria: list[CriterionResult]
    run: dict = field(default_factory=dict)  # wall and CPU seconds, memory, limit hit, output tail
    answers: list[AnswerResult] = field(default_factory=list)   # its written questions' answers


@dataclass
class Report(_ValidUnicode):
    schema_version: str
    submission: str
    course: str
    score: float
    max_score: float
    percent: float
    sandbox: dict
    grader_version: str
    torch_version: str
    started_at: str
    duration_s: float
    exercises: list[ExerciseResult]
    # What the grade became after grading (overrides, lateness; grader.batch.grades.Grade.record); None: the score is
    # the
    # grade. `score` always stays what the criteria gave.
    grade: dict | None = None

    def to_dict(self) -> dict:
        # cleaned again: a field assigned after the report was built skipped __post_init__
        data = _plain(self)
        if data["grade"] is None:
            del data["grade"]
        for exercise in data["exercises"]:
            for answer in exercise["answers"]:
                if answer["status"] != GRADED:
                    for key in REVIEW_FIELDS:
                        del answer[key]
        return data

    @property
    def final_score(self) -> float:
        """The grade: the final one when something after grading had a say, else the criteria's score."""
        return self.grade["final"] if self.grade else self.score

    @property
    def final_max(self) -> float:
        """The most the grade could be: the criteria's, and the written answers' once they count."""
        return self.grade["max_score"] if self.grade else self.max_score

    @property
    def final_percent(self) -> float:
        return self.grade["percent"] if self.grade else self.percent

    def to_json(self) -> str:
        return indented_json(self.to_dict())

    @classmethod
    def from_dict(cls, data: dict) -> Report:
        """The report a report.json holds, as it holds it (grader.report.build.stored_report reads an older one)."""
        exercises = [ExerciseResult(**{**e, "criteria": [CriterionResult(**c) for c in e["criteria"]],
                                       "answers": [AnswerResult(**a) for a in e.get("answers", [])]})
                     for e in data["exercises"]]
        return cls(**{**data, "exercises": exercises})

    def criteria_count(self) -> tuple[int, int]:
        every = [c for e in self.exercises for c in e.criteria]
        return sum(c.status == Status.PASSED for c in every), len(every)


def _plain(value):
    """dataclasses.asdict and valid_unicode in one pass: the dataclasses as dicts of their fields in order, lists,
    tuples and dicts copied, strings cleaned; every other value (a number, None) is kept as it is."""
    if isinstance(value, str):
        return valid_unicode(value)
    if isinstance(value, dict):
        return {valid_unicode(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(value) if _numbers_only(value) else type(value)(_plain(v) for v in value)
    if is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in fields(value)}
    return value


class _NotPlain(Exception):
    """A value `indented_json` leaves to json.dumps (a key that is not a string, a type JSON has no form for)."""


def indented_json(data) -> str:
    """`json.dumps(data, indent=2, ensure_ascii=False)`, the same text, made in a third of the time: json's own C
    encoder is used only without indentation, and its Python one yields every piece up through every level. Strings
    go through the same encoder function json uses, numbers through the same reprs; anything else is json's."""
    parts: list[str] = []
    try:
        _indented(data, "\n", parts)
    except (_NotPlain, RecursionError):
        return json.dumps(data, indent=2, ensure_ascii=False)
    return "".join(parts)


def _indented(value, newline: str, parts: list[str]) -> None:
    # in json.encoder's order of checks, so that a subclass (a StrEnum, an IntEnum) is written as json writes it
    if isinstance(value, str):
        parts.append(encode_basestring(value))
    elif value is None:
        parts.append("null")
    elif value is True:
        parts.append("true")
    elif value is False:
        parts.append("false")
    elif isinstance(value, int):
        parts.append(int.__repr__(value))
    elif isinstance(value, float):
        parts.append(_float_text(value))
    elif isinstance(value, (list, tuple)):
        if not value:
            parts.append("[]")
            return
        inner = newline + "  "
        if _numbers_only(value):   # json's C encoder writes each number as its Python one would, none holds ", "
            parts.append("[" + inner + _compact(value)[1:-1].replace(", ", "," + inner) + newline + "]")
            return
        opening = "[" + inner
        for item in value:
            if type(item) is str:   # the commonest leaf, written here rather than by a call
                parts.append(opening + encode_basestring(item))
            else:
                parts.append(opening)
                _indented(item, inner, parts)
            opening = "," + inner
        parts.append(newline + "]")
    elif isinstance(value, dict):
        if not value:
            parts.append("{}")
            return
        inner = newline + "  "
        opening = "{" + inner
        for key, item in value.items():
            if not isinstance(key, str):
                raise _NotPlain
            if type(item) is str:
                parts.append(opening + encode_basestring(key) + ": " + encode_basestring(item))
            else:
                parts.append(opening + encode_basestring(key) + ": ")
                _indented(item, inner, parts)
            opening = "," + inner
        parts.append(newline + "}")
    else:
        raise _NotPlain


_compact = json.JSONEncoder(ensure_ascii=False).encode   # no indent: json's C encoder


def _float_text(value: float) -> str:
    """A float as json.dumps writes it (allow_nan, as its default)."""
    if value != value:
        return "NaN"
    if value == float("inf"):
        return "Infinity"
    if value == -float("inf"):
        return "-Infinity"
    return float.__repr__(value)


def stable_view(report: dict) -> dict:
    """The report without the fields that legitimately change between runs (for determinism checks)."""
    view = {k: v for k, v in report.items() if k not in VOLATILE_FIELDS}
    view["exercises"] = [{k: v for k, v in e.items() if k not in VOLATILE_FIELDS} for e in report["exercises"]]
    return view
