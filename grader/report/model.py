"""The report of one graded submission. Renderers read it; nothing but the builder computes a score."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

SCHEMA_VERSION = "1.0"
SCHEMA_PATH = Path(__file__).with_name("schema.json")

# Fields that change from one run to the next; everything else is the same for the same submission.
VOLATILE_FIELDS = ("started_at", "duration_s", "run")


@dataclass
class CriterionResult:
    id: str
    kind: str
    title: dict[str, str]
    hint: dict[str, str]
    points: float
    max_points: float
    status: str
    message: str
    evidence: dict = field(default_factory=dict)


@dataclass
class ExerciseResult:
    id: str
    title: dict[str, str]
    file: str
    score: float
    max_score: float
    status: str
    message: str
    criteria: list[CriterionResult]
    run: dict = field(default_factory=dict)  # wall and CPU seconds, memory, limit hit, output tail


@dataclass
class Report:
    schema_version: str
    submission: str
    course: str
    score: float
    max_score: float
    percent: float
    sandbox: dict
    grader_version: str
    torch_version: str
    seed: int
    started_at: str
    duration_s: float
    exercises: list[ExerciseResult]

    def to_dict(self) -> dict:
        return asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, ensure_ascii=False, sort_keys=False)

    def criteria_count(self) -> tuple[int, int]:
        every = [c for e in self.exercises for c in e.criteria]
        return sum(c.status == "passed" for c in every), len(every)


def stable_view(report: dict) -> dict:
    """The report without the fields that legitimately change between runs (for determinism checks)."""
    view = {k: v for k, v in report.items() if k not in VOLATILE_FIELDS}
    view["exercises"] = [{k: v for k, v in e.items() if k not in VOLATILE_FIELDS} for e in report["exercises"]]
    return view
