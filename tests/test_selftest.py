"""The mutant and variant catalogs are well formed, and `grader selftest` proves every criterion:
zero false failures over solutions and variants, zero escapes over mutants."""

import subprocess
import sys
import tomllib

import pytest

from grader.course import load_course
from grader.judge.session import criteria_of
from grader.selftest import expected_statuses

from conftest import ROOT

COURSE = load_course(ROOT)
CATALOG = ROOT / "tests"


@pytest.mark.parametrize("exercise_id", [e.id for e in COURSE.exercises])
def test_catalog_covers_the_exercise(exercise_id):
    ex = COURSE.exercise(exercise_id)
    criteria = {c.id for c in criteria_of(exercise_id)}
    mutants = sorted((CATALOG / "mutants" / exercise_id).glob("*/"))
    variants = sorted((CATALOG / "variants" / exercise_id).glob("*/"))
    assert len(mutants) >= 3, f"{exercise_id}: {len(mutants)} mutants"
    assert len(variants) >= 2, f"{exercise_id}: {len(variants)} variants"
    caught = set()
    for folder in mutants + variants:
        assert (folder / ex.file).is_file(), folder
        manifest = tomllib.loads((folder / "manifest.toml").read_text())
        assert manifest.get("description"), folder
    for folder in mutants:
        manifest = tomllib.loads((folder / "manifest.toml").read_text())
        statuses = expected_statuses(manifest)
        fails, may_fail = set(statuses), set(manifest.get("may_fail", ()))
        assert set(statuses.values()) & {"failed", "error", "crashed"}, f"{folder.name} names no criterion that catches it"
        assert fails | may_fail <= criteria, f"{folder.name} names unknown criteria {(fails | may_fail) - criteria}"
        assert not fails & may_fail, f"{folder.name}: a criterion is both expected and optional"
        caught |= {c for c, status in statuses.items() if status != "blocked"}
    assert criteria - caught == set(), f"criteria no mutant fails: {sorted(criteria - caught)}"


def test_at_least_45_mutants():
    assert len(list((CATALOG / "mutants").glob("*/*/manifest.toml"))) >= 45


def test_selftest_passes(tmp_path):
    matrix = tmp_path / "matrix.md"
    done = subprocess.run([sys.executable, "-m", "grader", "selftest", "--matrix", str(matrix)],
                          capture_output=True, text=True, cwd=ROOT, timeout=2400)
    assert done.returncode == 0, done.stdout[-5000:] + done.stderr[-2000:]
    assert "0 problems" in done.stdout
    assert matrix.read_text().count("| `") >= 45
