"""course.toml and the grader's modules agree: every criterion has points, every point has a criterion."""

import importlib
import subprocess
import sys

import pytest

from grader.course import load_course
from grader.judge.criterion import KINDS
from grader.judge.session import criteria_of
from grader.worker.probe import probes_of

from conftest import ROOT, criteria_module, probes_module

COURSE = load_course(ROOT)
IDS = [e.id for e in COURSE.exercises]


@pytest.mark.parametrize("exercise_id", IDS)
def test_points_name_exactly_the_criteria(exercise_id):
    ex = COURSE.exercise(exercise_id)
    criteria = [c.id for c in criteria_of(exercise_id)]
    assert len(criteria) == len(set(criteria)), f"duplicate criterion ids in {exercise_id}: {criteria}"
    assert set(ex.points) == set(criteria), (
        f"course.toml points {sorted(ex.points)} != criteria {sorted(criteria)}")
    assert all(p > 0 for p in ex.points.values())


@pytest.mark.parametrize("exercise_id", IDS)
def test_criteria_are_bilingual_and_of_known_kinds(exercise_id):
    for meta in criteria_of(exercise_id):
        assert meta.kind in KINDS
        for text in (meta.title, meta.hint):
            assert text["en"].strip() and text["zh"].strip(), meta.id
        earlier = [c.id for c in criteria_of(exercise_id)]
        for required in meta.requires:
            assert earlier.index(required) < earlier.index(meta.id), f"{meta.id} requires a later {required}"


@pytest.mark.parametrize("exercise_id", IDS)
def test_every_exercise_has_files_and_probes(exercise_id):
    ex = COURSE.exercise(exercise_id)
    assert COURSE.stub(ex).is_file()
    assert COURSE.solution(ex).is_file()
    assert (ROOT / "exercises" / exercise_id / "README.md").is_file()
    assert probes_of(probes_module(exercise_id)), f"{exercise_id} has no probes"


def test_forbidden_apis_resolve():
    """Every forbidden name is real: a dotted Python name, or an `aten::` operator torch knows."""
    import torch

    for ex in COURSE.exercises:
        for name in ex.forbidden:
            if name.startswith("aten::"):
                assert hasattr(torch.ops.aten, name.removeprefix("aten::")), name
            else:
                owner, attr = name.rsplit(".", 1)
                assert hasattr(importlib.import_module(owner), attr), name


@pytest.mark.parametrize("exercise_id", IDS)
def test_probe_order_read_from_source_matches_the_module(exercise_id):
    from grader.grading.pipeline import probe_order

    ex = COURSE.exercise(exercise_id)
    assert probe_order(ex) == [p.name for p in probes_of(probes_module(exercise_id))]


SHIPPED_MODEL = ["Config", "CausalSelfAttention", "FeedForward", "TransformerBlock", "TransformerLM"]


@pytest.mark.parametrize("path", [
    "exercises/training/train.py", "solutions/training/train.py",
    "exercises/checkpoint/checkpoint.py", "solutions/checkpoint/checkpoint.py", "solutions/_lib/lm.py",
    "exercises/kv_cache/cache.py",
])
def test_shipped_model_copies_match_the_reference(path):
    """Exercises 10 and 11 ship a working copy of exercise 9's model (each student file is standalone), and the
    probes hand the same model to student code: every copy must stay the reference, class for class. Exercise 13's
    stub ships it too, for the student to extend (its solution changes the attention, the block and forward)."""
    import ast

    def classes(file):
        source = (ROOT / file).read_text()
        return {node.name: ast.get_source_segment(source, node) for node in ast.parse(source).body
                if isinstance(node, ast.ClassDef) and node.name in SHIPPED_MODEL}

    reference = classes("solutions/transformer_lm/model.py")
    assert sorted(reference) == sorted(SHIPPED_MODEL)
    assert classes(path) == reference


def named(folder, name: str) -> None:
    """Give the course.toml in `folder` this `[course] name` (TOML)."""
    import re

    path = folder / "course.toml"
    path.write_text(re.sub(r"(?m)^name = .*$", lambda _: f"name = {name}", path.read_text(), count=1))


def test_the_course_is_named_in_both_languages():
    assert COURSE.name_in("en") == COURSE.name == "Build a decoder-only Transformer"
    assert COURSE.name_in("zh") == "亲手搭建仅解码器 Transformer"


@pytest.mark.parametrize("name, en, zh", [
    ('"Transformers 101"', "Transformers 101", "Transformers 101"),   # a course.toml of before: one name for all
    ('{ en = "Transformers 101", zh = "Transformer 入门" }', "Transformers 101", "Transformer 入门"),
    ('{ en = "Transformers 101" }', "Transformers 101", "Transformers 101"),
])
def test_a_course_name_is_one_name_or_one_per_language(tmp_path, name, en, zh):
    from conftest import course_copy

    folder = course_copy(tmp_path / "course", ["heads"])
    named(folder, name)
    course = load_course(folder)
    assert (course.name, course.name_in("en"), course.name_in("zh")) == (en, en, zh)


@pytest.mark.parametrize("name", ['""', "3", '{ zh = "入门" }', '{ en = "A", zh = 3 }'])
def test_a_bad_course_name_is_named(tmp_path, name):
    from conftest import course_copy

    from grader.course import CourseError

    folder = course_copy(tmp_path / "course", ["heads"])
    named(folder, name)
    with pytest.raises(CourseError, match=r"course.toml, line 4: `name` under \[course\] must be a name"):
        load_course(folder)


@pytest.mark.parametrize("exercise_id", IDS)
def test_criteria_read_from_source_are_the_ones_the_judge_imports(exercise_id):
    """What a gradebook lists without importing the criteria (grader.judge.listing) is what the decorator made."""
    module = criteria_module(exercise_id)
    decorated = [fn.criterion for name, fn in vars(module).items() if name.startswith("test_")
                 and hasattr(fn, "criterion")]
    assert criteria_of(exercise_id) == decorated


def test_titles_are_read_without_importing_the_judge():
    """The gradebook, a report for an ungraded submission and the warm grader name criteria without pytest or torch."""
    code = ("import sys; import grader.batch.gradebook, grader.batch.rows, grader.batch.warm; "
            "from grader.judge.listing import criteria_of; "
            f"metas = [m for ex in {IDS!r} for m in criteria_of(ex)]; "
            "assert all(m.title['zh'] != m.title['en'] for m in metas), 'a title without its Chinese'; "
            "print(len(metas), sorted(m for m in sys.modules if m in ('torch', 'pytest') "
            "or m.startswith('course_criteria')))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=False)
    assert done.returncode == 0, done.stderr
    count, imported = done.stdout.split(" ", 1)
    assert int(count) == sum(len(COURSE.exercise(ex).points) for ex in IDS)
    assert imported.strip() == "[]"


def test_a_title_is_a_template_not_a_dict(tmp_path):
    from grader.i18n import t
    from grader.judge.criterion import criterion
    from grader.judge.listing import CriteriaSourceError

    with pytest.raises(ValueError, match="t\\("):
        criterion("x", kind="shape", title={"en": "x", "zh": "x"}, hint=t("x"))   # type: ignore[arg-type]
    own = tmp_path / "rope" / "criteria.py"   # a course's solutions folder: <id>/criteria.py
    own.parent.mkdir()
    own.write_text('@criterion("x", kind="shape", title={"en": "x", "zh": "x"}, hint=t("y"))\n'
                   "def test_x(obs, verdict):\n    pass\n")
    with pytest.raises(CriteriaSourceError, match="rope/criteria.py:1"):
        criteria_of("rope", tmp_path)
    own.write_text('@criterion("x", kind="shape", requires=("w",), title=t("Logits are [B, T, V]"),'
                   ' hint=t("look {{here}}"))\ndef test_x(obs, verdict):\n    pass\n')
    (meta,) = criteria_of("rope", tmp_path)
    assert (meta.id, meta.kind, meta.requires, meta.hint["en"]) == ("x", "shape", ("w",), "look {here}")


def test_the_written_questions_the_chapters_ask_are_in_the_course():
    """Seed 002: every section's acceptance asks the tensor flow explained from input to output; seed 004 asks three
    why-questions and a fault experiment report. Each is a question with both languages and a gradeable rubric."""
    from grader.course import Question, RubricItem

    asked = {ex.id: [q.id for q in ex.questions] for ex in COURSE.exercises}
    assert all(ids[0] == "tensor_flow" for ids in asked.values()), asked
    assert asked["transformer_lm"][1:] == ["reads_history"]
    assert asked["decoder_block"][1:] == ["future_leak_assertion"]
    assert asked["checkpoint"][1:] == ["optimizer_state"]
    assert asked["training"][1:] == ["fault_experiment"]
    for ex in COURSE.exercises:
        for q in ex.questions:
            assert isinstance(q, Question) and q.points > 0
            assert all(q.prompt[lang].strip() and "\n" not in q.prompt[lang] for lang in ("en", "zh"))
            assert all(isinstance(item, RubricItem) and item.text["en"].strip() and item.text["zh"].strip()
                       for item in q.rubric)
            positive = sum(item.points for item in q.rubric if item.points > 0)
            assert positive == q.points, f"{ex.id}.{q.id}: the positive items make {positive}, not {q.points}"
            assert any(item.points < 0 for item in q.rubric), f"{ex.id}.{q.id} has no item taking points off"
    fault = COURSE.exercise("training").questions[1]
    assert "before and after the fix" in fault.prompt["en"] and "实际输出" in fault.prompt["zh"]
