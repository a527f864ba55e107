"""Each exercise's public tests are never stricter than the hidden criteria: every correct variant
(solutions/*/variants/, each with full marks) passes them. A file of its own, so that it runs beside the solution
and stub runs of tests/test_public_tests.py (on the other pytest-xdist worker)."""

import pytest

from grader.review.selftest import discover

from test_public_tests import COURSE, run_public_tests

# end to end: every test here grades in a sandbox (`pytest -m "not slow"` leaves them out)
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def variant_runs(tmp_path_factory) -> dict[tuple[str, str], tuple[int, str]]:
    """(exercise id, variant name) -> (exit code, output) of that exercise's public tests on it: every variant of
    every exercise, in one interpreter."""
    variants = [c for c in discover(COURSE, COURSE.solutions) if c.kind == "variant"]
    return run_public_tests(tmp_path_factory.mktemp("variants"),
                            {(c.exercise, c.name): c.text.encode("utf-8") for c in variants})


@pytest.mark.slow
@pytest.mark.parametrize("exercise_id", [e.id for e in COURSE.exercises])
def test_public_tests_pass_on_every_variant(variant_runs, exercise_id):
    runs = {name: run for (exercise, name), run in variant_runs.items() if exercise == exercise_id}
    assert runs, f"no correct variant of {exercise_id} in solutions/{exercise_id}/variants/"
    failed = {name: output[-3000:] for name, (code, output) in runs.items() if code != 0}
    assert not failed, "\n\n".join(f"{name}:\n{output}" for name, output in failed.items())
