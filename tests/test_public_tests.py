"""Each exercise's public tests pass on the reference solution and fail on the untouched stub (and, in
tests/test_public_tests_variants.py, they are never stricter than the hidden criteria)."""

import json
import shutil
import subprocess
import sys

import pytest

from grader.course import load_course

from conftest import ROOT

# end to end: every test here grades in a sandbox (`pytest -m "not slow"` leaves them out)
pytestmark = pytest.mark.slow

COURSE = load_course(ROOT)

# Runs one exercise's public tests on several sources in one interpreter (torch is imported once, not once a
# source): each source in a folder of its own with copies of the tests, the exercise's module and the test modules
# forgotten between runs. Each run's output follows a line of its own naming its folder, and the last line holds
# every run's pytest exit code.
EACH_SOURCE = """
import json, sys
import pytest
module, tests, runs = sys.argv[1], json.loads(sys.argv[2]), json.loads(sys.argv[3])
codes = {}
for folder, options in runs:
    for name in [module, *tests]:
        sys.modules.pop(name, None)
    print("\\n" + MARK + folder, flush=True)
    codes[folder] = int(pytest.main([*options, folder]))
    sys.stdout.flush()
print("\\n" + MARK + "CODES " + json.dumps(codes), flush=True)
"""
MARK = "=== public tests of "


def run_public_tests(tmp_path, exercise_id: str, sources: dict[str, bytes]) -> dict[str, tuple[int, str]]:
    """{name: a source file's bytes} -> {name: (pytest's exit code, its output)}: the exercise's public tests run
    on each source, all in one interpreter."""
    ex = COURSE.exercise(exercise_id)
    tests = sorted((ROOT / "exercises" / exercise_id).glob("test_*.py"))
    folders = {}
    for name, content in sources.items():
        folder = tmp_path / exercise_id / name
        folder.mkdir(parents=True)
        for test in tests:
            shutil.copyfile(test, folder / test.name)
        (folder / ex.file).write_bytes(content)
        folders[name] = folder
    done = subprocess.run([sys.executable, "-c", f"MARK = {MARK!r}\n" + EACH_SOURCE, ex.file.removesuffix(".py"),
                           json.dumps([t.stem for t in tests]),
                           json.dumps([[str(folder), isolated(folder)] for folder in folders.values()])],
                          capture_output=True, text=True, cwd=tmp_path, timeout=900)
    *parts, last = done.stdout.split("\n" + MARK)
    assert done.returncode == 0 and last.startswith("CODES "), done.stdout[-4000:] + done.stderr[-2000:]
    codes = json.loads(last.removeprefix("CODES "))
    outputs = dict(part.split("\n", 1) for part in parts[1:])   # parts[0]: anything printed before the first run
    return {name: (codes[str(folder)], outputs[str(folder)].rstrip("\n")) for name, folder in folders.items()}


def isolated(folder) -> list[str]:
    """pytest options that keep a run to `folder`: its own empty configuration and no conftest.py from the
    folders above it (a temporary folder's parents are shared with whatever else runs on the machine)."""
    (folder / "pytest.ini").write_text("[pytest]\n")
    return ["-q", "-p", "no:cacheprovider", "-c", str(folder / "pytest.ini"), "--rootdir", str(folder),
            "--confcutdir", str(folder)]


@pytest.fixture(scope="module")
def solution_and_stub(tmp_path_factory):
    """exercise id -> {"solution": (exit code, output), "stub": ...}: both runs of an exercise in one interpreter,
    made when the first of its two tests asks."""
    done: dict[str, dict[str, tuple[int, str]]] = {}

    def of(exercise_id: str) -> dict[str, tuple[int, str]]:
        if exercise_id not in done:
            ex = COURSE.exercise(exercise_id)
            sources = {"solution": COURSE.solution(ex).read_bytes(), "stub": COURSE.stub(ex).read_bytes()}
            done[exercise_id] = run_public_tests(tmp_path_factory.mktemp("public"), exercise_id, sources)
        return done[exercise_id]

    return of


@pytest.mark.parametrize("exercise_id", [e.id for e in COURSE.exercises])
def test_public_tests_pass_on_solution(solution_and_stub, exercise_id):
    code, output = solution_and_stub(exercise_id)["solution"]
    assert code == 0, output[-3000:]


@pytest.mark.parametrize("exercise_id", [e.id for e in COURSE.exercises])
def test_public_tests_fail_on_stub(solution_and_stub, exercise_id):
    code, output = solution_and_stub(exercise_id)["stub"]
    assert code == 1, output[-3000:]
    assert " passed" not in output.splitlines()[-1], f"some public test passes on the stub: {output[-500:]}"
