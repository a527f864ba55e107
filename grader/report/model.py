"""The report of one graded submission. Renderers read it; nothing but the builder computes a score."""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

from grader.worker.protocol import Status

# 3.1: no `seed` (the course seed is the course's secret, never shown to a student), and an optional `grade`
# (grader.batch.grades): the criteria's points, the instructor's overrides, the late penalty and the final grade. 3.0:
# an
# exercise that earned some of its points but not all is `partial` (in 2.0 it was `failed`, which now means an
# attempted exercise that earned nothing). 2.0: every message in both languages.
SCHEMA_VERSION = "3.1"
SCHEMA_PATH = Path(__file__).with_name("schema.json")

# Fields that change from one run to the next; everything else is the same for the same submission.
VOLATILE_FIELDS = ("started_at", "duration_s", "run")

# Every status a criterion or an exercise can have (grader/worker/protocol.py's Status, which says what each means);
# schema.json's enum and every renderer's labels follow it.
STATUSES = tuple(Status)
# An exercise has one more: `partial`, some of its points earned and not every criterion passed (a criterion's
# points are all or nothing, so no criterion is partial).
PARTIAL = "partial"
EXERCISE_STATUSES = (*STATUSES, PARTIAL)

_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def valid_unicode(value):
    """`value` with every lone surrogate in its strings (dict keys included) replaced by U+FFFD.

    Student text can hold them (`raise ValueError("\\ud800")`, a folder name decoded with surrogateescape),
    and no UTF-8 file can: the model holds none, so every report can be written."""
    if isinstance(value, str):
        return _LONE_SURROGATE.sub("\ufffd", value)
    if isinstance(value, dict):
        return {valid_unicode(k): valid_unicode(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(valid_unicode(v) for v in value)
    return value


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
        data = valid_unicode(asdict(self))
        if data["grade"] is None:
            del data["grade"]
        return data

    @property
    def final_score(self) -> float:
        """The grade: the final one when something after grading had a say, else the criteria's score."""
        return self.grade["final"] if self.grade else self.score

    @property
    def final_percent(self) -> float:
        return self.grade["percent"] if self.grade else self.percent

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, ensure_ascii=False, sort_keys=False)

    @classmethod
    def from_dict(cls, data: dict) -> Report:
        """The report a report.json holds, as it holds it (grader.report.build.stored_report reads an older one)."""
        exercises = [ExerciseResult(**{**e, "criteria": [CriterionResult(**c) for c in e["criteria"]]})
                     for e in data["exercises"]]
        return cls(**{**data, "exercises": exercises})

    def criteria_count(self) -> tuple[int, int]:
        every = [c for e in self.exercises for c in e.criteria]
        return sum(c.status == Status.PASSED for c in every), len(every)


def stable_view(report: dict) -> dict:
    """The report without the fields that legitimately change between runs (for determinism checks)."""
    view = {k: v for k, v in report.items() if k not in VOLATILE_FIELDS}
    view["exercises"] = [{k: v for k, v in e.items() if k not in VOLATILE_FIELDS} for e in report["exercises"]]
    return view
