"""Each exercise's public tests are never stricter than the hidden criteria: every correct variant (tests/variants/,
each with full marks) passes them. A file of its own, so that it runs beside the solution and stub runs of
tests/test_public_tests.py (on the other pytest-xdist worker)."""

import json
import shutil
import subprocess
import sys

import pytest

from grader.review.selftest import discover

from conftest import ROOT
from test_public_tests import COURSE, isolated

# end to end: every test here grades in a sandbox (`pytest -m "not slow"` leaves them out)
pytestmark = pytest.mark.slow


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
