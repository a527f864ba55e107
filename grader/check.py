"""`grader check`: what a student runs before submitting. The public tests, then the criteria the
instructor marked visible, explained; the rest are counted, not shown. No root needed.

It runs from the root of a student repository (the handout's layout: `exercises/` beside `checker/`) and says
which folder it checked; it refuses to check the course's own stubs, which would only say "not started".
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from grader.course import Course
from grader.i18n import Text, join, t, verbatim

class CheckRefused(Exception):
    """`grader check` would check the wrong folder; `said` tells the student which folder to use."""

    def __init__(self, said: Text):
        super().__init__(str(said))
        self.said = said


def submission_folder(course: Course, given: Path | None, cwd: Path) -> Path:
    """The folder to check: `given`, else `exercises/` in the current folder (a student repository's root).
    Never the course's own exercises/, whose files are the unchanged stubs."""
    folder = (given or cwd / "exercises").absolute()
    if given is None and not folder.is_dir():
        raise CheckRefused(t("no exercises/ folder in {folder}: run grader check from the root of your repository "
                             "(the folder holding exercises/), or pass --submission DIR", folder=verbatim(cwd)))
    if not folder.is_dir():
        raise CheckRefused(t("{folder} is not a folder laid out like exercises/", folder=verbatim(folder)))
    if folder.resolve() == (course.root / "exercises").resolve():
        raise CheckRefused(t("{folder} holds the course's own stubs, not a student's work: run grader check from "
                             "the root of a student repository, or pass --submission DIR", folder=verbatim(folder)))
    return folder


def public_tests(course: Course, exercise_id: str, submission: Path) -> tuple[bool, Text | None]:
    """The course's public tests (not a copy the student may have edited) run on the student's file, in a
    folder of their own; (all passed, pytest's closing line, None when the exercise has no public test)."""
    ex = course.exercise(exercise_id)
    tests = sorted((course.root / "exercises" / ex.id).glob("test_*.py"))
    student = submission / ex.id / ex.file
    if not tests:
        return True, None
    if not student.is_file():
        return False, t("{file} is missing", file=verbatim(f"{ex.id}/{ex.file}"))
    with tempfile.TemporaryDirectory(prefix="grader-check-") as tmp:
        for test in tests:
            shutil.copyfile(test, Path(tmp) / test.name)
        shutil.copyfile(student, Path(tmp) / ex.file)
        done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", tmp],
                              capture_output=True, text=True, cwd=tmp, timeout=900)
    lines = [line for line in done.stdout.strip().splitlines() if line.strip()]
    summary = lines[-1].strip("= ") if lines else done.stderr.strip()[-200:]
    return done.returncode == 0, pytest_counts(re.sub(r"\s+in [\d.]+s.*$", "", summary))


# pytest's closing line counts outcomes ("1 failed, 7 passed"); each count said in the student's language
PYTEST_COUNTS = {
    "passed": lambda n: t("{n} passed", n=n), "failed": lambda n: t("{n} failed", n=n),
    "error": lambda n: t("{n} error", n=n), "errors": lambda n: t("{n} errors", n=n),
    "skipped": lambda n: t("{n} skipped", n=n), "xfailed": lambda n: t("{n} failed as expected", n=n),
    "xpassed": lambda n: t("{n} passed unexpectedly", n=n), "warning": lambda n: t("{n} warning", n=n),
    "warnings": lambda n: t("{n} warnings", n=n), "deselected": lambda n: t("{n} deselected", n=n),
}
_PYTEST_COUNT = re.compile(r"(\d+) (\w+)")


def pytest_counts(summary: str) -> Text:
    """pytest's summary ("1 failed, 7 passed") in words of every language; anything else (an error pytest
    printed) as pytest wrote it."""
    parts = [part.strip() for part in summary.split(",")]
    counts = [_PYTEST_COUNT.fullmatch(part) for part in parts]
    if not parts or not all(m and m.group(2) in PYTEST_COUNTS for m in counts):
        return verbatim(summary)
    return join((PYTEST_COUNTS[m.group(2)](int(m.group(1))) for m in counts), t(", "))


def untouched(course: Course, exercise_id: str, submission: Path) -> bool:
    """The exercise's file is missing or still the course's stub, byte for byte."""
    ex = course.exercise(exercise_id)
    student = submission / ex.id / ex.file
    return not student.is_file() or student.read_bytes() == course.stub(ex).read_bytes()


def run_check(course: Course, submission: Path, exercise_ids: list[str], lang: str) -> int:
    from grader.grading import grade
    from grader.render.labels import LABELS, STATUS_MARK
    from grader.render.safe_text import markdown_text, terminal_text
    from grader.sandbox.levels import choose, strict_missing

    words = LABELS[lang]
    print(terminal_text(t("Checking {folder} ({n} exercises): public tests and visible criteria.",
                          folder=verbatim(submission), n=len(exercise_ids)).render(lang)))
    started = [e for e in exercise_ids if not untouched(course, e, submission)]
    report = grade(course, submission, started, choose("basic" if strict_missing() else "strict")) if started else None
    results = {r.id: r for r in (report.exercises if report else [])}
    ok = not (set(exercise_ids) - set(started))
    rows: list[tuple[str, str, str]] = []   # the Markdown scorecard: exercise, criterion, result
    for exercise_id in exercise_ids:
        ex = course.exercise(exercise_id)
        if exercise_id not in results:   # one line, not every criterion saying the same
            said = t("not started ({file} is the unchanged stub)", file=verbatim(f"{ex.id}/{ex.file}")).render(lang)
            print(f"· {ex.id}  {said}")
            rows.append((ex.id, "", f"{STATUS_MARK['not_attempted']} {markdown_text(said)}"))
            continue
        ex_result = results[exercise_id]
        passed, summary = public_tests(course, ex.id, submission)
        ok &= passed
        said = (summary or t("no public test file")).render(lang)
        print(f"{'✔' if passed else '✘'} {ex.id}  {words['public_tests']}{words['colon']}{terminal_text(said)}")
        rows.append((ex.id, words["public_tests"], f"{STATUS_MARK['passed' if passed else 'failed']} {markdown_text(said)}"))
        shown = [c for c in ex_result.criteria if ex.is_visible(c.id, c.kind)]
        if shown:
            count = t("{passed} / {total} passed", passed=sum(c.status == "passed" for c in shown), total=len(shown))
            print(f"    {words['visible_criteria']}{words['colon']}{count.render(lang)}")
        for c in shown:
            good = c.status == "passed"
            ok &= good
            print(f"      {'✔' if good else '✘'} {terminal_text(c.title[lang])}"
                  + ("" if good else f" — {terminal_text(c.message[lang])}"))
            if not good:
                print(f"          {words['hint']}{words['colon']}{terminal_text(c.hint[lang])}")
            rows.append((ex.id, markdown_text(c.title[lang]),
                         STATUS_MARK["passed"] if good else f"{STATUS_MARK[c.status]} {markdown_text(c.message[lang])}"))
        hidden = len(ex_result.criteria) - len(shown) + ex.hidden_criteria
        if hidden:
            print("    " + t("{n} more criteria are judged when you submit.", n=hidden).render(lang))
    closing = (t("All public tests and visible criteria pass.") if ok else t("Something above needs work.")).render(lang)
    print()
    print(closing)
    write_step_summary(scorecard_markdown(rows, words, closing))
    return 0 if ok else 1


def scorecard_markdown(rows: list[tuple[str, str, str]], words: dict[str, str], closing: str) -> str:
    lines = [f"## {words['visible_scorecard']}", "",
             f"| {words['exercise']} | {words['criterion']} | {words['result']} |", "|---|---|---|"]
    lines += [f"| `{ex}` | {criterion} | {result} |" for ex, criterion, result in rows]
    return "\n".join(lines + ["", closing, ""])


def write_step_summary(markdown: str) -> None:
    """A CI job's summary page ($GITHUB_STEP_SUMMARY), when the checker runs in one."""
    path = os.environ.get("GITHUB_STEP_SUMMARY")
    if path:
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(markdown + "\n")
