"""`grader selftest`: grade every reference solution, correct variant and known-bug mutant, and prove that
each criterion is right. A solution or variant losing a point is a false failure; a mutant with full marks
is an escape; a mutant failing a criterion its manifest does not name is a criterion that misfires.

Catalog layout: tests/variants/<exercise>/<name>/<file> and tests/mutants/<exercise>/<bug>/<file>, each
folder with a manifest.toml: `description`, and for mutants the status each criterion it does not pass must
reach: `fails = [...]` (`failed`: the code ran and did the wrong thing), `errors = [...]` (`error`: the code
raised, and raising is the bug), `blocked = [...]` (a prerequisite the bug breaks did not pass), and optionally
`may_fail`, criteria whose verdict on that bug depends on the course seed (accepted either way). A mutant is
caught only by a criterion that reaches `failed` or `error` (or a `crashed` it names); a `grader_error` is
always a problem.
"""

from __future__ import annotations

import shutil
import tempfile
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from grader.course import Course
from grader.grading import grade
from grader.report.model import Report
from grader.sandbox.levels import Sandbox


@dataclass
class Case:
    kind: str                 # solution, variant or mutant
    exercise: str
    name: str
    source: Path
    description: str = ""
    expected: dict[str, str] = field(default_factory=dict)   # criterion -> the status the manifest names
    may_fail: frozenset[str] = frozenset()    # criteria a mutant fails on some seeds and not on others
    got_fails: dict[str, str] = field(default_factory=dict)   # criterion -> status, for what did not pass
    messages: dict[str, str] = field(default_factory=dict)

    @property
    def label(self) -> str:
        return f"{self.exercise}/{self.name}"

    @property
    def expected_fails(self) -> frozenset[str]:
        return frozenset(self.expected)

    def catches(self, criterion: str) -> bool:
        """Whether the criterion itself detected this mutant: it failed or raised, or hit the limit that its
        manifest names as the point (`crashes`: counting by building a module far too large to build)."""
        status = self.got_fails.get(criterion)
        return status in CATCHING or (status == "crashed" and self.expected.get(criterion) == "crashed")

    def problems(self) -> list[str]:
        got = set(self.got_fails)
        if self.kind in ("solution", "variant"):
            return [f"{self.kind} {self.label} lost {c} ({self.got_fails[c]}): {self.messages[c]}" for c in sorted(got)]
        found = []
        if not any(self.catches(c) for c in self.got_fails):
            found.append(f"mutant {self.label} escaped: no criterion failed or raised on it "
                         f"({', '.join(f'{c} {s}' for c, s in sorted(self.got_fails.items())) or 'full marks'})")
        for c in sorted(got - self.expected_fails - self.may_fail):
            found.append(f"mutant {self.label} fails {c} ({self.got_fails[c]}), which its manifest does not expect: {self.messages[c]}")
        for c in sorted(self.expected_fails - got):
            found.append(f"mutant {self.label} passes {c}, which its manifest says it fails")
        for c in sorted(got):
            if self.got_fails[c] == "error" and not blames_the_student_fairly(self.messages[c], self.source.name):
                found.append(f"mutant {self.label}: {c} is reported as the student's exception, but it was raised "
                             f"outside {self.source.name} and is no breach of the contract: {self.messages[c]}")
        for c in sorted(self.expected_fails & got):
            if self.got_fails[c] != self.expected[c]:
                found.append(f"mutant {self.label}: {c} is {self.got_fails[c]}, its manifest says {self.expected[c]}: "
                             f"{self.messages[c]}")
        return found


# The statuses that mean a criterion itself detected a bug; blocked, crashed, timeout and grader_error do not.
CATCHING = ("failed", "error")
MANIFEST_STATUSES = {"fails": "failed", "errors": "error", "crashes": "crashed", "blocked": "blocked"}


def blames_the_student_fairly(message: str, student_file: str) -> bool:
    """Whether an `error` verdict rests on the student's code: the exception names a frame of the student's file,
    or a probe found a breach of the contract in what that code returned."""
    return f" at {student_file}:" in message or "your code breaks the contract" in message


def expected_statuses(manifest: dict) -> dict[str, str]:
    """criterion -> status, from a mutant manifest's `fails`, `errors` and `blocked` lists."""
    return {c: status for key, status in MANIFEST_STATUSES.items() for c in manifest.get(key, ())}


def coverage_problems(course: Course, cases: list[Case]) -> list[str]:
    """Every criterion must itself catch some mutant (reach `failed` or `error` on it): one that is only ever
    blocked, crashed or grader-faulted has never been shown to detect anything."""
    from grader.judge.session import criteria_of

    problems = []
    for ex in course.exercises:
        mutants = [c for c in cases if c.exercise == ex.id and c.kind == "mutant"]
        for meta in criteria_of(ex.id):
            if not any(m.catches(meta.id) for m in mutants):
                seen = sorted({m.got_fails[meta.id] for m in mutants if meta.id in m.got_fails})
                problems.append(f"criterion {ex.id}/{meta.id} catches no mutant itself"
                                + (f" (it is only ever {', '.join(seen)})" if seen else ""))
    return problems


def discover(course: Course, catalog: Path) -> list[Case]:
    cases = [Case("solution", ex.id, "reference", course.solution(ex)) for ex in course.exercises]
    for kind, folder in (("variant", "variants"), ("mutant", "mutants")):
        for ex in course.exercises:
            for case_dir in sorted((catalog / folder / ex.id).glob("*/")):
                manifest = tomllib.loads((case_dir / "manifest.toml").read_text(encoding="utf-8"))
                cases.append(Case(kind, ex.id, case_dir.name, case_dir / ex.file, manifest.get("description", ""),
                                  expected_statuses(manifest), frozenset(manifest.get("may_fail", ()))))
    return cases


def rounds(cases: list[Case]) -> list[list[Case]]:
    """Pack cases into as few submissions as possible: at most one case per exercise in each."""
    packed: list[list[Case]] = []
    for case in cases:
        for group in packed:
            if all(c.exercise != case.exercise for c in group):
                group.append(case)
                break
        else:
            packed.append([case])
    return packed


def run_selftest(course: Course, catalog: Path, sandbox: Sandbox, progress=None) -> list[Case]:
    cases = discover(course, catalog)
    with tempfile.TemporaryDirectory(prefix="grader-selftest-") as tmp:
        for i, group in enumerate(rounds(cases)):
            submission = Path(tmp) / f"round-{i}"
            for case in group:
                ex = course.exercise(case.exercise)
                target = submission / ex.id / ex.file
                target.parent.mkdir(parents=True)
                shutil.copyfile(case.source, target)
            report = grade(course, submission, [c.exercise for c in group], sandbox)
            record(report, group)
            if progress:
                progress(i, group)
    return cases


def record(report: Report, group: list[Case]) -> None:
    by_exercise = {e.id: e for e in report.exercises}
    for case in group:
        for c in by_exercise[case.exercise].criteria:
            if c.status != "passed":
                case.got_fails[c.id] = c.status
                case.messages[c.id] = c.message["en"]


def matrix_markdown(course: Course, cases: list[Case]) -> str:
    """One table per exercise: a row per mutant, a column per criterion; ✗ caught (expected), · passed,
    ! a disagreement with the manifest."""
    from grader.judge.session import criteria_of

    lines = ["# Selftest matrix", "",
             "Every known-bug submission (mutant) against every criterion of its exercise. "
             "`✗` the criterion catches it (as its manifest expects), `·` it passes, `!` disagreement, "
             "parentheses: the verdict depends on the seed and either is accepted. "
             "Solutions and variants must pass everything.", ""]
    for ex in course.exercises:
        criteria = [m.id for m in criteria_of(ex.id)]
        mutants = [c for c in cases if c.exercise == ex.id and c.kind == "mutant"]
        others = [c for c in cases if c.exercise == ex.id and c.kind != "mutant"]
        lines += [f"## {ex.id}", "",
                  f"Correct implementations with full marks: {sum(not c.got_fails for c in others)} of {len(others)} "
                  f"({', '.join(c.name for c in others)}).", ""]
        lines.append("| mutant | " + " | ".join(f"`{c}`" for c in criteria) + " |")
        lines.append("|---|" + "---|" * len(criteria))
        for m in mutants:
            cells = []
            for c in criteria:
                failed, expected = c in m.got_fails, c in m.expected_fails
                if c in m.may_fail:
                    cells.append("(✗)" if failed else "(·)")
                else:
                    cells.append("✗" if failed and expected else "·" if not failed and not expected else "!")
            lines.append(f"| `{m.name}`: {m.description} | " + " | ".join(cells) + " |")
        lines.append("")
    return "\n".join(lines)
