"""First-order mutants of the reference solutions, inside the code students write: `grader selftest --mutate`.

Theory of operation. The stub (`exercises/<id>/<file>`) says which functions are the student's: those whose body
ends in `raise NotImplementedError(...)`, plus the helpers the solution adds that they call (`_plain`, say).
Everything else the stub gives (a copy of the model a standalone file ships, a given FeedForward or DecoderBlock) is
the course's, and is not mutated. Inside those functions every node is handed to mutmut's operators
(`mutmut.mutation.mutators.mutation_operators`: numbers moved by one, operators swapped, comparisons flipped,
`and`/`or`, `True`/`False`, `is`/`in` negated, unary operators dropped, call arguments dropped or made None,
assignments made None, strings changed), one change at a time. mutmut's own runner is not used: it rewrites the code
under test into trampolines and runs pytest in the process, while a course's code must be graded in the sandbox. We
walk libcst's tree ourselves and skip, as mutmut does, type annotations and decorators, and also docstrings,
`raise` statements and the message of an `assert` (an exception's message is for people: the contract fixes its type,
and no correct criterion could tell two messages apart).

Each mutant has an id that survives unrelated edits of the solution: the function, the operator, and a hash of
the statement around the change (its source without comments) with the change itself, and how many identical
changes of that statement came before it. The id names no line number.

Every mutant is graded like a submission (see `grader.review.selftest`). One that keeps full marks survives, and is
then either listed in the reviewed file of equivalent mutants (`solutions/equivalent.toml`: its id, and why
no correct test could tell it from the solution) or a blind spot of the criteria, which fails the run.
"""

from __future__ import annotations

import ast
import hashlib
import io
import random
import re
import tokenize
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

import libcst as cst
from libcst.metadata import MetadataWrapper, ParentNodeProvider, PositionProvider, WhitespaceInclusivePositionProvider

from grader.course import Course, ExerciseConfig
from grader.worker.protocol import Status

# The statement kinds whose text identifies where a change is made: a small statement (an assignment, a return,
# an expression) or, for a change in a compound statement's header, the part of the header it is in.
_HEADERS = (cst.If, cst.While, cst.For, cst.With)
EQUIVALENTS = "equivalent.toml"   # the reviewed list of equivalent mutants, at the top of the catalog (solutions/)


@dataclass(frozen=True)
class Mutant:
    id: str             # stable: function, operator, hash of the statement and the change (no line number)
    exercise: str
    file: str
    function: str       # qualified: "Class.method" or "function"
    operator: str       # mutmut's operator, without its "operator_" prefix
    line: int
    before: str         # the statement around the change, on one line
    after: str          # the same statement mutated
    source: str         # the whole mutated file


def _qualified_functions(tree: ast.Module) -> dict[str, ast.FunctionDef | ast.AsyncFunctionDef]:
    """Every function and method of the module by qualified name (nested classes included)."""
    found: dict[str, ast.FunctionDef | ast.AsyncFunctionDef] = {}

    def visit(body: list[ast.stmt], prefix: str) -> None:
        for node in body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                found[prefix + node.name] = node
            elif isinstance(node, ast.ClassDef):
                visit(node.body, f"{prefix}{node.name}.")

    visit(tree.body, "")
    return found


def _is_left_to_students(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """Whether a stub's function ends in its own `raise NotImplementedError(...)`, at the top of its body (after
    a docstring or a `super().__init__()`, say): one that raises it only on some path is given code."""
    last = fn.body[-1]
    if not isinstance(last, ast.Raise) or last.exc is None:
        return False
    exc = last.exc.func if isinstance(last.exc, ast.Call) else last.exc
    return isinstance(exc, ast.Name) and exc.id == "NotImplementedError"


def student_functions(stub_source: str, solution_source: str) -> set[str]:
    """The qualified names of the solution's functions a student writes: the stub's NotImplementedError ones and
    the solution's own helpers (absent from the stub) that those call, directly or through each other."""
    stub = _qualified_functions(ast.parse(stub_source))
    solution = _qualified_functions(ast.parse(solution_source))
    chosen = {name for name, fn in stub.items() if _is_left_to_students(fn) and name in solution}
    helpers = {name for name in solution if name not in stub}
    # names each chosen function mentions (a call `_plain(...)` or `self._split(...)`), to a fixed point
    todo = list(chosen)
    while todo:
        fn = solution[todo.pop()]
        mentioned = {n.id for n in ast.walk(fn) if isinstance(n, ast.Name)} | \
                    {n.attr for n in ast.walk(fn) if isinstance(n, ast.Attribute)}
        for helper in helpers - chosen:
            if helper.rsplit(".", 1)[-1] in mentioned:
                chosen.add(helper)
                todo.append(helper)
    return chosen


class _Collector(cst.CSTVisitor):
    """Every first-order change mutmut's operators make inside the chosen functions."""

    METADATA_DEPENDENCIES = (PositionProvider, WhitespaceInclusivePositionProvider, ParentNodeProvider)

    def __init__(self, chosen: set[str]):
        from mutmut.mutation.mutators import mutation_operators

        super().__init__()
        self.operators = mutation_operators
        self.chosen = chosen
        self.scope: list[str] = []       # enclosing class and function names
        self.inside: list[str] = []      # the chosen function being walked (a stack: nested defs stay inside)
        self.found: list[tuple[str, str, cst.CSTNode, cst.CSTNode]] = []   # function, operator, node, mutated

    def visit_ClassDef(self, node: cst.ClassDef) -> bool:
        self.scope.append(node.name.value)
        return True

    def leave_ClassDef(self, original_node: cst.ClassDef) -> None:
        self.scope.pop()

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        name = ".".join([*self.scope, node.name.value])
        self.scope.append(node.name.value)
        if not self.inside and name in self.chosen:
            self.inside.append(name)
        elif self.inside:
            self.inside.append(self.inside[-1])
        return True

    def leave_FunctionDef(self, original_node: cst.FunctionDef) -> None:
        self.scope.pop()
        if self.inside:
            self.inside.pop()

    def on_visit(self, node: cst.CSTNode) -> bool:
        if not super().on_visit(node):
            return False
        if not self.inside:
            return True
        if isinstance(node, cst.Annotation | cst.Decorator | cst.Raise) or self._is_docstring(node) \
                or self._is_assert_message(node):
            return False
        for node_type, operator in self.operators:
            if isinstance(node, node_type):
                for mutated in operator(node):
                    self.found.append((self.inside[-1], operator.__name__.removeprefix("operator_"), node, mutated))
        return True

    def _is_assert_message(self, node: cst.CSTNode) -> bool:
        parent = self.get_metadata(ParentNodeProvider, node, None)
        return isinstance(parent, cst.Assert) and parent.msg is node

    def _is_docstring(self, node: cst.CSTNode) -> bool:
        if not (isinstance(node, cst.SimpleStatementLine) and len(node.body) == 1
                and isinstance(node.body[0], cst.Expr) and isinstance(node.body[0].value, cst.BaseString)):
            return False
        block = self.get_metadata(ParentNodeProvider, node)
        return isinstance(block, cst.IndentedBlock) and block.body[0] is node


def _one_line(code: str) -> str:
    """The code on one line, without its comments (an edited comment leaves a mutant's id as it was)."""
    lines = code.splitlines(keepends=True)
    try:
        comments = [t for t in tokenize.generate_tokens(io.StringIO(code).readline) if t.type == tokenize.COMMENT]
    except (tokenize.TokenError, SyntaxError):   # a fragment tokenize cannot end (an open bracket): kept whole
        comments = []
    for comment in reversed(comments):
        (row, start), (_, end) = comment.start, comment.end
        lines[row - 1] = lines[row - 1][:start] + lines[row - 1][end:]
    return re.sub(r"\s+", " ", "".join(lines)).strip()


def _statement_of(wrapper: MetadataWrapper, node: cst.CSTNode) -> cst.CSTNode:
    """The smallest statement (or compound statement's header part) holding the node."""
    parents = wrapper.resolve(ParentNodeProvider)
    current = node
    while True:
        if isinstance(current, cst.BaseSmallStatement | cst.Param):
            return current
        parent = parents.get(current)
        if parent is None or isinstance(current, cst.BaseSuite):
            return current
        if isinstance(parent, _HEADERS) and not isinstance(current, cst.BaseSuite | cst.Else):
            return current
        current = parent


def generate(exercise: str, file: str, stub_source: str, solution_source: str) -> list[Mutant]:
    """Every first-order mutant of the solution inside the functions left to students, in source order; two
    operators making the same file give one mutant."""
    chosen = student_functions(stub_source, solution_source)
    wrapper = MetadataWrapper(cst.parse_module(solution_source))
    collector = _Collector(chosen)
    wrapper.visit(collector)
    module = wrapper.module
    positions = wrapper.resolve(PositionProvider)
    spans = wrapper.resolve(WhitespaceInclusivePositionProvider)
    line_starts = [0]
    for line in solution_source.splitlines(keepends=True):
        line_starts.append(line_starts[-1] + len(line))

    def offset(position) -> int:
        return line_starts[position.line - 1] + position.column

    mutants: list[Mutant] = []
    seen_sources = {solution_source}
    seen_keys: dict[str, int] = {}
    for function, operator, node, mutated in collector.found:
        # The node's text, whitespace it owns included, spliced: what `module.deep_replace(node, mutated).code`
        # gives, without rebuilding the whole tree for every mutant.
        # A node over several lines is rendered without the block's indentation: those few take the slow way.
        span = spans[node]
        if span.start.line == span.end.line:
            source = (solution_source[:offset(span.start)] + module.code_for_node(mutated)
                      + solution_source[offset(span.end):])
        else:
            source = cst.ensure_type(module.deep_replace(node, mutated), cst.Module).code
        if source in seen_sources:
            continue
        try:
            compile(source, file, "exec")
        except SyntaxError:
            continue   # no student submits a file that does not parse as the mutant of a working one
        seen_sources.add(source)
        statement = _statement_of(wrapper, node)
        before = _one_line(module.code_for_node(statement))
        after = _one_line(module.code_for_node(statement.deep_replace(node, mutated)))
        key = "\0".join((function, operator, before, after))
        occurrence = seen_keys.get(key, 0)
        seen_keys[key] = occurrence + 1
        digest = hashlib.sha256(f"{key}\0{occurrence}".encode()).hexdigest()[:10]
        mutants.append(Mutant(f"{exercise}:{function}:{operator}:{digest}", exercise, file, function, operator,
                              positions[node].start.line, before, after, source))
    return mutants


def mutants_of(course: Course, ex: ExerciseConfig) -> list[Mutant]:
    return generate(ex.id, ex.file, course.stub(ex).read_text(encoding="utf-8"),
                    course.solution(ex).read_text(encoding="utf-8"))


def sample(mutants: list[Mutant], n: int | None, seed: int) -> list[Mutant]:
    """`n` of the mutants drawn with the seed (all when `n` is None or larger), in source order."""
    if n is None or n >= len(mutants):
        return list(mutants)
    chosen = set(random.Random(seed).sample(range(len(mutants)), n))
    return [m for i, m in enumerate(mutants) if i in chosen]


class EquivalentsError(ValueError):
    """The reviewed file of equivalent mutants is malformed."""


def load_equivalents(path: Path) -> dict[str, str]:
    """mutant id -> the reason no correct test could tell it from the solution; {} when the file is absent. The
    file holds a table per mutant: `[equivalent."<id>"]` with `why = "<one line>"`."""
    if not path.exists():
        return {}
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise EquivalentsError(f"{path}: {exc}") from None
    table = data.get("equivalent", {})
    if not isinstance(table, dict):
        raise EquivalentsError(f"{path}: equivalent must be a table of mutants")
    reasons, bad = {}, []
    for mutant_id, entry in table.items():
        why = entry.get("why") if isinstance(entry, dict) else None
        if not isinstance(why, str) or not why.strip() or "\n" in why:
            bad.append(mutant_id)
        else:
            reasons[mutant_id] = why
    if bad:
        raise EquivalentsError(f"{path}: each mutant needs why = \"a one-line reason\"; these have none: {bad}")
    return reasons


@dataclass
class Outcome:
    """What the criteria made of one mutant."""

    mutant: Mutant
    statuses: dict[str, str]    # criterion -> status, for those that did not pass
    failure: str | None         # why no report came (the grader's fault)

    @property
    def grader_fault(self) -> bool:
        return self.failure is not None or Status.GRADER_ERROR in self.statuses.values()

    @property
    def survived(self) -> bool:
        return not self.statuses and self.failure is None


def run_mutation(course: Course, mutants: list[Mutant], sandbox, progress=None):
    """Grade every mutant (the solutions with them, as a control: a solution losing a point would make every
    mutant look caught); returns (the solutions' problems, an Outcome per mutant)."""
    from grader.review.selftest import Case, grade_cases

    solutions = [Case("solution", ex.id, "reference", ex.file, course.solution(ex).read_text(encoding="utf-8"))
                 for ex in course.exercises]
    cases = [Case("generated", m.exercise, m.id, m.file, m.source) for m in mutants]
    grade_cases(course, solutions + cases, sandbox, progress)
    problems = [p for case in solutions for p in case.problems()]
    return problems, [Outcome(m, dict(c.got_fails), c.failure) for m, c in zip(mutants, cases, strict=True)]


@dataclass
class Figure:
    exercise: str
    mutants: int = 0
    caught: int = 0
    equivalent: int = 0        # survivors the reviewed file lists
    survivors: list[Outcome] = field(default_factory=list)   # full marks, and not listed as equivalent
    faults: list[Outcome] = field(default_factory=list)      # graded with a grader fault

    @property
    def non_equivalent(self) -> int:
        return self.mutants - self.equivalent

    @property
    def percent(self) -> float:
        return 100.0 * self.caught / self.non_equivalent if self.non_equivalent else 100.0


def figures(course: Course, outcomes: list[Outcome], equivalents: dict[str, str]) -> list[Figure]:
    by_exercise = {ex.id: Figure(ex.id) for ex in course.exercises}
    for o in outcomes:
        figure = by_exercise[o.mutant.exercise]
        figure.mutants += 1
        if o.grader_fault:
            figure.faults.append(o)
        elif o.survived:
            if o.mutant.id in equivalents:
                figure.equivalent += 1
            else:
                figure.survivors.append(o)
        else:
            figure.caught += 1
    return [f for f in by_exercise.values() if f.mutants]


def mutation_problems(outcomes: list[Outcome], equivalents: dict[str, str], generated: list[Mutant],
                      complete: set[str]) -> list[str]:
    """A survivor the reviewed file does not list, a grader fault, an entry of the file that a criterion catches
    (it is no equivalent) and, for the exercises whose every mutant ran (`complete`), an entry naming no mutant
    of today's solution."""
    problems = []
    for o in outcomes:
        m = o.mutant
        where = f"{m.file}:{m.line} {m.function}"
        if o.grader_fault:
            said = o.failure or "; ".join(c for c, s in o.statuses.items() if s == Status.GRADER_ERROR)
            problems.append(f"mutant {m.id} ({where}: {excerpt(m)}) ends in a grader fault: {said}")
        elif o.survived and m.id not in equivalents:
            problems.append(f"mutant {m.id} survives with full marks ({where}: {excerpt(m)}): a criterion should "
                            f"catch it, or the reviewed file should say why no correct test could")
        elif not o.survived and m.id in equivalents:
            caught_by = ", ".join(f"{c} {s}" for c, s in sorted(o.statuses.items()))
            problems.append(f"mutant {m.id} is listed as equivalent, but {caught_by}: remove it from the list")
    known = {m.id for m in generated}
    for mutant_id in sorted(equivalents):
        if mutant_id.split(":", 1)[0] in complete and mutant_id not in known:
            problems.append(f"the list of equivalent mutants names {mutant_id}, which today's solution does not "
                            f"produce (the code it changed has changed): remove or review it")
    return problems


def excerpt(m: Mutant, margin: int = 28) -> str:
    """The change on one line, cut to where before and after differ, with a little context: `- old` / `+ new`."""
    before, after = m.before, m.after
    start = 0
    while start < min(len(before), len(after)) and before[start] == after[start]:
        start += 1
    end = 0
    while end < min(len(before), len(after)) - start and before[-1 - end] == after[-1 - end]:
        end += 1

    def cut(text: str) -> str:
        lo, hi = max(0, start - margin), min(len(text), len(text) - end + margin)
        return ("…" if lo else "") + text[lo:hi] + ("…" if hi < len(text) else "")

    return f"- {cut(before)}  + {cut(after)}"
