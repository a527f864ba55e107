"""The course configuration (`course.toml`): exercises in order, points per criterion, limits, the seed.

Instructors change points and limits there, never in code.
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass
from pathlib import Path

COURSE_FILE = "course.toml"


class CourseError(Exception):
    """The course configuration is missing or malformed; the message names the key."""


@dataclass(frozen=True)
class ExerciseConfig:
    id: str
    file: str
    title_en: str
    title_zh: str
    timeout_s: float
    memory_mb: int
    output_kb: int
    forbidden: tuple[str, ...]
    points: dict[str, float]
    visible: tuple[str, ...] = ()   # criteria `grader check` shows students: ids, or "kind:<kind>"

    @property
    def module_name(self) -> str:
        return Path(self.file).stem

    @property
    def probes_module(self) -> str:
        return f"grader.probes.{self.id}"

    @property
    def max_points(self) -> float:
        return sum(self.points.values())

    def is_visible(self, criterion_id: str, kind: str) -> bool:
        return criterion_id in self.visible or f"kind:{kind}" in self.visible


@dataclass(frozen=True)
class Course:
    root: Path
    name: str
    seed: int
    exercises: tuple[ExerciseConfig, ...]

    def exercise(self, exercise_id: str) -> ExerciseConfig:
        for ex in self.exercises:
            if ex.id == exercise_id:
                return ex
        known = ", ".join(e.id for e in self.exercises)
        raise CourseError(f"unknown exercise {exercise_id!r}; the course has: {known}")

    def stub(self, ex: ExerciseConfig) -> Path:
        return self.root / "exercises" / ex.id / ex.file

    def solution(self, ex: ExerciseConfig) -> Path:
        return self.root / "solutions" / ex.id / ex.file


def default_root() -> Path:
    """The folder holding course.toml: $GRADER_COURSE, else the checkout this package lives in."""
    env = os.environ.get("GRADER_COURSE")
    return Path(env) if env else Path(__file__).resolve().parent.parent


def load_course(root: Path | None = None) -> Course:
    root = (root or default_root()).resolve()
    path = root / COURSE_FILE
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise CourseError(f"no {COURSE_FILE} in {root}") from None
    except tomllib.TOMLDecodeError as exc:
        raise CourseError(f"{path}: {exc}") from None
    course = data.get("course", {})
    defaults = data.get("defaults", {})
    exercises = []
    for i, raw in enumerate(data.get("exercise", [])):
        try:
            merged = {**defaults, **raw}
            exercises.append(ExerciseConfig(
                id=merged["id"], file=merged["file"],
                title_en=merged["title"]["en"], title_zh=merged["title"]["zh"],
                timeout_s=float(merged["timeout_s"]), memory_mb=int(merged["memory_mb"]),
                output_kb=int(merged["output_kb"]), forbidden=tuple(merged.get("forbidden", ())),
                points={str(k): float(v) for k, v in merged["points"].items()},
                visible=tuple(merged.get("visible", ())),
            ))
        except (KeyError, TypeError, ValueError) as exc:
            raise CourseError(f"{path}: exercise #{i + 1} is missing or has a bad {exc}") from None
    seed = int(os.environ.get("GRADER_SEED", course.get("seed", 0)))
    return Course(root=root, name=course.get("name", "course"), seed=seed, exercises=tuple(exercises))
