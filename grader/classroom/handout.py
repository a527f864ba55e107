"""`grader handout OUT`: the student repository. Exercises, public tests and a checker (`checker/`) that runs them
and the visible criteria: no solution, no hidden criterion, no reference observation a hidden criterion reads, and
not the course's seed. Its workflow runs the checker on every push with no secret; hidden grading happens on the
instructor's side (`grader classroom sync`).

It installs on a stock system, as its README says: into a virtual environment (`.venv/`, ignored by git), with pip
and `checker/install-torch.sh`, or with uv through its `pyproject.toml`, whose `cpu` and `mps` extras pick
PyTorch's CPU-only index or PyPI's build (`uv run --extra cpu grader check`).
"""

from __future__ import annotations

import re
import shutil
import tomllib
from pathlib import Path

import jinja2

import grader
from grader.course import TOOL_ROOT, Course
from grader.classroom.checker import CHECKER_DIR, IGNORED, write_checker

WORKFLOW = Path(".github") / "workflows" / "check.yml"
GITIGNORE = ("__pycache__/", ".pytest_cache/", "*.egg-info/", "reports/", ".venv/", ".ipynb_checkpoints/")


def torch_version(course: Course) -> str:
    """The torch the course is calibrated on, as the install script pins it (its one source)."""
    script = (TOOL_ROOT / "scripts" / "install-torch.sh").read_text(encoding="utf-8")
    pinned = re.search(r"torch==([0-9][0-9.]*[0-9])", script)
    if pinned is None:
        raise ValueError("scripts/install-torch.sh pins no torch==VERSION")
    return pinned.group(1)


def write_handout(course: Course, out: Path) -> list[Path]:
    if out.exists() and any(out.iterdir()):
        raise FileExistsError(f"{out} exists and is not empty")
    out.mkdir(parents=True, exist_ok=True)
    for ex in course.exercises:
        shutil.copytree(course.root / "exercises" / ex.id, out / "exercises" / ex.id, ignore=IGNORED)
    write_checker(course, out / CHECKER_DIR)
    templates = course.templates / "handout"
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(templates)), undefined=jinja2.StrictUndefined,
                             trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True)
    requires = tomllib.loads((TOOL_ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["requires-python"]
    facts = {"course": course, "torch": torch_version(course), "requires_python": requires,
             "python": requires.lstrip(">="), "version": grader.__version__}
    for name in ("README.md", "pyproject.toml"):
        (out / name).write_text(env.get_template(name).render(**facts), encoding="utf-8")
    (out / WORKFLOW).parent.mkdir(parents=True)
    shutil.copyfile(templates / "check.yml", out / WORKFLOW)
    (out / ".gitignore").write_text("\n".join(GITIGNORE) + "\n")
    return sorted(p for p in out.rglob("*") if p.is_file())
