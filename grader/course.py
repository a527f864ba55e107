"""The course configuration (`course.toml`): exercises in order, points per criterion, limits, the seed.

Instructors change points and limits there, never in code.
"""

from __future__ import annotations

import datetime as dt
import importlib.util
import os
import sys
import tomllib
from dataclasses import dataclass, field, fields
from pathlib import Path
from types import ModuleType
from typing import Any

from grader.course_schema import problem_at, problems, schema
from grader.i18n import LANGS
from grader.judge.limits import JudgeLimits
from grader.sandbox.uids import DEFAULT_UIDS
from grader.worker.protocol import Limits

COURSE_FILE = "course.toml"
# What only the grader sees of each exercise, under the course's solutions folder (`Course.solutions`):
# <solutions>/<id>/ holds the reference file, PROBES_FILE, CRITERIA_FILE and the catalog (MUTANTS, VARIANTS).
PROBES_FILE = "probes.py"       # the exercise's probes: run in the sandbox beside the student's module
CRITERIA_FILE = "criteria.py"   # the exercise's criteria: run by the judge on what the probes observed
MUTANTS = "mutants"             # <name>/manifest.toml and change.diff: known bugs its criteria must catch
VARIANTS = "variants"           # <name>/manifest.toml and a whole file: correct code its criteria must pass
# The course's shared grader-side code (a trusted model its probes build, say), beside the exercises' folders: each
# <name>.py there is imported by probes and criteria as `grader.probes.<name>`, the package course code is loaded in.
LIB = "_lib"
# The grader's checkout: the bundled course's root, and where the tool's own files beside the package live (its
# pyproject.toml, scripts/install-torch.sh), which a handout or a Gradescope bundle of any course ships.
TOOL_ROOT = Path(__file__).resolve().parent.parent
# The pages the grader renders (report.html, scorecard.md, class.html, a handout's): a course's own templates/ when it
# has one, else these, the grader's, which the bundled course keeps at the top of the checkout.
TOOL_TEMPLATES = TOOL_ROOT / "templates"
# the values course.schema.json allows in a `visibility` table
GRADESCOPE_VISIBILITIES = tuple(schema()["$defs"]["visibility"]["additionalProperties"]["enum"])


class CourseError(Exception):
    """The course configuration is missing or malformed: `problems`, one sentence each, name the key and its line."""

    def __init__(self, *problems: str):
        super().__init__("\n".join(problems))
        self.problems = problems


@dataclass(frozen=True)
class RubricItem:
    points: float                   # added when a reviewer applies the item; negative takes points off
    text: dict[str, str]            # language -> what the item says


@dataclass(frozen=True)
class Question:
    """A written question of an exercise, answered under `## <id>` in <exercise>/answers.md (grader/grading/answers.py)
    or in a notebook Markdown cell tagged <exercise>:<id>."""

    id: str
    prompt: dict[str, str]          # language -> the question as students read it
    points: float                   # the most a reviewer may give the answer
    rubric: tuple[RubricItem, ...]  # the starting rubric


@dataclass(frozen=True)
class ExerciseConfig:
    id: str
    file: str
    title_en: str
    title_zh: str
    limits: Limits                  # what its run may take
    forbidden: tuple[str, ...]
    points: dict[str, float]
    visible: tuple[str, ...] = ()   # criteria `grader check` shows students: ids, or "kind:<kind>"
    hidden_criteria: int = 0        # a handout's checker: how many criteria only the instructor's grading judges
    # Gradescope visibility by criterion id or "kind:<kind>"; see `gradescope_visibility`.
    visibility: dict[str, str] = field(default_factory=dict)
    questions: tuple[Question, ...] = ()   # its written questions, in course.toml's order
    probes_file: str = ""           # <solutions>/<id>/probes.py: a path (it travels to the sandbox's supervisor)

    @property
    def module_name(self) -> str:
        return Path(self.file).stem

    @property
    def max_points(self) -> float:
        return sum(self.points.values())

    def is_visible(self, criterion_id: str, kind: str) -> bool:
        return criterion_id in self.visible or f"kind:{kind}" in self.visible

    def gradescope_visibility(self, criterion_id: str, kind: str) -> str:
        """When Gradescope shows a criterion to the student: as set by id, else by kind, else `visible` for the
        criteria `grader check` already shows and `after_published` for the hidden ones."""
        chosen = self.visibility.get(criterion_id) or self.visibility.get(f"kind:{kind}")
        return chosen or ("visible" if self.is_visible(criterion_id, kind) else "after_published")


@dataclass(frozen=True)
class Course:
    root: Path
    name: str                                # in English: what report.json records as the course
    seed: int
    exercises: tuple[ExerciseConfig, ...]
    uids: tuple[int, int] = DEFAULT_UIDS     # the sandbox gives each concurrent grading one of these
    # `[sandbox] fork_server`: a grading process forks each strict sandbox's worker from one that imported torch once
    # (grader/worker/spawn.py) instead of starting a fresh one per submission; GRADER_FORK_SERVER=0/1 overrides it.
    # On: tests/test_fork_server.py shows both ways grade byte for byte alike.
    fork_server: bool = True
    # A handout's checker has no solutions/: the reference observations its visible criteria read are stored here.
    references: Path | None = None
    # The course's name in each language, for the pages an instructor reads in it (class.html's title); a course.toml
    # that names it once names it so in every language.
    names: dict[str, str] = field(default_factory=dict)

    def name_in(self, lang: str) -> str:
        return self.names.get(lang) or self.name
    judge_limits: JudgeLimits = JudgeLimits()   # what judging one submission may take ([judge] in course.toml)
    # Where each exercise's grader-side half lives (<solutions>/<id>/: probes, criteria, catalog): root/solutions, or
    # `[course] solutions` (a handout's checker keeps its cut probes and criteria under another name).
    solutions: Path = Path("solutions")
    templates: Path = TOOL_TEMPLATES   # the report pages' Jinja templates: root/templates, else the grader's

    def exercise(self, exercise_id: str) -> ExerciseConfig:
        for ex in self.exercises:
            if ex.id == exercise_id:
                return ex
        known = ", ".join(e.id for e in self.exercises)
        raise CourseError(f"unknown exercise {exercise_id!r}; the course has: {known}")

    def stub(self, ex: ExerciseConfig) -> Path:
        return self.root / "exercises" / ex.id / ex.file

    def solution(self, ex: ExerciseConfig) -> Path:
        return self.solutions / ex.id / ex.file

    def mutants(self, ex: ExerciseConfig) -> Path:
        return self.solutions / ex.id / MUTANTS

    def variants(self, ex: ExerciseConfig) -> Path:
        return self.solutions / ex.id / VARIANTS


def default_root() -> Path:
    """The folder holding course.toml: $GRADER_COURSE, else the checkout this package lives in."""
    env = os.environ.get("GRADER_COURSE")
    return Path(env) if env else Path(__file__).resolve().parent.parent


def default_solutions() -> Path:
    """The default course's solutions folder (`default_root`, its course.toml's `[course] solutions`)."""
    return load_course().solutions


def share_course_code(solutions: Path) -> None:
    """Make the course's shared code (<solutions>/_lib/<name>.py) importable here as `grader.probes.<name>`, as the
    staged probe code imports it in the sandbox: for the judge's criteria, which run in the grader's processes; and
    the course's catalogs (<solutions>/<id>/zh.po) part of the sentences said here."""
    import grader.probes
    from grader.i18n import add_course_catalogs

    add_course_catalogs(solutions)
    lib = str(solutions / LIB)
    if lib not in grader.probes.__path__:
        grader.probes.__path__.append(lib)


def import_course_module(course: Course, exercise_id: str, kind: str) -> ModuleType:
    """An exercise's probes (`kind` PROBES_FILE) or criteria (CRITERIA_FILE) imported in this process, for the tools
    that read them whole (a handout's checker cutting criteria, tests); probes as `grader.probes.<id>`, the name
    they have in the sandbox. Grading never imports probe code here: the sandbox stages it."""
    course.exercise(exercise_id)
    share_course_code(course.solutions)
    name = f"grader.probes.{exercise_id}" if kind == PROBES_FILE else f"course_criteria_{exercise_id}"
    path = course.solutions / exercise_id / kind
    loaded = sys.modules.get(name)
    if loaded is not None and getattr(loaded, "__file__", None) == str(path):
        return loaded
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise CourseError(f"{path} cannot be imported")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module   # first: dataclasses look their module up while the body runs
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module


def load_course(root: Path | None = None) -> Course:
    """The course of `root` (default: `default_root()`), its course.toml checked against grader/course.schema.json:
    CourseError lists every problem with its line."""
    root = (root or default_root()).resolve()
    path = root / COURSE_FILE
    try:
        text = path.read_text(encoding="utf-8")
        data = tomllib.loads(text)
    except FileNotFoundError:
        raise CourseError(f"no {COURSE_FILE} in {root}") from None
    except UnicodeDecodeError:
        raise CourseError(f"{path}: not UTF-8 text") from None
    except tomllib.TOMLDecodeError as exc:
        raise CourseError(f"{path}: {exc}") from None
    found = problems(path, text, data)
    course = data.get("course", {})
    uids = data.get("sandbox", {}).get("uids", list(DEFAULT_UIDS))
    if not found and uids[0] > uids[1]:
        found.append(problem_at(path, text, ("sandbox", "uids"), f"`uids` under [sandbox] must be [first, last] with "
                                f"first <= last, not {uids}"))
    solutions = root / course.get("solutions", "solutions")
    deadline = data.get("classroom", {}).get("deadline")
    if not found and deadline is not None and not _is_time(deadline):
        found.append(problem_at(path, text, ("classroom", "deadline"), f"[classroom] deadline {deadline!r} is not an "
                                "ISO 8601 time such as 2026-12-01T23:59:59Z"))
    if not found:
        found += _repeated_questions(path, text, data.get("exercise", []))
    if found:
        raise CourseError(*found)
    defaults = data.get("defaults", {})
    exercises = []
    for raw in data.get("exercise", []):
        merged = {**defaults, **raw}
        exercises.append(ExerciseConfig(
            id=raw["id"], file=raw["file"], title_en=raw["title"]["en"], title_zh=raw["title"]["zh"],
            limits=Limits.from_table(merged), forbidden=tuple(merged.get("forbidden", ())),
            points={str(k): float(v) for k, v in raw["points"].items()},
            visible=tuple(merged.get("visible", ())),
            hidden_criteria=int(raw.get("hidden_criteria", 0)),   # the schema takes 3.0 for a whole number
            visibility={**defaults.get("visibility", {}), **raw.get("visibility", {})},
            questions=tuple(_question(q) for q in raw.get("question", ())),
            probes_file=str(solutions / raw["id"] / PROBES_FILE),
        ))
    for ex in exercises:
        if ex.id == LIB:
            raise CourseError(f"{path}: exercise id {ex.id!r} names the folder of the course's shared code")
        if ex.file in (PROBES_FILE, CRITERIA_FILE):
            raise CourseError(f"{path}: exercise {ex.id}'s file may not be named {ex.file}: solutions/{ex.id}/ "
                              "holds the grader's file of that name")
    missing = [str(p) for ex in exercises for p in (Path(ex.probes_file), solutions / ex.id / CRITERIA_FILE)
               if not p.is_file()]
    if missing:
        raise CourseError(f"{path}: the course lacks {', '.join(missing)} (an exercise's probes and criteria are "
                          f"solutions/<id>/{PROBES_FILE} and {CRITERIA_FILE} of the course)")
    try:
        seed = int(os.environ.get("GRADER_SEED", course.get("seed", 0)))
    except ValueError:
        raise CourseError(f"GRADER_SEED={os.environ['GRADER_SEED']!r} is not a whole number") from None
    fork_server = data.get("sandbox", {}).get("fork_server", Course.fork_server)
    if os.environ.get("GRADER_FORK_SERVER") in ("0", "1"):
        fork_server = os.environ["GRADER_FORK_SERVER"] == "1"
    references = root / course["references"] if "references" in course else None
    names = _names(course.get("name", "course"))
    table = data.get("judge", {})
    judge: dict[str, Any] = {f.name: (int if f.type == "int" else float)(table[f.name]) for f in fields(JudgeLimits)
                             if f.name in table}
    return Course(root=root, name=names["en"], seed=seed, exercises=tuple(exercises),
                  uids=(int(uids[0]), int(uids[1])), fork_server=fork_server, references=references, names=names,
                  solutions=solutions, judge_limits=JudgeLimits(**judge),
                  templates=root / "templates" if (root / "templates").is_dir() else TOOL_TEMPLATES)


def _question(raw: dict) -> Question:
    return Question(id=raw["id"], prompt={lang: raw["prompt"][lang] for lang in LANGS}, points=float(raw["points"]),
                    rubric=tuple(RubricItem(points=float(item["points"]),
                                            text={lang: item["text"][lang] for lang in LANGS})
                                 for item in raw["rubric"]))


def _repeated_questions(path: Path, text: str, exercises: list[dict]) -> list[str]:
    """A question id used twice in one exercise: its answers could not be told apart."""
    found = []
    for i, raw in enumerate(exercises):
        seen: set[str] = set()
        for j, question in enumerate(raw.get("question", ())):
            if question["id"] in seen:
                found.append(problem_at(path, text, ("exercise", i, "question", j, "id"),
                                        f'question `{question["id"]}` of exercise "{raw["id"]}" is there twice: '
                                        "give each question of an exercise its own id"))
            seen.add(question["id"])
    return found


def _names(raw: str | dict[str, str]) -> dict[str, str]:
    """`[course] name`: one name (as course.toml held before it named the course in both languages), or a table of
    one per language, `{ en = "...", zh = "..." }`; a language it leaves out takes the English name."""
    if isinstance(raw, str):
        return dict.fromkeys(LANGS, raw)
    return {lang: raw.get(lang, raw["en"]) for lang in LANGS}


def _is_time(text: str) -> bool:
    try:
        dt.datetime.fromisoformat(text)
    except ValueError:
        return False
    return True
