"""`grader selftest`: grade every reference solution, correct variant and known-bug mutant, and prove that
each criterion is right. A solution or variant losing a point is a false failure; a mutant with full marks
is an escape; a mutant failing a criterion its manifest does not name is a criterion that misfires.

Catalog layout, beside each exercise's solution: solutions/<exercise>/variants/<name>/<file> (a whole file: a correct
implementation written another way) and solutions/<exercise>/mutants/<bug>/change.diff (a unified diff against
solutions/<exercise>/<file>, applied
when the selftest runs, so that a mutant always tests today's solution with its one bug; a diff that no longer
applies stops the selftest and names the mutant). Each folder has a manifest.toml: `description`, and for mutants
the status each criterion it does not pass must reach: `fails = [...]` (`failed`: the code ran and did the wrong
thing), `errors = [...]` (`error`: the code raised, and raising is the bug), `blocked = [...]` (a prerequisite
the bug breaks did not pass), and optionally `may_fail`, criteria whose verdict on that bug depends on the course
seed (accepted either way). A mutant is caught only by a criterion that reaches `failed` or `error` (or a
`crashed` it names); a `grader_error` is always a problem.

Cases are graded in rounds, one case per exercise in each round's submission, by a warm grading process
(`grader.batch.warm`, as `grader batch` uses): its next sandbox starts while the round before is judged.
`grader.review.mutation` grades generated mutants the same way.
"""

from __future__ import annotations

import json
import tempfile
import threading
import tomllib
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from grader.course import MUTANTS, VARIANTS, Course
from grader.sandbox.levels import Sandbox
from grader.review.unidiff import PatchError, apply_diff
from grader.worker.protocol import Status

MUTANT_DIFF = "change.diff"   # a mutant's one bug, as a unified diff against the solution
CONVERT_COMMAND = "python scripts/mutants_to_diffs.py"


class CatalogError(Exception):
    """The catalog cannot be read as it is: the message names every folder at fault and what to do."""


@dataclass
class Case:
    kind: str                 # solution, variant or mutant (`grader.review.mutation` adds its generated ones)
    exercise: str
    name: str
    file: str                 # the student file's name
    text: str                 # its content
    description: str = ""
    expected: dict[str, str] = field(default_factory=dict)   # criterion -> the status the manifest names
    may_fail: frozenset[str] = frozenset()    # criteria a mutant fails on some seeds and not on others
    got_fails: dict[str, str] = field(default_factory=dict)   # criterion -> status, for what did not pass
    messages: dict[str, str] = field(default_factory=dict)
    failure: str | None = None   # why the round holding this case produced no report

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
        return status in CATCHING or (status == Status.CRASHED and self.expected.get(criterion) == Status.CRASHED)

    def problems(self) -> list[str]:
        got = set(self.got_fails)
        if self.failure:
            return [f"{self.kind} {self.label} was not graded: {self.failure}"]
        if self.kind in ("solution", "variant"):
            return [f"{self.kind} {self.label} lost {c} ({self.got_fails[c]}): {self.messages[c]}" for c in sorted(got)]
        found = []
        if not any(self.catches(c) for c in self.got_fails):
            found.append(f"mutant {self.label} escaped: no criterion failed or raised on it "
                         f"({', '.join(f'{c} {s}' for c, s in sorted(self.got_fails.items())) or 'full marks'})")
        for c in sorted(got - self.expected_fails - self.may_fail):
            found.append(f"mutant {self.label} fails {c} ({self.got_fails[c]}), which its manifest does not expect: "
                         f"{self.messages[c]}")
        for c in sorted(self.expected_fails - got):
            found.append(f"mutant {self.label} passes {c}, which its manifest says it fails")
        for c in sorted(got):
            if self.got_fails[c] == Status.ERROR and not blames_the_student_fairly(self.messages[c], self.file):
                found.append(f"mutant {self.label}: {c} is reported as the student's exception, but it was raised "
                             f"outside {self.file} and is no breach of the contract: {self.messages[c]}")
        for c in sorted(self.expected_fails & got):
            if self.got_fails[c] != self.expected[c]:
                found.append(f"mutant {self.label}: {c} is {self.got_fails[c]}, its manifest says {self.expected[c]}: "
                             f"{self.messages[c]}")
        return found


# The statuses that mean a criterion itself detected a bug; blocked, crashed, timeout and grader_error do not.
CATCHING = (Status.FAILED, Status.ERROR)
MANIFEST_STATUSES = {"fails": Status.FAILED, "errors": Status.ERROR, "crashes": Status.CRASHED,
                     "blocked": Status.BLOCKED}


def blames_the_student_fairly(message: str, student_file: str) -> bool:
    """Whether an `error` verdict rests on the student's code: the exception names a frame of the student's file,
    or a probe found a breach of the contract in what that code returned."""
    return f" at {student_file}:" in message or "your code breaks the contract" in message


def expected_statuses(manifest: dict) -> dict[str, str]:
    """criterion -> status, from a mutant manifest's `fails`, `errors` and `blocked` lists."""
    return {c: status for key, status in MANIFEST_STATUSES.items() for c in manifest.get(key, ())}


def coverage_problems(course: Course, cases: list[Case]) -> list[str]:
    """Every criterion must itself catch some mutant (reach `failed` or `error` on it): one that is only ever
    blocked, crashed or grader-faulted has never been shown to detect anything, and a course with no mutant for it
    has never shown it either. (A solution short of full marks is its case's problem: `Case.problems`.)"""
    from grader.judge.listing import criteria_of

    problems = []
    for ex in course.exercises:
        mutants = [c for c in cases if c.exercise == ex.id and c.kind == "mutant"]
        for meta in criteria_of(ex.id, course.solutions):
            if not any(m.catches(meta.id) for m in mutants):
                seen = sorted({m.got_fails[meta.id] for m in mutants if meta.id in m.got_fails})
                problems.append(f"criterion {ex.id}/{meta.id} catches no mutant itself"
                                + (f" (it is only ever {', '.join(seen)})" if seen else ""))
    return problems


def mutant_text(course: Course, exercise_id: str, folder: Path) -> str:
    """The mutant in `folder`: its change.diff applied to today's solution. CatalogError when the folder holds a
    whole-file copy instead (the old layout) or its diff no longer applies."""
    ex = course.exercise(exercise_id)
    copies = sorted(p.name for p in folder.glob("*.py"))
    if copies:
        raise CatalogError(f"{folder} holds a whole-file mutant ({', '.join(copies)}): a mutant is a {MUTANT_DIFF} "
                           f"against solutions/{ex.id}/{ex.file}; `{CONVERT_COMMAND}` turns copies into diffs")
    diff = folder / MUTANT_DIFF
    if not diff.is_file():
        raise CatalogError(f"{folder} has no {MUTANT_DIFF}: a mutant is a unified diff against "
                           f"solutions/{ex.id}/{ex.file}")
    solution = course.solution(ex).read_text(encoding="utf-8")
    try:
        text = apply_diff(solution, diff.read_text(encoding="utf-8"))
    except PatchError as exc:
        raise CatalogError(f"{diff} no longer applies to solutions/{ex.id}/{ex.file}: {exc}; remake the mutant "
                           f"against today's solution") from None
    if text == solution:
        raise CatalogError(f"{diff} changes nothing in solutions/{ex.id}/{ex.file}")
    return text


def catalog_mutants(course: Course, catalog: Path, exercise_id: str) -> dict[str, str]:
    """The exercise's catalog mutants (`catalog`: a course's solutions folder), name -> file content, in name order."""
    return {folder.name: mutant_text(course, exercise_id, folder)
            for folder in sorted((catalog / exercise_id / MUTANTS).glob("*/"))}


def discover(course: Course, catalog: Path) -> list[Case]:
    """Every solution, variant and mutant (`catalog`: the folder holding <exercise>/variants and <exercise>/mutants,
    the course's solutions folder unless told); CatalogError naming every mutant that cannot be built."""
    missing = [str(course.solution(ex)) for ex in course.exercises if not course.solution(ex).is_file()]
    if missing:   # (load_course refuses a course without an exercise's probes or criteria)
        raise CatalogError("the course lacks " + ", ".join(missing) + ": the reference each exercise's criteria are "
                           "proven on")
    cases = [Case("solution", ex.id, "reference", ex.file, course.solution(ex).read_text(encoding="utf-8"))
             for ex in course.exercises]
    broken = []
    for kind, folder in (("variant", VARIANTS), ("mutant", MUTANTS)):
        for ex in course.exercises:
            for case_dir in sorted((catalog / ex.id / folder).glob("*/")):
                manifest = tomllib.loads((case_dir / "manifest.toml").read_text(encoding="utf-8"))
                try:
                    text = (mutant_text(course, ex.id, case_dir) if kind == "mutant"
                            else (case_dir / ex.file).read_text(encoding="utf-8"))
                except CatalogError as exc:
                    broken.append(str(exc))
                    continue
                cases.append(Case(kind, ex.id, case_dir.name, ex.file, text, manifest.get("description", ""),
                                  expected_statuses(manifest), frozenset(manifest.get("may_fail", ()))))
    if broken:
        raise CatalogError("\n".join(broken))
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


def grade_cases(course: Course, cases: list[Case], sandbox: Sandbox,
                progress: Callable[[int, int, list[Case]], None] | None = None) -> None:
    """Grade every case, in rounds, and record each one's verdicts on it. One warm grading process serves all
    rounds, two in flight: while one round is judged, the next one's probes run in a sandbox started ahead."""
    from grader.batch.pool import PIPELINE, time_limit
    from grader.batch.warm import GradingTimeout, WarmGrader, WarmGraderDied

    packed = rounds(cases)
    warm = WarmGrader(course.root, sandbox.level)
    left = [len(packed)]
    lock = threading.Lock()
    done = [0]

    def grade_round(i: int, group: list[Case], tmp: Path) -> None:
        submission = tmp / f"round-{i}"
        for case in group:
            target = submission / case.exercise / case.file
            target.parent.mkdir(parents=True)
            target.write_text(case.text, encoding="utf-8")
        with lock:
            left[0] -= 1
            more = left[0] > 0
        try:
            reply = warm.grade(submission, [c.exercise for c in group], "en", time_limit(course), more)
        except (GradingTimeout, WarmGraderDied) as exc:
            reply = {"error": str(exc)}
        if "error" in reply:
            for case in group:
                case.failure = str(reply["error"])
        else:
            record(json.loads(reply["files"]["report.json"]), group)
        if progress:
            with lock:
                done[0] += 1
                progress(done[0], len(packed), group)

    try:
        with tempfile.TemporaryDirectory(prefix="grader-selftest-") as tmp, \
                ThreadPoolExecutor(max_workers=PIPELINE) as pool:
            for future in [pool.submit(grade_round, i, group, Path(tmp)) for i, group in enumerate(packed)]:
                future.result()
    finally:
        warm.close()


def run_selftest(course: Course, catalog: Path, sandbox: Sandbox, progress=None) -> list[Case]:
    cases = discover(course, catalog)
    grade_cases(course, cases, sandbox, progress)
    return cases


def record(report: dict, group: list[Case]) -> None:
    """Each case's criteria that did not pass, from the report (JSON) of the round that held it."""
    by_exercise = {e["id"]: e for e in report["exercises"]}
    for case in group:
        for c in by_exercise[case.exercise]["criteria"]:
            if c["status"] != Status.PASSED:
                case.got_fails[c["id"]] = c["status"]
                case.messages[c["id"]] = c["message"]["en"]


def matrix_markdown(course: Course, cases: list[Case]) -> str:
    """One table per exercise: a row per mutant, a column per criterion; ✗ caught (expected), · passed,
    ! a disagreement with the manifest."""
    from grader.judge.listing import criteria_of

    lines = ["# Selftest matrix", "",
             "Every known-bug submission (mutant) against every criterion of its exercise. "
             "`✗` the criterion catches it (as its manifest expects), `·` it passes, `!` disagreement, "
             "parentheses: the verdict depends on the seed and either is accepted. "
             "Solutions and variants must pass everything.", ""]
    for ex in course.exercises:
        criteria = [m.id for m in criteria_of(ex.id, course.solutions)]
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
