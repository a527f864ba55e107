"""`grader selftest --mutate`: first-order mutants inside the functions students write, ids that survive unrelated
edits, the reviewed list of equivalent mutants, and a run that fails on a survivor nobody explained."""

import ast
import dataclasses
import difflib
import functools
import subprocess
import sys
import tomllib

import pytest

from grader.course import load_course
from grader.review.mutation import (EQUIVALENTS, Mutant, Outcome, excerpt, figures, generate, load_equivalents,
                             mutants_of, mutation_problems, student_functions)

from conftest import ROOT

COURSE = load_course(ROOT)
EQUIVALENTS_FILE = ROOT / "solutions" / EQUIVALENTS


@functools.cache
def course_mutants(exercise_id: str) -> tuple[Mutant, ...]:
    """The mutants of an exercise's solution, generated once for the tests of this file (read-only)."""
    return tuple(mutants_of(COURSE, COURSE.exercise(exercise_id)))


def sources(exercise_id):
    ex = COURSE.exercise(exercise_id)
    return ex, COURSE.stub(ex).read_text(), COURSE.solution(ex).read_text()


@pytest.mark.parametrize("exercise_id, expected", [
    ("training", {"make_optimizer", "train_step", "fit_fixed_batch"}),
    ("checkpoint", {"save_checkpoint", "load_checkpoint", "generate", "_plain"}),   # _plain: a helper they call
    ("layer_norm", {"LayerNorm.__init__", "LayerNorm.forward", "PreNormResidual.__init__",
                    "PreNormResidual.forward"}),                                       # after super().__init__()
    ("transformer_lm", {"Config.__post_init__", "TransformerLM.forward"}),
    ("decoder_block", {"CausalSelfAttention.__init__", "CausalSelfAttention.forward", "count_block_parameters"}),
    ("kv_cache", {"generate_cached"}),   # the model is given code: its forward raises NotImplementedError on one path
])
def test_the_functions_mutated_are_those_the_stub_leaves_to_students(exercise_id, expected):
    """The model copies train.py and checkpoint.py give (whose forward raises NotImplementedError on one path
    only), the given FeedForward and DecoderBlock, and a helper nobody calls (extra_repr) are not mutated."""
    _, stub, solution = sources(exercise_id)
    assert student_functions(stub, solution) == expected


def function_lines(solution, names):
    lines = set()
    for node in ast.walk(ast.parse(solution)):
        if isinstance(node, ast.ClassDef):
            for fn in node.body:
                if isinstance(fn, ast.FunctionDef) and f"{node.name}.{fn.name}" in names:
                    lines |= set(range(fn.lineno, fn.end_lineno + 1))
        elif isinstance(node, ast.FunctionDef) and node.name in names and node.col_offset == 0:
            lines |= set(range(node.lineno, node.end_lineno + 1))
    return lines


@pytest.mark.parametrize("exercise_id", ["training", "checkpoint", "attention"])
def test_each_mutant_is_one_change_inside_a_student_function(exercise_id):
    ex, stub, solution = sources(exercise_id)
    mutants = course_mutants(exercise_id)
    inside = function_lines(solution, student_functions(stub, solution))
    assert len(mutants) >= 30
    assert len({m.id for m in mutants}) == len(mutants) == len({m.source for m in mutants})
    for m in mutants:
        compile(m.source, m.file, "exec")
        changed = [i + 1 for op, i1, i2, _, _ in
                   difflib.SequenceMatcher(None, solution.splitlines(), m.source.splitlines()).get_opcodes()
                   if op != "equal" for i in range(i1, max(i2, i1 + 1))]
        assert changed and set(changed) <= inside, (m.id, changed)
        assert m.line in changed and m.before != m.after
        assert m.id.startswith(f"{exercise_id}:{m.function}:{m.operator}:")
    operators = {m.operator for m in mutants}
    assert {"swap_op", "number", "arg_removal"} <= operators


def test_docstrings_annotations_decorators_and_error_messages_are_not_mutated():
    ex, stub, solution = sources("checkpoint")
    for m in course_mutants(ex.id):
        assert "no_grad" not in m.before or "no_grad" in m.after, m.id   # the decorator stays
        assert not m.before.startswith("raise "), m.id
        assert not m.before.startswith(('"""', "'''")), m.id
    # an assert's message is for people too: its condition is mutated, its message never
    found = generate("demo", "demo.py", "def check(x):\n    raise NotImplementedError\n",
                     "def check(x):\n    assert x < 1, f\"x is {x + 1}\"\n")
    assert found and all(m.after.split(",", 1)[1] == m.before.split(",", 1)[1] for m in found), found


def test_ids_survive_unrelated_edits_and_name_no_line():
    ex, stub, solution = sources("rope")
    before = generate(ex.id, ex.file, stub, solution)
    edited = solution.replace("import torch\n", "import torch\n\n# a new comment\nUNRELATED = 3\n\n", 1)
    # an edited comment inside the function changes no id either
    edited = edited.replace("# (D/2,)", "# (D/2,) channel frequencies", 1)
    assert edited.count("\n") > solution.count("\n")
    after = generate(ex.id, ex.file, stub, edited)
    assert [m.id for m in after] == [m.id for m in before]
    assert all(a.line == b.line + 4 for a, b in zip(after, before, strict=True))
    # while an edit of the code a mutant changes gives that mutant (and only the mutants of that statement) new ids
    changed = solution.replace("half = D // 2", "half = D >> 1", 1)
    moved = {m.id for m in generate(ex.id, ex.file, stub, changed)} ^ {m.id for m in before}
    assert moved and all("half" in m.before for m in before if m.id in moved)


def test_identical_changes_of_identical_statements_get_distinct_ids():
    stub = "def f(x):\n    raise NotImplementedError\n"
    solution = "def f(x):\n    y = x + 1\n    y = x + 1\n    return y\n"
    mutants = generate("ex", "f.py", stub, solution)
    plus = [m for m in mutants if m.after == "y = x - 1"]
    assert len(plus) == 2 and plus[0].id != plus[1].id and {m.line for m in plus} == {2, 3}
    assert excerpt(plus[0]) == "- y = x + 1  + y = x - 1"


def test_the_reviewed_equivalents_name_real_mutants_each_with_a_reason():
    """Every entry is a mutant today's solutions produce (an entry left behind by a solution edit fails here,
    in seconds, before any grading)."""
    equivalents = load_equivalents(EQUIVALENTS_FILE)
    raw = tomllib.loads(EQUIVALENTS_FILE.read_text())["equivalent"]
    assert equivalents == {k: v["why"] for k, v in raw.items()} and len(equivalents) >= 30
    known = {m.id for ex in COURSE.exercises for m in course_mutants(ex.id)}
    assert set(equivalents) - known == set()
    for mutant_id, reason in equivalents.items():
        assert len(reason) >= 20 and "\n" not in reason, mutant_id


def mutant(id_, exercise="heads"):
    return Mutant(id_, exercise, "heads.py", "split_heads", "number", 3, "a = 1", "a = 2", "")


def test_a_survivor_fails_the_run_unless_listed_and_a_listed_one_that_is_caught_fails_too():
    survivor, listed, caught, listed_caught, fault = (mutant(f"heads:split_heads:number:{i}") for i in "abcde")
    outcomes = [Outcome(survivor, {}, None), Outcome(listed, {}, None), Outcome(caught, {"round_trip": "failed"}, None),
                Outcome(listed_caught, {"round_trip": "failed"}, None),
                Outcome(fault, {"round_trip": "grader_error"}, None)]
    equivalents = {listed.id: "reason enough", listed_caught.id: "wrongly listed", "heads:gone:number:x": "old"}
    problems = mutation_problems(outcomes, equivalents, [survivor, listed, caught, listed_caught, fault], {"heads"})
    assert len(problems) == 4
    assert survivor.id in problems[0] and "survives with full marks" in problems[0]
    assert listed_caught.id in problems[1] and "round_trip failed" in problems[1]
    assert fault.id in problems[2] and "grader fault" in problems[2]
    assert "heads:gone:number:x" in problems[3]
    # a sampled run cannot tell an entry whose mutant is gone from one it did not draw
    assert len(mutation_problems(outcomes, equivalents, [], set())) == 3
    (figure,) = figures(dataclasses.replace(COURSE, exercises=(COURSE.exercise("heads"),)), outcomes, equivalents)
    assert (figure.mutants, figure.caught, figure.equivalent, figure.non_equivalent) == (5, 2, 1, 4)
    assert [o.mutant for o in figure.survivors] == [survivor] and [o.mutant for o in figure.faults] == [fault]


def selftest(*args):
    return subprocess.run([sys.executable, "-m", "grader", "selftest", "--mutate", *args],
                          capture_output=True, text=True, cwd=ROOT, timeout=1800)


@pytest.mark.slow
def test_a_run_lists_its_survivor_and_fails_until_it_is_reviewed(tmp_path):
    """A known equivalent mutant graded alone: with the reviewed list it counts as equivalent; without it, it is
    a survivor with its file, line and change, and the run fails."""
    equivalents = load_equivalents(EQUIVALENTS_FILE)
    masks = {m.id: m for m in course_mutants("masks")}
    chosen = sorted(i for i in equivalents if i in masks)[0]
    caught = next(i for i, m in masks.items() if m.after == "return (ids == pad_id)[:, None, None, :]")   # reversed
    done = selftest("--exercise", "masks", "--mutant", chosen, "--mutant", caught)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "1/1 caught (100.0%), 1 equivalent, 0 survivors" in done.stdout
    empty = tmp_path / "none.toml"
    empty.write_text("[equivalent]\n")
    done = selftest("--exercise", "masks", "--mutant", chosen, "--equivalents", str(empty))
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-2000:]
    m = masks[chosen]
    assert f"survivor {m.file}:{m.line} {m.function}: {excerpt(m)}   [{chosen}]" in done.stdout
    assert "0/1 caught (0.0%)" in done.stdout and "1 problems" in done.stdout


@pytest.mark.parametrize("text, said", [("equivalent = 3", "must be a table"), ('[equivalent."a:b"]\nwhy = " "', "a:b"),
                                        ('[equivalent]\n"a:c" = "no table"', "a:c"), ("[equivalent", "Expected")])
def test_a_malformed_list_of_equivalents_is_refused_with_where(tmp_path, text, said):
    from grader.review.mutation import EquivalentsError

    path = tmp_path / "equivalent.toml"
    path.write_text(text)
    with pytest.raises(EquivalentsError, match=said) as caught:
        load_equivalents(path)
    assert str(path) in str(caught.value)
    assert load_equivalents(tmp_path / "absent.toml") == {}
