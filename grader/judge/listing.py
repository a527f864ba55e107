"""The criteria an exercise is judged on, read from the source of its criteria module without importing it.

A gradebook, a report for a submission that could not be graded and a judge that would not start all need an
exercise's criteria (their ids, kinds and titles) without judging anything: importing the criteria modules would
import pytest and torch for a title. So this module reads each `@criterion(...)` decorator's arguments from the
module's syntax tree, as `grader/sandbox/probe_plan.py` reads the probes, and renders the title and hint through
the catalogs (`grader.i18n`). The judge itself imports the modules, and the decorator (`grader.judge.criterion`)
builds the same `CriterionMeta` from the same arguments (tests/test_course_config.py compares the two).

A criterion is a top-level `def test_...` decorated with `@criterion`, or a top-level `test_... = factory()` whose
factory (imported by `from module import factory`) returns one (`forbidden_api_criterion`, say). Its arguments
are literals: an id, a kind, `title=t("...")`, `hint=t("...")`, `requires=(...)`.
"""

from __future__ import annotations

import ast
import functools
import importlib.util
from pathlib import Path
from typing import TypeGuard

from grader.course import CRITERIA_FILE, default_solutions, share_course_code
from grader.i18n import Text
from grader.judge.criterion import CriterionMeta


class CriteriaSourceError(ValueError):
    """A criteria module whose criteria cannot be read from its source; the message says where and why."""


def criteria_file(exercise_id: str, solutions: Path | None = None) -> Path:
    """The module of an exercise's criteria: <solutions>/<id>/criteria.py of the course (`Course.solutions`; None:
    the bundled course's)."""
    return (solutions or default_solutions()) / exercise_id / CRITERIA_FILE


def criteria_of(exercise_id: str, solutions: Path | None = None) -> list[CriterionMeta]:
    """The criteria an exercise is judged on, in the order they are written, titled in the course's catalogs."""
    solutions = solutions or default_solutions()
    share_course_code(solutions)
    path = criteria_file(exercise_id, solutions)
    return list(_criteria_in(str(path), path.read_text(encoding="utf-8")))


@functools.cache
def _criteria_in(path: str, source: str) -> tuple[CriterionMeta, ...]:
    """Keyed by the source itself: a file rewritten within one tick of its clock is read again all the same."""
    tree = ast.parse(source, filename=path)
    imported = {alias.asname or alias.name: node.module for node in tree.body if isinstance(node, ast.ImportFrom)
                for alias in node.names if node.module}
    found = []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name.startswith("test_"):
            found += [_meta(d, path) for d in node.decorator_list if _is_criterion(d)]
        elif isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) \
                and isinstance(node.value.func, ast.Name) \
                and any(isinstance(n, ast.Name) and n.id.startswith("test_") for n in node.targets):
            factory = node.value.func.id
            if factory not in imported:
                raise CriteriaSourceError(f"{path}:{node.lineno}: {factory} is not imported by `from ... import`")
            found.append(_made_by(imported[factory], factory))
    return tuple(found)


@functools.cache
def _made_by(module: str, factory: str) -> CriterionMeta:
    """The criterion a factory function of `module` makes: the one `@criterion` inside its body."""
    spec = importlib.util.find_spec(module)   # imports the parent packages only (grader.judge: light)
    if spec is None or spec.origin is None:
        raise CriteriaSourceError(f"no module {module} for the criterion factory {factory}")
    tree = ast.parse(Path(spec.origin).read_text(encoding="utf-8"), filename=spec.origin)
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == factory:
            inner = [d for n in ast.walk(node) if isinstance(n, ast.FunctionDef) and n is not node
                     for d in n.decorator_list if _is_criterion(d)]
            if len(inner) == 1:
                return _meta(inner[0], spec.origin)
    raise CriteriaSourceError(f"{spec.origin}: {factory} defines no single @criterion")


def _is_criterion(decorator: ast.expr) -> TypeGuard[ast.Call]:
    return isinstance(decorator, ast.Call) and isinstance(decorator.func, ast.Name) and decorator.func.id == "criterion"


def _meta(decorator: ast.Call, path: str) -> CriterionMeta:
    where = f"{path}:{decorator.lineno}"
    try:
        (id_node,) = decorator.args
        criterion_id = ast.literal_eval(id_node)
        keywords = {k.arg: k.value for k in decorator.keywords}
        kind = ast.literal_eval(keywords["kind"])
        requires = tuple(ast.literal_eval(keywords["requires"])) if "requires" in keywords else ()
        title, hint = (_template(keywords[name], where) for name in ("title", "hint"))
    except (ValueError, KeyError, TypeError) as exc:
        raise CriteriaSourceError(f"{where}: a criterion's id, kind and requires are literals and its title and "
                                  f"hint are t(\"...\") ({type(exc).__name__}: {exc})") from None
    # the template is the literal in the criteria module's source: that is where the catalogs are extracted from
    return CriterionMeta(criterion_id, kind, Text(title).texts(), Text(hint).texts(), requires)


def _template(node: ast.expr, where: str) -> str:
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "t" \
            and len(node.args) == 1 and not node.keywords \
            and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str):
        return node.args[0].value
    raise CriteriaSourceError(f"{where}: a title or hint is t(\"English template\"), its Chinese in the catalog")
