"""What the supervisor hands the worker of an exercise's probes (grader/sandbox/probe_plan.py, grader/worker/seeds.py):
its own probe code only, compiled for the box, root-only; each probe's own seed, never the course's."""

from __future__ import annotations

import json
import marshal
import os
import stat
from pathlib import Path

from conftest import ROOT, probes_module
from grader.course import load_course
from grader.grading.pipeline import job_for
from grader.sandbox import probe_plan, rootfs
from grader.worker.probe import probes_of
from grader.worker.seeds import probe_seed

COURSE = load_course(ROOT)


def test_groups_read_from_the_source_match_the_decorators():
    """The plan reads `@probe` and `@probe(isolated=True)` from the source; importing the module says the same."""
    for ex in COURSE.exercises:
        specs = [(s.name, s.isolated) for s in probes_of(probes_module(ex.id))]
        assert probe_plan.probe_specs(ex.probes_file) == specs, ex.id
    checkpoint = COURSE.exercise("checkpoint").probes_file
    groups = probe_plan.probe_groups(checkpoint)
    isolated = [name for name, alone in probe_plan.probe_specs(checkpoint) if alone]
    assert isolated and all([name] in groups for name in isolated)


def test_an_exercise_gets_its_own_probe_code_and_the_course_model_it_imports_nothing_else(tmp_path):
    staged = probe_plan.stage_code(COURSE.exercise("training").probes_file, tmp_path / "training", rootfs.LIB)
    assert [module for module, _ in staged] == ["grader.probes.lm", "grader.probes.training"]
    masks = COURSE.exercise("masks").probes_file
    assert probe_plan.probe_code_modules(masks) == [("grader.probes.masks", masks)]
    folder = tmp_path / "training"
    assert stat.S_IMODE(os.stat(folder).st_mode) == 0o700
    for _, name in staged:
        assert stat.S_IMODE(os.stat(folder / name).st_mode) == 0o600
        code = marshal.loads((folder / name).read_bytes())
        assert code.co_filename.startswith(rootfs.LIB + "/grader/probes/"), code.co_filename   # no host path
    assert sorted(p.name for p in folder.iterdir()) == ["lm.code", "training.code"]


def test_the_worker_preloads_what_probe_code_imports_but_no_probe_module():
    modules = probe_plan.preload([ex.probes_file for ex in COURSE.exercises])
    assert "torch._dynamo" in modules and "torch" in modules
    assert not [m for m in modules if m.startswith("grader.probes")]


def test_the_request_holds_each_probes_seed_and_not_the_course_seed(tmp_path):
    """What enters the sandbox for an exercise: per-probe seeds, distinct, the same for the same course seed."""
    ex = COURSE.exercise("attention")
    student = tmp_path / "attention" / ex.file
    student.parent.mkdir()
    student.write_text("")
    course_seed = 738204519364281
    request = job_for(ex, student).request(True, course_seed, tmp_path)
    text = json.dumps(request)
    assert str(course_seed) not in text
    seeds = request["seeds"]
    assert set(seeds) == {name for name, _ in probe_plan.probe_specs(ex.probes_file)}
    assert len(set(seeds.values())) == len(seeds) and all(0 <= s < 1 << 62 for s in seeds.values())
    assert seeds == job_for(ex, student).request(True, course_seed, tmp_path)["seeds"]
    assert seeds != job_for(ex, student).request(True, course_seed + 1, tmp_path)["seeds"]
    assert not [p for p in Path(tmp_path).rglob("*") if str(p).endswith(".py") and p != student]


def test_a_probe_seed_depends_on_the_exercise_and_the_probe():
    assert probe_seed(1, "masks", "causal") != probe_seed(1, "masks", "padding") != probe_seed(1, "rope", "padding")
    assert probe_seed(1, "masks", "causal") == probe_seed(1, "masks", "causal")


def test_a_course_outside_the_checkout_is_staged_as_the_bundled_one(tmp_path):
    """The same probe code in a course folder elsewhere stages to the same modules and the same compiled bytes:
    the code names box paths only, never the course folder it was read from."""
    from conftest import course_outside

    outside = load_course(course_outside(tmp_path / "course"))
    for exercise_id in ("training", "masks"):
        staged = probe_plan.stage_code(outside.exercise(exercise_id).probes_file, tmp_path / "outside" / exercise_id,
                                       rootfs.LIB)
        bundled = probe_plan.stage_code(COURSE.exercise(exercise_id).probes_file, tmp_path / "bundled" / exercise_id,
                                        rootfs.LIB)
        assert staged == bundled
        for _, name in staged:
            data = (tmp_path / "outside" / exercise_id / name).read_bytes()
            assert data == (tmp_path / "bundled" / exercise_id / name).read_bytes()
            assert str(tmp_path).encode() not in data


def test_probe_code_importing_shared_code_the_course_lacks_is_refused_by_name(tmp_path):
    from conftest import course_outside

    outside = load_course(course_outside(tmp_path / "course"))
    (outside.solutions / "_lib" / "lm.py").unlink()
    try:
        probe_plan.probe_code_modules(outside.exercise("training").probes_file)
    except ModuleNotFoundError as exc:
        assert "grader.probes.lm" in str(exc) and "_lib/lm.py" in str(exc), exc
    else:
        raise AssertionError("staged without the shared code it imports")


def test_the_probe_version_follows_the_course_probe_code_an_exercise_stages(tmp_path):
    """A change to one exercise's probes.py: that exercise's observations are made again; to the course's shared
    code: those of the exercises whose probes import it, and no other."""
    from conftest import course_outside
    from grader.grading.rejudge import probe_version

    outside = load_course(course_outside(tmp_path / "course"))

    def versions() -> dict[str, str]:
        return {ex.id: probe_version(outside, ex) for ex in outside.exercises}

    def changed(before: dict[str, str], after: dict[str, str]) -> set[str]:
        return {ex for ex in before if before[ex] != after[ex]}

    start = versions()
    with (outside.solutions / "rope" / "probes.py").open("a") as fh:
        fh.write("\n# the course changed rope's probes\n")
    rope = versions()
    assert changed(start, rope) == {"rope"}
    with (outside.solutions / "_lib" / "lm.py").open("a") as fh:
        fh.write("\n# the course changed its model\n")
    importing = {ex.id for ex in outside.exercises
                 if "grader.probes.lm" in [m for m, _ in probe_plan.probe_code_modules(ex.probes_file)]}
    assert importing >= {"training", "checkpoint", "param_count"}
    assert changed(rope, versions()) == importing
