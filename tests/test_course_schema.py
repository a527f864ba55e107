"""course.toml is checked against grader/course.schema.json when it is loaded: an unknown key, a wrong type or an
out-of-range value is refused with the file, the key's line and (for an unknown key) the nearest known one.
`grader validate` runs the check alone; every other command refuses the same way, exit status 2, no traceback.
Every course.toml the project writes or its tests use still loads."""

from __future__ import annotations

import re
from dataclasses import fields
from pathlib import Path

import pytest

from conftest import ROOT, course_copy, run_grader
from grader.course import CourseError, load_course
from grader.course_schema import key_lines, schema

BUNDLED = (ROOT / "course.toml").read_text(encoding="utf-8")


def edited(folder: Path, old: str, new: str, exercises: list[str] | None = None) -> tuple[Path, int]:
    """A course copy whose course.toml has `old` (its first occurrence) replaced by `new`; and the line, from 1, on
    which `new`'s first line now stands, counted here from the text."""
    course_copy(folder, exercises)
    toml = folder / "course.toml"
    text = toml.read_text(encoding="utf-8")
    assert old in text, old
    text = text.replace(old, new, 1)
    toml.write_text(text, encoding="utf-8")
    return folder, text[:text.index(new)].count("\n") + 1


def problems_of(folder: Path) -> tuple[str, ...]:
    with pytest.raises(CourseError) as raised:
        load_course(folder)
    return raised.value.problems


def test_the_bundled_course_validates():
    done = run_grader("validate", timeout=120)
    assert done.returncode == 0, done.stderr
    count = len(re.findall(r"(?m)^\[\[exercise\]\]", BUNDLED))
    assert done.stdout == f"{ROOT / 'course.toml'}: valid ({count} exercises)\n"
    assert count == len(load_course(ROOT).exercises) and count >= 11


def test_a_misspelt_key_is_refused_with_its_line_and_the_key_meant(tmp_path):
    """The issue's case: `timout_s = 5` under [defaults] used to load and keep 60 s."""
    folder, line = edited(tmp_path / "course", "\ntimeout_s = 60 ", "\ntimout_s = 5 ", ["heads"])
    line += 1   # `new` starts with the newline before the key
    said = (f"{folder / 'course.toml'}, line {line}: `timout_s`: unknown key under [defaults]; "
            "did you mean `timeout_s`?")
    assert problems_of(folder) == (said,)
    for args in (["--course", str(folder), "validate"], ["validate", "--course", str(folder)]):
        done = run_grader(*args, timeout=120)
        assert (done.returncode, done.stdout, done.stderr) == (2, "", f"grader: {said}\n")
    # the positive control: the same copy with the key spelt right validates
    fixed = folder / "course.toml"
    fixed.write_text(fixed.read_text().replace("timout_s = 5", "timeout_s = 5"))
    assert run_grader("--course", str(folder), "validate", timeout=120).returncode == 0
    assert load_course(folder).exercise("heads").limits.timeout_s == 5


@pytest.mark.parametrize("command", [["grade", "--sandbox", "basic"], ["check"], ["handout", "OUT"],
                                     ["gradescope", "OUT.zip"], ["batch", "CLASS", "--out", "OUT"]])
def test_every_command_refuses_an_invalid_course_in_one_sentence(tmp_path, command):
    folder, line = edited(tmp_path / "course", 'id = "heads"\n', 'id = "heads"\nmemory_mb = 0\n', ["heads"])
    (tmp_path / "CLASS").mkdir()
    args = [str(tmp_path / a) if a in ("OUT", "OUT.zip", "CLASS") else a for a in command]
    done = run_grader("--course", str(folder), *args, timeout=300)
    assert done.returncode == 2
    assert done.stderr == (f"grader: {folder / 'course.toml'}, line {line + 1}: `memory_mb` under "
                           '[[exercise]] "heads" must be at least 1, not 0\n')
    assert not (tmp_path / "OUT").exists() and not (tmp_path / "OUT.zip").exists()


def line_with(folder: Path, at: str) -> int:
    """The line, from 1, of course.toml in `folder` that reads `at`."""
    return (folder / "course.toml").read_text(encoding="utf-8").splitlines().index(at) + 1


@pytest.mark.parametrize("old, new, said", [
    ("memory_mb = 3072", 'memory_mb = "3072"', '`memory_mb` under [defaults] must be a whole number, not "3072"'),
    ("memory_mb = 3072", "memory_mb = 3072.5", "`memory_mb` under [defaults] must be a whole number, not 3072.5"),
    ("seed = 20261130", "seed = true", "`seed` under [course] must be a whole number, not true"),
    ("uids = [61000, 61999]", "fork_server = 1", "`fork_server` under [sandbox] must be true or false, not 1"),
    ('forbidden = ["torch.nn.Embedding", "aten::embedding"]', 'forbidden = "torch.nn.Embedding"',
     '`forbidden` under [[exercise]] "embedding" must be a list [...], not "torch.nn.Embedding"'),
    ("weight_registered = 1", 'weight_registered = "one"',
     '`weight_registered` under [exercise.points] of exercise "embedding" must be a number, not "one"'),
    ('file = "embedding.py"', 'file = "../embedding.py"',
     '`file` under [[exercise]] "embedding" must be a Python file\'s name such as heads.py, with no folder, '
     'not "../embedding.py"'),
    ('title = { en = "Token embedding: a lookup table by hand", zh = "手写词嵌入：可学习的查找表" }',
     'title = "Token embedding"', '`title` under [[exercise]] "embedding" must be a table, not "Token embedding"'),
    ("visibility = {}", 'visibility = { "kind:values" = "later" }',
     '`visibility."kind:values"` under [defaults] must be one of "visible", "hidden", "after_due_date", '
     '"after_published", not "later"'),
])
def test_a_wrong_type_is_refused_with_its_line(tmp_path, old, new, said):
    folder, _ = edited(tmp_path / "course", old, new, ["embedding"])
    assert problems_of(folder) == (f"{folder / 'course.toml'}, line {line_with(folder, new)}: {said}",)


@pytest.mark.parametrize("old, new, at, said", [
    ('id = "heads"\n', 'id = "heads"\ntimeout_s = -5\n', "timeout_s = -5",
     '`timeout_s` under [[exercise]] "heads" must be more than 0, not -5'),
    ('id = "heads"\n', 'id = "heads"\ntimeout_s = 0\n', "timeout_s = 0",
     '`timeout_s` under [[exercise]] "heads" must be more than 0, not 0'),
    ("memory_mb = 3072", "memory_mb = 0", "memory_mb = 0", "`memory_mb` under [defaults] must be at least 1, not 0"),
    ("files = 4096 ", "files = -1 ", None, "`files` under [defaults] must be at least 1, not -1"),
    ("uids = [61000, 61999]", "uids = [999, 61999]", "uids = [999, 61999]",
     "`uids[0]` under [sandbox] must be at least 1000, not 999"),
    ("uids = [61000, 61999]", "uids = [61999, 61000]", "uids = [61999, 61000]",
     "`uids` under [sandbox] must be [first, last] with first <= last, not [61999, 61000]"),
    ("uids = [61000, 61999]", "uids = [61000]", "uids = [61000]", "`uids` under [sandbox] must hold 2 items, not 1"),
    ("seed = 20261130", "seed = -1", "seed = -1", "`seed` under [course] must be at least 0, not -1"),
    ("[defaults]", "[judge]\ncpu_s = 0\n\n[defaults]", "cpu_s = 0", "`cpu_s` under [judge] must be at least 1, not 0"),
    ("split_shape = 1", "split_shape = -1", "split_shape = -1",
     '`split_shape` under [exercise.points] of exercise "heads" must be at least 0, not -1'),
])
def test_an_out_of_range_value_is_refused_with_its_line(tmp_path, old, new, at, said):
    folder, line = edited(tmp_path / "course", old, new, ["heads"])
    line = line_with(folder, at) if at else line
    assert problems_of(folder) == (f"{folder / 'course.toml'}, line {line}: {said}",)


@pytest.mark.parametrize("old, new, at, said", [
    ('id = "heads"\n', 'id = "heads"\ntimout_s = 5\n', "timout_s = 5",
     '`timout_s`: unknown key under [[exercise]] "heads"; did you mean `timeout_s`?'),
    ("[defaults]", "[judge]\nwal_s = 5\n\n[defaults]", "wal_s = 5",
     "`wal_s`: unknown key under [judge]; did you mean `wall_s`?"),
    ("[defaults]", '[clasroom]\ndeadline = "2026-12-01T23:59:59Z"\n\n[defaults]', "[clasroom]",
     "`clasroom`: unknown table in the file; did you mean `classroom`?"),
    ("[defaults]", '[cluster.slrum]\nqueue = "gpu"\n\n[defaults]', "[cluster.slrum]",
     "`slrum`: unknown table under [cluster]; did you mean `slurm`?"),
    ("seed = 20261130", "seed = 20261130\nsed = 3", "sed = 3",
     "`sed`: unknown key under [course]; did you mean `seed`?"),
    ("[defaults]", "[grading]\nx = 1\n\n[defaults]", "[grading]",
     "`grading`: unknown table in the file; known: `course`, `sandbox`, `defaults`, `exercise`, `judge`, "
     "`classroom`, `policy`, `cluster`"),
])
def test_an_unknown_key_is_refused_with_the_nearest_known_one(tmp_path, old, new, at, said):
    folder, _ = edited(tmp_path / "course", old, new, ["heads"])
    assert problems_of(folder) == (f"{folder / 'course.toml'}, line {line_with(folder, at)}: {said}",)


def test_a_missing_key_names_its_table_and_every_problem_is_listed_in_line_order(tmp_path):
    folder, _ = edited(tmp_path / "course", 'file = "heads.py"\n', "", ["heads", "masks"])
    toml = folder / "course.toml"
    toml.write_text(toml.read_text().replace("output_kb = 1024", "output_kb = 0").replace("[defaults]",
                                                                                         "[defaults]\ntimout = 1"))
    lines = toml.read_text().splitlines()
    at = {prefix: next(i for i, line in enumerate(lines, 1) if line.startswith(prefix))
          for prefix in ("timout = 1", "output_kb = 0", 'id = "heads"')}
    header = at['id = "heads"'] - 1   # the [[exercise]] line above its id
    assert problems_of(folder) == (
        f"{toml}, line {at['timout = 1']}: `timout`: unknown key under [defaults]; did you mean `timeout_s`?",
        f"{toml}, line {at['output_kb = 0']}: `output_kb` under [defaults] must be at least 1, not 0",
        f'{toml}, line {header}: [[exercise]] "heads" has no `file`')
    done = run_grader("--course", str(folder), "validate", timeout=120)
    assert done.returncode == 2 and done.stderr.count("\n") == 3 and "Traceback" not in done.stderr


def test_policy_and_deadline_problems_are_named_by_validate(tmp_path):
    """[policy] is checked by grader.policy in the command's language; `grader validate` runs that check too."""
    course_copy(tmp_path / "policy", ["heads"])
    with open(tmp_path / "policy" / "course.toml", "a", encoding="utf-8") as fh:
        fh.write('\n[policy]\ndue = "2026-12-01T23:59:59Z"\nlate_penalty_percent = 150\n')
    done = run_grader("--course", str(tmp_path / "policy"), "validate", timeout=120)
    assert done.returncode == 2
    assert "late_penalty_percent = 150 is not a percentage from 0 to 100" in done.stderr
    course_copy(tmp_path / "dated", ["heads"])
    with open(tmp_path / "dated" / "course.toml", "a", encoding="utf-8") as fh:
        fh.write('\n[classroom]\ndeadline = "next friday"\n')
    line = (tmp_path / "dated" / "course.toml").read_text().splitlines().index('deadline = "next friday"') + 1
    assert problems_of(tmp_path / "dated") == (
        f"{tmp_path / 'dated' / 'course.toml'}, line {line}: [classroom] deadline 'next friday' is not an ISO 8601 "
        "time such as 2026-12-01T23:59:59Z",)


def test_key_lines_reads_toml_layouts():
    text = "\n".join([
        "# a comment = not a key",                 # 1
        "[course]",                                # 2
        'name = { en = "A", zh = "B" }',           # 3
        'doc = """',                               # 4
        "fake = 1",                                # 5: inside a multi-line string
        '"""',                                     # 6
        "[[exercise]]",                            # 7
        'id = "a"',                                # 8
        "forbidden = [",                           # 9
        '  "x",',                                  # 10
        "]",                                       # 11
        "[exercise.points]",                       # 12
        "one = 1",                                 # 13
        "[[exercise]]",                            # 14
        "title.en = 'T'",                          # 15: a dotted key
        '[exercise . "points"]',                   # 16
        '"kind:x" = 2',                            # 17: a quoted key
        "[defaults.visibility]",                   # 18
        "'lit' = 'visible'",                       # 19
    ])
    lines = key_lines(text)
    assert lines == {("course",): 2, ("course", "name"): 3, ("course", "doc"): 4, ("exercise", 0): 7,
                     ("exercise", 0, "id"): 8, ("exercise", 0, "forbidden"): 9, ("exercise", 0, "points"): 12,
                     ("exercise", 0, "points", "one"): 13, ("exercise", 1): 14, ("exercise", 1, "title", "en"): 15,
                     ("exercise", 1, "points"): 16, ("exercise", 1, "points", "kind:x"): 17,
                     ("defaults", "visibility"): 18, ("defaults", "visibility", "lit"): 19}


# --- Every course.toml in use validates -----------------------------------------------------------------------------

def test_every_course_copy_the_tests_write_validates(tmp_path):
    """The tables the test suite appends or edits (policy, classroom, cluster, judge, own limits, solutions folder)."""
    from hostile_suite import course_with_limits
    from test_classroom import LATE_POLICY
    from test_judge_isolation import JUDGE_TABLE
    from test_policy import POLICY_TOML

    course_copy(tmp_path / "all", None, timeout_s={"heads": 600, "masks": 2.5})
    toml = tmp_path / "all" / "course.toml"
    text = toml.read_text().replace("[defaults]", JUDGE_TABLE + "[defaults]", 1)
    text = text.replace("[course]\n", '[course]\nsolutions = "solutions"\n', 1)
    text = re.sub(r'(?m)^(id = "decoder_block"\n)', r"\1memory_mb = 4096\n", text)
    text += '\n[classroom]\ndeadline = "2026-12-01T23:59:59Z"\n[cluster.slurm]\nwalltime = "00:15:00"\nmemory = "2GB"\n'
    toml.write_text(text + LATE_POLICY)
    course = load_course(tmp_path / "all")
    assert course.exercise("masks").limits.timeout_s == 2.5 and course.judge_limits.memory_mb == 96
    assert course.exercise("decoder_block").limits.memory_mb == 4096
    policy = course_copy(tmp_path / "policy", ["heads"])
    with open(policy / "course.toml", "a", encoding="utf-8") as fh:
        fh.write(POLICY_TOML)
    load_course(policy)
    limited = course_with_limits(tmp_path / "limits", {"heads": {"memory_mb": 512, "output_kb": 4, "timeout_s": 30}})
    assert load_course(limited).exercise("heads").limits.output_kb == 4


def test_the_checker_course_toml_validates(tmp_path):
    """What `grader handout` writes into checker/course.toml (limits as floats, references, hidden_criteria)."""
    from grader.classroom.checker import CHECKS_DIR, checker_course_toml, visible_tests

    course = load_course(ROOT)
    (tmp_path / "course.toml").write_text(checker_course_toml(course, {ex.id: visible_tests(course, ex)
                                                                       for ex in course.exercises}))
    for ex in course.exercises:   # the cut probes and criteria the checker writes beside it
        (tmp_path / CHECKS_DIR / ex.id).mkdir(parents=True)
        for name in ("probes.py", "criteria.py"):
            (tmp_path / CHECKS_DIR / ex.id / name).write_text("")
    checker = load_course(tmp_path)
    assert [ex.id for ex in checker.exercises] == [ex.id for ex in course.exercises]
    assert all(ex.hidden_criteria > 0 for ex in checker.exercises)


# --- The schema is the one list of keys -----------------------------------------------------------------------------

def test_the_schema_is_valid_and_describes_every_key():
    from jsonschema import Draft202012Validator

    Draft202012Validator.check_schema(schema())
    defs = schema()["$defs"]
    undescribed = []

    def walk(node: dict, where: str) -> None:
        for key, sub in node.get("properties", {}).items():
            target = defs[sub["$ref"].rsplit("/", 1)[1]] if set(sub) == {"$ref"} else sub
            if "description" not in target:
                undescribed.append(f"{where}.{key}")
            walk(target, f"{where}.{key}")
        if isinstance(node.get("items"), dict):
            walk(node["items"], where + "[]")

    walk(schema(), "")
    assert not undescribed


def test_the_schema_and_the_code_name_the_same_keys():
    from grader.batch.cluster import JOBQUEUE_KINDS
    from grader.i18n import LANGS
    from grader.judge.limits import JudgeLimits
    from grader.policy import KEYS
    from grader.worker.protocol import Limits

    tables = schema()["properties"]
    exercise = tables["exercise"]["items"]["properties"]
    limits = {f.name for f in fields(Limits)}
    assert limits <= set(tables["defaults"]["properties"]) and limits <= set(exercise)
    assert set(tables["judge"]["properties"]) == {f.name for f in fields(JudgeLimits)}
    assert tuple(tables["policy"]["properties"]) == KEYS
    assert set(tables["cluster"]["propertyNames"]["enum"]) == set(JOBQUEUE_KINDS)
    assert set(exercise["title"]["required"]) == set(LANGS)
