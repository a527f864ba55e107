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

# Runs public tests on several sources in one interpreter (torch is imported once, not once a source): each source
# in a folder of its own with copies of its exercise's tests, that exercise's module and test modules forgotten
# before each run. Each run's output follows a line of its own naming its folder, and the last line holds every
# run's pytest exit code.
EACH_SOURCE = """
import json, sys
import pytest
codes = {}
for folder, options, forget in json.loads(sys.argv[1]):
    for name in forget:
        sys.modules.pop(name, None)
    print("\\n" + MARK + folder, flush=True)
    codes[folder] = int(pytest.main([*options, folder]))
    sys.stdout.flush()
print("\\n" + MARK + "CODES " + json.dumps(codes), flush=True)
"""
MARK = "=== public tests of "


def run_public_tests(tmp_path, sources: dict[tuple[str, str], bytes]) -> dict[tuple[str, str], tuple[int, str]]:
    """{(exercise id, name): a source file's bytes} -> {(exercise id, name): (pytest's exit code, its output)}: the
    exercise's public tests run on each source, in this order, all in one interpreter."""
    folders, runs = {}, []
    for (exercise_id, name), content in sources.items():
        ex = COURSE.exercise(exercise_id)
        tests = sorted((ROOT / "exercises" / exercise_id).glob("test_*.py"))
        folder = tmp_path / exercise_id / name
        folder.mkdir(parents=True)
        for test in tests:
            shutil.copyfile(test, folder / test.name)
        (folder / ex.file).write_bytes(content)
        folders[exercise_id, name] = str(folder)
        runs.append([str(folder), isolated(folder), [ex.file.removesuffix(".py"), *(t.stem for t in tests)]])
    done = subprocess.run([sys.executable, "-c", f"MARK = {MARK!r}\n" + EACH_SOURCE, json.dumps(runs)],
                          capture_output=True, text=True, cwd=tmp_path, timeout=1800)
    *parts, last = done.stdout.split("\n" + MARK)
    assert done.returncode == 0 and last.startswith("CODES "), done.stdout[-4000:] + done.stderr[-2000:]
    codes = json.loads(last.removeprefix("CODES "))
    outputs = dict(part.split("\n", 1) for part in parts[1:])   # parts[0]: anything printed before the first run
    return {key: (codes[folder], outputs[folder].rstrip("\n")) for key, folder in folders.items()}


def isolated(folder) -> list[str]:
    """pytest options that keep a run to `folder`: its own empty configuration and no conftest.py from the
    folders above it (a temporary folder's parents are shared with whatever else runs on the machine)."""
    (folder / "pytest.ini").write_text("[pytest]\n")
    return ["-q", "-p", "no:cacheprovider", "-c", str(folder / "pytest.ini"), "--rootdir", str(folder),
            "--confcutdir", str(folder)]


@pytest.fixture(scope="module")
def solution_and_stub(tmp_path_factory) -> dict[tuple[str, str], tuple[int, str]]:
    """(exercise id, "solution" or "stub") -> (exit code, output): every exercise's solution run first, then every
    stub, all in one interpreter."""
    sources = {(ex.id, "solution"): COURSE.solution(ex).read_bytes() for ex in COURSE.exercises}
    sources |= {(ex.id, "stub"): COURSE.stub(ex).read_bytes() for ex in COURSE.exercises}
    return run_public_tests(tmp_path_factory.mktemp("public"), sources)


@pytest.mark.parametrize("exercise_id", [e.id for e in COURSE.exercises])
def test_public_tests_pass_on_solution(solution_and_stub, exercise_id):
    code, output = solution_and_stub[exercise_id, "solution"]
    assert code == 0, output[-3000:]


@pytest.mark.parametrize("exercise_id", [e.id for e in COURSE.exercises])
def test_public_tests_fail_on_stub(solution_and_stub, exercise_id):
    code, output = solution_and_stub[exercise_id, "stub"]
    assert code == 1, output[-3000:]
    assert " passed" not in output.splitlines()[-1], f"some public test passes on the stub: {output[-500:]}"
