"""Public tests carry no working reference: every function they define, pasted into the stub function it fits,
earns no hidden criterion. (The exercises whose public tests compute what the student's code computes.)"""

import ast
import itertools


from grader.course import load_course
from grader.grading.pipeline import grade
from grader.sandbox.levels import choose

from conftest import ROOT

COURSE = load_course(ROOT)
EXERCISES = ["attention", "heads", "decoder_block"]


def positional(fn: ast.FunctionDef) -> tuple[int, int]:
    """(required, total) positional parameters."""
    return len(fn.args.args) - len(fn.args.defaults), len(fn.args.args)


def unwritten(stub: ast.Module):
    """The stub's functions and methods that still raise NotImplementedError."""
    for node in ast.walk(stub):
        if isinstance(node, ast.FunctionDef) and any(
                isinstance(s, ast.Raise) and "NotImplementedError" in ast.unparse(s) for s in node.body):
            yield node


def pastes(exercise_id: str) -> list[tuple[str, str]]:
    """(label, source) of the stub with one unwritten function's body replaced by a call of one public-test helper."""
    ex = COURSE.exercise(exercise_id)
    stub_text = COURSE.stub(ex).read_text()
    stub_lines = stub_text.splitlines()
    tests_text = "\n".join(p.read_text() for p in sorted((ROOT / "exercises" / ex.id).glob("test_*.py")))
    tests = ast.parse(tests_text)
    helpers = [n for n in tests.body if isinstance(n, ast.FunctionDef) and not n.name.startswith("test_")]
    # everything the helpers may use, as the test file has it, but the student's module reached as itself
    support = [ast.unparse(n) for n in tests.body
               if not (isinstance(n, ast.FunctionDef) and n.name.startswith("test_"))
               and not (isinstance(n, ast.Import) and n.names[0].name == ex.module_name)]
    results = []
    for helper, target in itertools.product(helpers, unwritten(ast.parse(stub_text))):
        required, total = positional(helper)
        params = [a.arg for a in target.args.args]
        if not required <= len(params) <= total:
            continue
        indent = " " * target.body[0].col_offset
        first = target.body[0].lineno - 1 if ast.get_docstring(target) is None else target.body[1].lineno - 1
        body = [f"{indent}return {helper.name}({', '.join(params)})"]
        text = "\n".join(stub_lines[:first] + body + stub_lines[target.end_lineno:])
        text += f"\n\nimport sys\n{ex.module_name} = sys.modules[__name__]\n" + "\n".join(support) + "\n"
        results.append((f"{helper.name} as {target.name}", text))
    return results


def test_no_hidden_criterion_passes_on_a_pasted_public_test_helper(tmp_path):
    by_exercise = {e: pastes(e) for e in EXERCISES}
    assert any(by_exercise.values()), "nothing to paste: the test would prove nothing"
    leaks = []
    for round_ in range(max(len(p) for p in by_exercise.values())):
        submission = tmp_path / f"round{round_}"
        labels = {}
        for exercise_id, candidates in by_exercise.items():
            if round_ < len(candidates):
                ex = COURSE.exercise(exercise_id)
                labels[exercise_id], source = candidates[round_]
                (submission / ex.id).mkdir(parents=True)
                (submission / ex.id / ex.file).write_text(source)
        report = grade(COURSE, submission, sorted(labels), choose("none"))
        for result in report.exercises:
            ex = COURSE.exercise(result.id)
            leaks += [f"{result.id}: {labels[result.id]} passes {c.id}" for c in result.criteria
                      if c.status == "passed" and not ex.is_visible(c.id, c.kind)]
    assert leaks == []
