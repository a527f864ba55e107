"""The mutant and variant catalogs are well formed, and `grader selftest` proves every criterion:
zero false failures over solutions and variants, zero escapes over mutants. Mutants are diffs against the
solutions: each applies to today's solution, and a whole-file copy or a stale diff is refused with its name."""

import dataclasses
import shutil
import subprocess
import sys
import tomllib

import pytest

from grader.course import load_course
from grader.judge.session import criteria_of
from grader.review.selftest import CatalogError, discover, expected_statuses, mutant_text

from conftest import ROOT

COURSE = load_course(ROOT)
CATALOG = ROOT / "solutions"   # each exercise's mutants/ and variants/ beside its solution


@pytest.mark.parametrize("exercise_id", [e.id for e in COURSE.exercises])
def test_catalog_covers_the_exercise(exercise_id):
    ex = COURSE.exercise(exercise_id)
    criteria = {c.id for c in criteria_of(exercise_id)}
    mutants = sorted((CATALOG / exercise_id / "mutants").glob("*/"))
    variants = sorted((CATALOG / exercise_id / "variants").glob("*/"))
    assert len(mutants) >= 3, f"{exercise_id}: {len(mutants)} mutants"
    assert len(variants) >= 2, f"{exercise_id}: {len(variants)} variants"
    caught = set()
    solution = COURSE.solution(ex).read_text()
    for folder in variants:
        assert (folder / ex.file).is_file(), folder
    for folder in mutants:
        assert sorted(p.name for p in folder.iterdir()) == ["change.diff", "manifest.toml"], folder
        assert mutant_text(COURSE, exercise_id, folder) != solution   # raises when the diff no longer applies
    for folder in mutants + variants:
        manifest = tomllib.loads((folder / "manifest.toml").read_text())
        assert manifest.get("description"), folder
    for folder in mutants:
        manifest = tomllib.loads((folder / "manifest.toml").read_text())
        statuses = expected_statuses(manifest)
        fails, may_fail = set(statuses), set(manifest.get("may_fail", ()))
        assert set(statuses.values()) & {"failed", "error", "crashed"}, (
            f"{folder.name} names no criterion that catches it")
        assert fails | may_fail <= criteria, f"{folder.name} names unknown criteria {(fails | may_fail) - criteria}"
        assert not fails & may_fail, f"{folder.name}: a criterion is both expected and optional"
        caught |= {c for c, status in statuses.items() if status != "blocked"}
    assert criteria - caught == set(), f"criteria no mutant fails: {sorted(criteria - caught)}"


def test_at_least_45_mutants():
    assert len(list(CATALOG.glob("*/mutants/*/manifest.toml"))) >= 45


def catalog_with(tmp_path, exercise_id, name, files):
    """A catalog holding one mutant folder with `files` (name -> text) and a manifest."""
    folder = tmp_path / "catalog" / exercise_id / "mutants" / name
    folder.mkdir(parents=True)
    (folder / "manifest.toml").write_text('description = "a test mutant"\nfails = ["round_trip"]\n')
    for file_name, text in files.items():
        (folder / file_name).write_text(text)
    return tmp_path / "catalog", folder


def test_a_diff_mutant_is_the_solution_with_its_change(tmp_path):
    from grader.review.unidiff import make_diff

    ex = COURSE.exercise("heads")
    solution = COURSE.solution(ex).read_text()
    buggy = solution.replace("x.transpose(1, 2)", "x", 1)
    assert buggy != solution
    catalog, _ = catalog_with(tmp_path, "heads", "no_transpose", {"change.diff": make_diff(solution, buggy, "a", "b")})
    cases = [c for c in discover(dataclasses.replace(COURSE, exercises=(ex,)), catalog) if c.kind == "mutant"]
    assert [(c.name, c.text) for c in cases] == [("no_transpose", buggy)]


def test_a_whole_file_mutant_is_refused_with_the_command_that_converts_it(tmp_path):
    ex = COURSE.exercise("heads")
    catalog, folder = catalog_with(tmp_path, "heads", "old_style", {"heads.py": COURSE.solution(ex).read_text()})
    with pytest.raises(CatalogError) as caught:
        discover(dataclasses.replace(COURSE, exercises=(ex,)), catalog)
    assert str(folder) in str(caught.value) and "whole-file mutant (heads.py)" in str(caught.value)
    assert "scripts/mutants_to_diffs.py" in str(caught.value)


def test_a_diff_that_no_longer_applies_fails_and_names_the_mutant(tmp_path):
    """The solution edited where a mutant changes it: the mutant is refused, never graded against old code."""
    folder = ROOT / "solutions" / "heads" / "mutants" / "merge_no_transpose"
    root = tmp_path / "course"
    shutil.copytree(ROOT / "solutions" / "heads", root / "solutions" / "heads")
    changed = root / "solutions" / "heads" / "heads.py"
    diff = (folder / "change.diff").read_text()
    removed = next(line[1:] for line in diff.splitlines() if line.startswith("-") and not line.startswith("---"))
    assert removed in changed.read_text()
    changed.write_text(changed.read_text().replace(removed, removed.replace("x", "y")))
    with pytest.raises(CatalogError, match=r"merge_no_transpose/change.diff no longer applies .*hunk 1"):
        mutant_text(dataclasses.replace(COURSE, root=root, solutions=root / "solutions"), "heads", folder)
    # an unrelated edit above the change moves it, and the diff still applies where the code went
    changed.write_text("# a comment\n\n" + (ROOT / "solutions" / "heads" / "heads.py").read_text())
    moved = mutant_text(dataclasses.replace(COURSE, root=root, solutions=root / "solutions"), "heads", folder)
    assert moved == "# a comment\n\n" + mutant_text(COURSE, "heads", folder)


def test_the_conversion_script_reproduces_whole_file_mutants_byte_for_byte(tmp_path):
    ex = COURSE.exercise("masks")
    texts = {f.name: mutant_text(COURSE, "masks", f) for f in sorted((CATALOG / "masks" / "mutants").glob("*/"))}
    catalog = tmp_path / "catalog"
    for name, text in texts.items():   # the old layout: copies of the file
        folder = catalog / "masks" / "mutants" / name
        folder.mkdir(parents=True)
        (folder / ex.file).write_bytes(text.encode())
    same = catalog / "masks" / "mutants" / "zz_no_bug"
    same.mkdir()
    (same / ex.file).write_bytes(COURSE.solution(ex).read_bytes())
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "mutants_to_diffs.py"), str(catalog)],
                          capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 1, done.stdout + done.stderr   # the copy without a bug is reported and kept
    assert f"{len(texts)} mutants converted, 1 not" in done.stdout and "zz_no_bug" in done.stderr
    for name, text in texts.items():
        folder = catalog / "masks" / "mutants" / name
        assert not (folder / ex.file).exists()
        assert mutant_text(COURSE, "masks", folder).encode() == text.encode()
    assert (same / ex.file).read_bytes() == COURSE.solution(ex).read_bytes()


def test_the_restructured_transformer_variants_are_in_the_catalog():
    names = {c.name for c in discover(COURSE, CATALOG) if c.kind == "variant" and c.exercise == "transformer_lm"}
    assert {"feedforward_sequential", "renamed_inner_layers", "attention_helper_methods",
            "own_layer_norm_mask_buffer"} <= names


@pytest.fixture(scope="module")
def selftest(tmp_path_factory):
    """`grader selftest` run once for the tests below: (the finished process, its matrix)."""
    matrix = tmp_path_factory.mktemp("selftest") / "matrix.md"
    done = subprocess.run([sys.executable, "-m", "grader", "selftest", "--matrix", str(matrix)],
                          capture_output=True, text=True, cwd=ROOT, timeout=2400)
    return done, matrix


@pytest.mark.slow
def test_selftest_passes(selftest):
    done, matrix = selftest
    assert done.returncode == 0, done.stdout[-5000:] + done.stderr[-2000:]
    assert "0 problems" in done.stdout
    assert matrix.read_text().count("| `") >= 45


@pytest.mark.slow
def test_every_variant_scores_full_marks(selftest):
    """Every correct variant in tests/variants/ scores full marks, graded as `grader grade` grades a class: the
    ways students really restructure code (a feed-forward as nn.Sequential, renamed inner layers, attention with
    helper methods of its own, their own LayerNorm class) cost nothing, and no probe of the grader's fails on them.
    The selftest grades each one (a lost point is one of its problems); this reads its verdicts."""
    done, matrix = selftest
    variants = [c for c in discover(COURSE, CATALOG) if c.kind == "variant"]
    assert len(variants) > 20
    assert f"{len(COURSE.exercises)} solutions, {len(variants)} variants, " in done.stdout, done.stdout[-2000:]
    lost = [line.strip() for line in done.stdout.splitlines() if line.startswith(("  variant ", "  solution "))]
    assert not lost, "\n".join(lost)
    text = matrix.read_text()
    for ex in COURSE.exercises:   # each exercise's line names its correct implementations, all with full marks
        names = ["reference"] + [c.name for c in variants if c.exercise == ex.id]
        line = (f"Correct implementations with full marks: {len(names)} of {len(names)} "
                f"({', '.join(names)}).")
        assert f"## {ex.id}\n\n{line}\n" in text, f"{ex.id}: {line!r} not in the matrix"


@pytest.mark.slow
def test_selftest_refuses_a_course_whose_criterion_catches_no_mutant_or_whose_solution_loses_points(tmp_path):
    """A course folder outside the checkout with one exercise, no catalog, and a reference solution with a bug:
    `grader --course DIR selftest` names each criterion that no mutant shows to catch anything, and the points the
    solution loses, and exits 1."""
    from conftest import course_outside

    folder = course_outside(tmp_path / "course")
    text = (folder / "course.toml").read_text()
    head, *blocks = text.split("[[exercise]]")
    (folder / "course.toml").write_text(head + "".join("[[exercise]]" + b for b in blocks if 'id = "heads"' in b))
    heads = COURSE.exercise("heads")
    buggy = mutant_text(COURSE, "heads", CATALOG / "heads" / "mutants" / "merge_no_transpose")
    shutil.rmtree(folder / "solutions" / "heads" / "mutants")
    shutil.rmtree(folder / "solutions" / "heads" / "variants")
    (folder / "solutions" / "heads" / heads.file).write_text(buggy)
    done = subprocess.run([sys.executable, "-m", "grader", "--course", str(folder), "selftest"],
                          capture_output=True, text=True, cwd=ROOT, timeout=900)
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-2000:]
    assert "1 solutions, 0 variants, 0 mutants" in done.stdout, done.stdout[-3000:]
    criteria = [c.id for c in criteria_of("heads", folder / "solutions")]
    for criterion in criteria:
        assert f"criterion heads/{criterion} catches no mutant itself" in done.stdout, done.stdout[-3000:]
    assert "solution heads/reference lost " in done.stdout, done.stdout[-3000:]


def test_selftest_refuses_a_course_missing_an_exercises_criteria(tmp_path):
    from conftest import course_outside

    folder = course_outside(tmp_path / "course")
    (folder / "solutions" / "heads" / "criteria.py").unlink()
    done = subprocess.run([sys.executable, "-m", "grader", "--course", str(folder), "selftest", "--exercise", "heads"],
                          capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert done.returncode != 0
    assert "heads/criteria.py" in done.stderr + done.stdout and "Traceback" not in done.stderr, done.stderr
