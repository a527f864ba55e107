"""`grader handout OUT`: the student repository. Exercises, public tests and a checker (`checker/`) that runs them
and the visible criteria: no solution, no hidden criterion, no reference observation a hidden criterion reads, and
not the course's seed. Its workflow runs the checker on every push with no secret; hidden grading happens on the
instructor's side (`grader classroom sync`)."""

from __future__ import annotations

import shutil
from pathlib import Path

import jinja2

from grader.course import Course
from grader.student_checker import CHECKER_DIR, IGNORED, write_checker

WORKFLOW = Path(".github") / "workflows" / "check.yml"


def write_handout(course: Course, out: Path) -> list[Path]:
    if out.exists() and any(out.iterdir()):
        raise FileExistsError(f"{out} exists and is not empty")
    out.mkdir(parents=True, exist_ok=True)
    for ex in course.exercises:
        shutil.copytree(course.root / "exercises" / ex.id, out / "exercises" / ex.id, ignore=IGNORED)
    write_checker(course, out / CHECKER_DIR)
    templates = course.root / "templates" / "handout"
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(templates)), undefined=jinja2.StrictUndefined,
                             trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True)
    (out / "README.md").write_text(env.get_template("README.md").render(course=course), encoding="utf-8")
    (out / WORKFLOW).parent.mkdir(parents=True)
    shutil.copyfile(templates / "check.yml", out / WORKFLOW)
    (out / ".gitignore").write_text("__pycache__/\n.pytest_cache/\n*.egg-info/\nreports/\n")
    return sorted(p for p in out.rglob("*") if p.is_file())
