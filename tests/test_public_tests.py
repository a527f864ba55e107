"""Each exercise's public tests pass on the reference solution and fail on the untouched stub (and, in
tests/test_public_tests_variants.py, they are never stricter than the hidden criteria)."""

import shutil
import subprocess
import sys

import pytest

from grader.course import load_course

from conftest import ROOT

# end to end: every test here grades in a sandbox (`pytest -m "not slow"` leaves them out)
pytestmark = pytest.mark.slow

COURSE = load_course(ROOT)


def run_public_tests(tmp_path, exercise_id: str, source) -> subprocess.CompletedProcess:
    ex = COURSE.exercise(exercise_id)
    folder = tmp_path / exercise_id
    folder.mkdir()
    for test in (ROOT / "exercises" / exercise_id).glob("test_*.py"):
        shutil.copyfile(test, folder / test.name)
    shutil.copyfile(source, folder / ex.file)
    return subprocess.run([sys.executable, "-m", "pytest", *isolated(folder), str(folder)],
                          capture_output=True, text=True, cwd=tmp_path, timeout=300)


def isolated(folder) -> list[str]:
    """pytest options that keep a run to `folder`: its own empty configuration and no conftest.py from the
    folders above it (a temporary folder's parents are shared with whatever else runs on the machine)."""
    (folder / "pytest.ini").write_text("[pytest]\n")
    return ["-q", "-p", "no:cacheprovider", "-c", str(folder / "pytest.ini"), "--rootdir", str(folder),
            "--confcutdir", str(folder)]


@pytest.mark.parametrize("exercise_id", [e.id for e in COURSE.exercises])
def test_public_tests_pass_on_solution(tmp_path, exercise_id):
    done = run_public_tests(tmp_path, exercise_id, COURSE.solution(COURSE.exercise(exercise_id)))
    assert done.returncode == 0, done.stdout[-3000:]


@pytest.mark.parametrize("exercise_id", [e.id for e in COURSE.exercises])
def test_public_tests_fail_on_stub(tmp_path, exercise_id):
    done = run_public_tests(tmp_path, exercise_id, COURSE.stub(COURSE.exercise(exercise_id)))
    assert done.returncode == 1, done.stdout[-3000:]
    assert " passed" not in done.stdout.splitlines()[-1], f"some public test passes on the stub: {done.stdout[-500:]}"
