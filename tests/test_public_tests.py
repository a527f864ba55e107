"""Each exercise's public tests pass on the reference solution and fail on the untouched stub, and they are never
stricter than the hidden criteria: every correct variant (tests/variants/, each with full marks) passes them."""

import json
import shutil
import subprocess
import sys

import pytest

from grader.course import load_course
from grader.review.selftest import discover

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


# Runs one exercise's public tests on several sources in one interpreter (torch is imported once): each source in a
# folder of its own with copies of the tests, the exercise's module and the test modules forgotten between runs.
EACH_SOURCE = """
import json, sys
import pytest
module, tests, runs = sys.argv[1], json.loads(sys.argv[2]), json.loads(sys.argv[3])
failed = {}
for folder, options in runs:
    for name in [module, *tests]:
        sys.modules.pop(name, None)
    code = pytest.main([*options, folder])
    if code != 0:
        failed[folder] = int(code)
print("FAILED " + json.dumps(failed))
"""


@pytest.mark.slow
@pytest.mark.parametrize("exercise_id", [e.id for e in COURSE.exercises])
def test_public_tests_pass_on_every_variant(tmp_path, exercise_id):
    ex = COURSE.exercise(exercise_id)
    variants = [c for c in discover(COURSE, ROOT / "tests") if c.kind == "variant" and c.exercise == exercise_id]
    assert variants, f"no correct variant of {exercise_id} in tests/variants/"
    tests = sorted((ROOT / "exercises" / exercise_id).glob("test_*.py"))
    folders = []
    for case in variants:
        folder = tmp_path / case.name
        folder.mkdir()
        for test in tests:
            shutil.copyfile(test, folder / test.name)
        (folder / ex.file).write_text(case.text, encoding="utf-8")
        folders.append([str(folder), isolated(folder)])
    done = subprocess.run([sys.executable, "-c", EACH_SOURCE, ex.file.removesuffix(".py"),
                           json.dumps([t.stem for t in tests]), json.dumps(folders)],
                          capture_output=True, text=True, cwd=tmp_path, timeout=900)
    assert done.returncode == 0 and "FAILED {}" in done.stdout, done.stdout[-4000:] + done.stderr[-2000:]
