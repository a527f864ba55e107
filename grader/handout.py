"""`grader handout OUT`: the student repository. Exercises and public tests only: no solution, no hidden
criterion, no reference observation, no course configuration (it holds the seed of the hidden inputs)."""

from __future__ import annotations

import shutil
from pathlib import Path

import jinja2

from grader.course import Course

IGNORED = shutil.ignore_patterns("__pycache__", "*.pyc", ".pytest_cache")


def write_handout(course: Course, out: Path) -> list[Path]:
    if out.exists() and any(out.iterdir()):
        raise FileExistsError(f"{out} exists and is not empty")
    out.mkdir(parents=True, exist_ok=True)
    for ex in course.exercises:
        shutil.copytree(course.root / "exercises" / ex.id, out / "exercises" / ex.id, ignore=IGNORED)
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(course.root / "templates" / "handout")),
                             undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True,
                             keep_trailing_newline=True)
    (out / "README.md").write_text(env.get_template("README.md").render(course=course), encoding="utf-8")
    workflow = out / ".github" / "workflows" / "grade.yml"
    workflow.parent.mkdir(parents=True)
    shutil.copyfile(course.root / "templates" / "handout" / "grade.yml", workflow)
    (out / ".gitignore").write_text("__pycache__/\n.pytest_cache/\ngrading/\n.grader/\n")
    return sorted(p for p in out.rglob("*") if p.is_file())
