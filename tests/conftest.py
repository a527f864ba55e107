"""Shared fixtures: the course, submissions built from files, and the grader run as a user runs it."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from grader.course import CRITERIA_FILE, PROBES_FILE, import_course_module, load_course, share_course_code

ROOT = Path(__file__).resolve().parent.parent
share_course_code(ROOT / "solutions")   # the bundled course's shared code (its trusted model): grader.probes.lm


def course_outside(folder: Path) -> Path:
    """A copy of the bundled course in `folder`, a course folder of its own outside the checkout: course.toml,
    exercises/, solutions/ (probes, criteria, catalog, shared code) and templates/, real files, no links back."""
    for name in ("exercises", "solutions", "templates"):
        shutil.copytree(ROOT / name, folder / name, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copyfile(ROOT / "course.toml", folder / "course.toml")
    return folder


def probes_module(exercise_id: str, root: Path = ROOT):
    """The bundled course's probes of an exercise, imported here (as `grader.probes.<id>`) for the tests that read
    them; grading never imports them in the grader's process."""
    return import_course_module(load_course(root), exercise_id, PROBES_FILE)


def criteria_module(exercise_id: str, root: Path = ROOT):
    """The bundled course's criteria of an exercise, imported here for the tests that call them directly."""
    return import_course_module(load_course(root), exercise_id, CRITERIA_FILE)

# The suite runs on two pytest-xdist workers (pyproject's addopts: `-n 2 --dist loadfile`, a file's tests on one
# worker so that its module fixtures are made once). A worker takes the next file when one ends, so the files that
# take longest are handed out first, in the order of their measured time (`--durations` of a whole run on this
# 2-core machine, each file's tests summed): started last, one of them would keep one worker busy long after the
# other ran out of work. A file that alone would take a large share of the run is split (tests/hostile_suite.py).
LONGEST_FIRST = ("test_judge_isolation.py", "test_selftest.py", "test_check_anywhere.py", "test_batch.py",
                 "test_audits_grading.py", "test_audits_isolation.py",
                 "test_faults.py", "test_manual_grades.py", "test_audits_catalog.py", "test_review_browser.py",
                 "test_student_install.py", "test_student_install_uv.py", "test_grade_end_to_end.py",
                 "test_hostile_1.py", "test_hostile_2.py", "test_hostile_3.py", "test_public_tests_variants.py",
                 "test_public_tests.py", "test_classroom.py", "test_fork_server.py", "test_sandbox_statuses.py",
                 "test_cluster.py", "test_isolation.py", "test_similarity.py", "test_mutation.py",
                 "test_handout_and_gradescope.py", "test_class_view.py", "test_overrides.py", "test_rejudge.py",
                 "test_slurm.py", "test_warm.py", "test_prestart.py", "test_basic_level.py", "test_notebooks.py",
                 "test_memory_limits.py")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--course", action="append", default=[], type=Path, metavar="DIR",
                     help="a course folder the course-parametrised tests (tests/test_isolation.py) also run on")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The longest files first (LONGEST_FIRST), every other file after them in its usual order."""
    def rank(item: pytest.Item) -> int:
        name = item.path.name
        return LONGEST_FIRST.index(name) if name in LONGEST_FIRST else len(LONGEST_FIRST)

    items.sort(key=rank)   # stable: each file's tests keep their order


@pytest.fixture(scope="session")
def course():
    return load_course(ROOT)


@dataclass
class Graded:
    returncode: int
    stdout: str
    stderr: str
    out: Path

    @property
    def report(self) -> dict:
        return json.loads((self.out / "report.json").read_text())

    def exercise(self, exercise_id: str) -> dict:
        return next(e for e in self.report["exercises"] if e["id"] == exercise_id)

    def criterion(self, exercise_id: str, criterion_id: str) -> dict:
        return next(c for c in self.exercise(exercise_id)["criteria"] if c["id"] == criterion_id)


def run_grader(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "GITHUB_STEP_SUMMARY"}
    return subprocess.run([sys.executable, "-m", "grader", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT, env=env)


def shared_folder(tmp_path_factory, name: str) -> Path:
    """A folder of this run that every pytest-xdist worker sees (the parent of the workers' own base folders), or
    this process's base folder when it runs alone."""
    base = tmp_path_factory.getbasetemp()
    return (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / name


@pytest.fixture(scope="session")
def sample_graded(tmp_path_factory) -> Graded:
    """The bundled sample submission graded once for the whole run, as `grader grade` writes it (in English; its
    report.json holds every message in both languages). Every file that looks at a real report of it shares this
    one, read-only: copy what a test writes next to. Under pytest-xdist the first worker to ask grades while the
    others wait on the lock, then read the same folder."""
    folder = shared_folder(tmp_path_factory, "sample-graded")
    folder.parent.mkdir(parents=True, exist_ok=True)
    record = folder / "run.json"
    with open(folder.parent / "sample-graded.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not record.is_file():
            out = folder / "out"
            done = run_grader("grade", str(ROOT / "examples" / "submissions" / "sample"), "--out", str(out))
            record.write_text(json.dumps({"returncode": done.returncode, "stdout": done.stdout,
                                          "stderr": done.stderr}))
    run = json.loads(record.read_text())
    return Graded(run["returncode"], run["stdout"], run["stderr"], folder / "out")


@pytest.fixture
def grade(tmp_path):
    """grade(submission, *extra_args) -> Graded, reports written under tmp_path."""
    counter = iter(range(1000))

    def _grade(submission: Path, *extra: str) -> Graded:
        out = tmp_path / f"out-{next(counter)}"
        done = run_grader("grade", str(submission), "--out", str(out), *extra)
        return Graded(done.returncode, done.stdout, done.stderr, out)

    return _grade


@pytest.fixture
def make_submission(tmp_path, course):
    """make_submission({exercise_id: source_file_or_text}) -> a folder laid out like exercises/."""

    def _make(files: dict[str, Path | str], name: str = "student") -> Path:
        root = tmp_path / name
        for exercise_id, source in files.items():
            ex = course.exercise(exercise_id)
            target = root / exercise_id / ex.file
            target.parent.mkdir(parents=True, exist_ok=True)
            if isinstance(source, Path):
                shutil.copyfile(source, target)
            else:
                target.write_text(source)
        root.mkdir(parents=True, exist_ok=True)
        return root

    return _make


def course_copy(folder: Path, exercise_ids: list[str] | None = None, timeout_s: dict[str, float] | None = None) -> Path:
    """A course folder sharing this checkout's exercises, solutions and templates, with course.toml cut
    down to `exercise_ids` and the exercises named in `timeout_s` given that timeout (the others keep the course's).

    A short timeout belongs only on the exercise whose hanging code a test is about: on a busy machine a healthy
    exercise needs many times its own CPU time in wall time, so it gets the course's generous one."""
    import re

    folder.mkdir(parents=True, exist_ok=True)
    for name in ("exercises", "solutions", "templates"):
        (folder / name).symlink_to(ROOT / name)
    text = (ROOT / "course.toml").read_text()
    head, *blocks = text.split("[[exercise]]")
    if exercise_ids is not None:
        blocks = [b for b in blocks if re.search(r'(?m)^id = "(\w+)"', b).group(1) in exercise_ids]
    for exercise_id, seconds in (timeout_s or {}).items():
        found = [i for i, b in enumerate(blocks) if re.search(r'(?m)^id = "(\w+)"', b).group(1) == exercise_id]
        assert found, f"{exercise_id} is not in the course"
        block = blocks[found[0]]
        blocks[found[0]] = (re.sub(r"(?m)^timeout_s = .*$", f"timeout_s = {seconds}", block)
                            if re.search(r"(?m)^timeout_s = ", block) else
                            re.sub(r'(?m)^(id = "\w+"\n)', rf"\1timeout_s = {seconds}\n", block, count=1))
    text = head + "".join("[[exercise]]" + b for b in blocks)
    (folder / "course.toml").write_text(text)
    return folder


@pytest.fixture
def fake():
    """test_classroom's fake GitHub, served on a local port (`fake.url`) for the test."""
    from test_classroom import FakeGitHub, serve

    github = FakeGitHub()
    server = serve(github)
    github.url = f"http://127.0.0.1:{server.server_address[1]}"
    yield github
    server.shutdown()
