"""The course is data: no module of the grader package names an exercise of the course. What is specific to an
exercise (its probes, criteria, catalog, reference) lives in the course folder, solutions/<id>/, and the grader
finds it there (grader/course.py); here every identifier and every string literal (docstrings and messages
included) of every module under grader/ is searched for the course's exercise ids, read from course.toml."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from conftest import ROOT
from grader.course import load_course

COURSE = load_course(ROOT)
PACKAGE = ROOT / "grader"

# Where a word spelled like an exercise id means something else, with the reason; each must still be there.
NOT_THE_EXERCISE = {
    ("grader/classroom/github.py", "refs/heads/"): "git's namespace of branches",
    ("grader/judge/criterion.py", "param_count"): "a criterion kind (counting parameters), judged by several "
                                                  "exercises",
}


def _names(tree: ast.AST):
    """(line, text) of every name the source spells: identifiers, attributes, definitions, arguments, keywords,
    imported modules and their aliases, and string literals."""
    for node in ast.walk(tree):
        line = getattr(node, "lineno", 0)
        if isinstance(node, ast.Name):
            yield line, node.id
        elif isinstance(node, ast.Attribute):
            yield line, node.attr
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            yield line, node.name
        elif isinstance(node, ast.arg):
            yield line, node.arg
        elif isinstance(node, ast.keyword) and node.arg:
            yield line, node.arg
        elif isinstance(node, ast.alias):
            yield line, node.name
            if node.asname:
                yield line, node.asname
        elif isinstance(node, ast.ImportFrom) and node.module:
            yield line, node.module
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            yield line, node.value


def naming(source: str, ids: list[str]) -> list[tuple[int, str, str]]:
    """(line, id, the text naming it) for each name or literal of `source` that holds an id as a word of its own:
    delimited by anything but a letter, digit, underscore or hyphen (`n_heads`, `attention_map` and the CSS class
    `rope-pairing` name no exercise; `masks`, `grader.probes.masks`, `solutions/masks` and "the masks" do)."""
    word = re.compile(r"(?<![\w-])(" + "|".join(map(re.escape, ids)) + r")(?![\w-])")
    return [(line, found.group(1), text) for line, text in _names(ast.parse(source)) for found in word.finditer(text)]


def test_the_search_finds_an_exercise_named_in_code_in_a_literal_or_in_words():
    """A positive control: each way of naming an exercise is found, and words that merely contain an id are not."""
    ids = ["masks", "heads", "training"]
    source = '''"""Helpers; the training loop."""
import grader.probes.masks as masks
from grader.probes import heads


def check(ex, n_heads, attention_map):
    if ex.id == "masks":
        return solutions / "heads" / "probes.py", "rope-pairing", "headsy"
'''
    found = {(line, word) for line, word, _ in naming(source, ids)}
    assert found == {(1, "training"), (2, "masks"), (3, "heads"), (7, "masks"), (8, "heads")}, found


def test_no_module_of_the_grader_names_an_exercise_id():
    ids = [ex.id for ex in COURSE.exercises]
    assert len(ids) >= 11
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(ROOT).as_posix()
        for line, exercise, text in naming(path.read_text(encoding="utf-8"), ids):
            if (relative, text) not in NOT_THE_EXERCISE:
                found.append(f"{relative}:{line}: names {exercise!r} in {text[:80]!r}")
    assert not found, "\n".join(found)


@pytest.mark.parametrize(("relative", "text"), sorted(NOT_THE_EXERCISE))
def test_each_word_excused_is_still_there(relative, text):
    """An entry of NOT_THE_EXERCISE whose text has gone would excuse the next real naming of an exercise."""
    assert text in [t for _, t in _names(ast.parse((ROOT / relative).read_text(encoding="utf-8")))]


def test_the_grader_package_holds_no_probe_or_criteria_module():
    """The package a course's probe code is loaded into holds none itself, and its catalog only its own sentences;
    each exercise's are beside its criteria."""
    assert [p.name for p in (PACKAGE / "probes").iterdir() if p.suffix == ".py"] == ["__init__.py"]
    assert not (PACKAGE / "criteria").exists()
    assert [p.name for p in (PACKAGE / "locale" / "zh" / "LC_MESSAGES").iterdir()] == ["grader.po"]
    for ex in COURSE.exercises:
        for name in ("probes.py", "criteria.py", "zh.po", ex.file):
            assert (COURSE.solutions / ex.id / name).is_file(), (ex.id, name)


def test_an_exercise_file_may_not_take_the_name_of_the_graders_files(tmp_path: Path):
    from grader.course import CourseError

    (tmp_path / "course.toml").write_text('[course]\nname = "c"\nseed = 1\n[[exercise]]\nid = "one"\n'
                                          'file = "probes.py"\ntitle = { en = "One", zh = "一" }\n'
                                          '[exercise.points]\nworks = 1\n')
    with pytest.raises(CourseError, match="may not be named probes.py"):
        load_course(tmp_path)
