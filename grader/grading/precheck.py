"""`grader check`: what a student runs before submitting. The public tests, then the criteria the
instructor marked visible, explained; the rest are counted, not shown. No root needed.

The public tests always run in a plain child process (grader/grading/plain.py), beside the visible criteria's probes,
which run in the strict sandbox where it can be had and in plain children everywhere else (macOS, Windows, a
student's own account, containers): the same observations, judged the same way, give the same verdicts.

It runs from the root of a student repository (the handout's layout: `exercises/` beside `checker/`) and says
which folder it checked; it refuses to check the course's own stubs, which would only say "not started".
"""

from __future__ import annotations

import os
import re
import shutil
import sys
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from grader.course import Course
from grader.feedback import VISIBLE
from grader.i18n import Text, join, t, verbatim
from grader.grading.plain import OUTCOMES, PublicTests
from grader.render.labels import STATUS_MARK
from grader.render.safe_text import markdown_text, terminal_text
from grader.sandbox.scratch import remove_scratch
from grader.sandbox.staging import Staged, stage
from grader.worker.protocol import Status

if TYPE_CHECKING:
    from grader.report.model import Report
    from grader.sandbox.levels import Sandbox

# Set to 1: the plain route even where the strict sandbox could be had (grader/grading/plain.py)
PLAIN_SWITCH = "GRADER_CHECK_PLAIN"

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


# pytest's closing line counts outcomes ("1 failed, 7 passed"); each count said in the student's language
PYTEST_COUNTS = {
    "passed": lambda n: t("{n} passed", n=n), "failed": lambda n: t("{n} failed", n=n),
    "error": lambda n: t("{n} error", n=n), "errors": lambda n: t("{n} errors", n=n),
    "skipped": lambda n: t("{n} skipped", n=n), "xfailed": lambda n: t("{n} failed as expected", n=n),
    "xpassed": lambda n: t("{n} passed unexpectedly", n=n), "warning": lambda n: t("{n} warning", n=n),
    "warnings": lambda n: t("{n} warnings", n=n), "deselected": lambda n: t("{n} deselected", n=n),
}
_PYTEST_COUNT = re.compile(r"(\d+) (\w+)")


def counts_text(counts: dict[str, int]) -> Text:
    """pytest's outcome counts said as its closing line says them ("4 failed, 4 passed"), in every language."""
    parts = [f"{counts[o]} {o if o != 'error' or counts[o] == 1 else 'errors'}" for o in OUTCOMES if counts.get(o)]
    return pytest_counts(", ".join(parts)) if parts else t("no public test")


def pytest_counts(summary: str) -> Text:
    """pytest's summary ("1 failed, 7 passed") in words of every language; anything else (an error pytest
    printed) as pytest wrote it."""
    parts = [part.strip() for part in summary.split(",")]
    counts = [_PYTEST_COUNT.fullmatch(part) for part in parts]
    if not parts or not all(m and m.group(2) in PYTEST_COUNTS for m in counts):
        return verbatim(summary)
    return join((PYTEST_COUNTS[m.group(2)](int(m.group(1))) for m in counts if m), t(", "))


def check_sandbox() -> Sandbox | None:
    """The sandbox the visible criteria's probes run in, or None for the plain route (grader/grading/plain.py): on every
    system but Linux, where the strict sandbox cannot be had (it needs root and namespaces: a student's own
    account, a container), and where PLAIN_SWITCH asks for it. The basic level is never chosen here: at that level
    the student's code reads what the student can read anyway, and the public tests, which run it with no sandbox
    at all, are part of the same check."""
    if os.environ.get(PLAIN_SWITCH, "") not in ("", "0") or not sys.platform.startswith("linux"):
        return None
    from grader.sandbox.levels import choose, strict_missing

    return None if strict_missing() else choose("strict")


@dataclass
class Checked:
    """What `grader check` found: each exercise as staged, the visible criteria's report of those that ran (None
    when none could), and their public tests' outcome."""

    staged: dict[str, Staged]
    report: Report | None
    tests: dict[str, PublicTests]


def check(course: Course, submission: Path, exercise_ids: list[str], sandbox: Sandbox | None) -> Checked:
    """Stage the exercises and run what can run: the public tests in plain children, the probes in `sandbox` or,
    when it is None, in plain children too."""
    scratch = Path(tempfile.mkdtemp(prefix="grader-check-"))
    try:
        staged = {e: stage(submission, e, course.exercise(e).file, course.stub(course.exercise(e)), scratch / e)
                  for e in exercise_ids}
        runnable = [e for e in exercise_ids if staged[e].path is not None]
        plain = [_plain_exercise(course, e, staged[e], scratch, probes=sandbox is None) for e in runnable]
        report, tests = _checked(course, submission, runnable, staged, scratch, sandbox, plain)
    finally:
        remove_scratch(scratch)
    return Checked(staged, report, tests)


def run_check(course: Course, submission: Path, exercise_ids: list[str], lang: str) -> int:
    from grader.render.labels import LABELS

    words = LABELS[lang]
    print(terminal_text(t("Checking {folder} ({n} exercises): public tests and visible criteria.",
                          folder=verbatim(submission), n=len(exercise_ids)).render(lang)), flush=True)
    checked = check(course, submission, exercise_ids, check_sandbox())
    staged, report, tests = checked.staged, checked.report, checked.tests
    started = [e for e in exercise_ids if staged[e].status != Status.NOT_ATTEMPTED]
    results = {r.id: r for r in (report.exercises if report else [])}
    rows: list[tuple[str, str, str]] = []   # the Markdown scorecard: exercise, criterion, result
    ok = True
    for exercise_id in exercise_ids:
        ex = course.exercise(exercise_id)
        st = staged[exercise_id]
        if exercise_id not in started:   # one line, not every criterion saying the same
            said = t("not started ({why})", why=st.message).render(lang)
            print(f"· {ex.id}  {terminal_text(said)}")
            rows.append((ex.id, "", f"{STATUS_MARK['not_attempted']} {markdown_text(said)}"))
            continue
        if st.path is None:   # a link, a notebook with a magic, text that is not UTF-8: nothing of it runs
            ok = False
            said = st.message.render(lang) if st.message else ""
            print(f"✘ {ex.id}  {terminal_text(said)}")
            rows.append((ex.id, "", f"{STATUS_MARK['error']} {markdown_text(said)}"))
            continue
        ok &= _show_public_tests(ex.id, tests[exercise_id], words, lang, rows)
        ok &= _show_visible(ex, results[exercise_id], words, lang, rows)
    _show_answers(course, submission, exercise_ids, bool(started), lang, rows)
    total = len(exercise_ids)
    closing = (t("0 of {total} exercises started: nothing to check yet.", total=total) if not started else
               t("{started} of {total} exercises started: their public tests and visible criteria pass.",
                 started=len(started), total=total) if ok else
               t("{started} of {total} exercises started: something above needs work.", started=len(started),
                 total=total)).render(lang)
    print()
    print(closing)
    write_step_summary(scorecard_markdown(rows, words, closing))
    return 0 if ok else 1


def _plain_exercise(course: Course, exercise_id: str, staged: Staged, scratch: Path, probes: bool):
    """The exercise for the plain route: its job, and a folder holding the course's public tests (not a copy the
    student may have edited) next to the student's file as staged."""
    from grader.grading.pipeline import job_for
    from grader.grading.plain import TESTS_INI, Exercise
    from grader.models.host import ModelHost, served_file, served_seed

    ex = course.exercise(exercise_id)
    assert staged.path is not None, "only a staged exercise runs"
    folder = scratch / "public" / ex.id
    folder.mkdir(parents=True)
    for test in sorted((course.root / "exercises" / ex.id).glob("test_*.py")):
        shutil.copyfile(test, folder / test.name)
    shutil.copyfile(staged.path, folder / ex.file)
    (folder / TESTS_INI).write_text("[pytest]\n", encoding="utf-8")
    job = job_for(ex, staged.path).request(boxed=False, course_seed=course.seed, scratch=scratch)
    served = served_file(ex.probes_file)
    if served is not None:   # the probes' child starts the model process itself (grader/models/handles.py)
        seed = served_seed(course.seed, ex.id, staged.path)
        job["models"] = {"spawn": ModelHost(ex.id, served, seed, scratch).setup()}
    return Exercise(job, ex.module_name, folder, ex.limits, probes)


def _checked(course: Course, submission: Path, runnable: list[str], staged: dict[str, Staged], scratch: Path,
             sandbox: Sandbox | None, plain: list) -> tuple[Report | None, dict]:
    """The visible criteria's report and the public tests' outcome of the exercises that can run. In the sandbox,
    the probes run there while the public tests run beside them; on the plain route both run in plain children,
    and the judge takes each exercise as its probes end."""
    import datetime as dt
    import time

    from grader.grading import plain as plain_route
    from grader.grading.pipeline import Probed, grade, judged, reference_folders

    if not runnable:
        return None, {}
    tests: dict = {}
    failures: list[BaseException] = []
    if sandbox is not None:
        beside = threading.Thread(target=_into, args=(tests, failures, plain_route.check, plain, scratch),
                                  name="public-tests")
        beside.start()
        try:
            report = grade(course, submission, runnable, sandbox)
        finally:
            beside.join()
    else:
        from grader.sandbox.levels import choose

        exercises = [course.exercise(e) for e in runnable]
        probed = Probed(course, submission, exercises, choose("none"), reference_folders(course, exercises), scratch,
                        {e: staged[e] for e in runnable},
                        dt.datetime.now(dt.UTC).isoformat(timespec="seconds"), time.monotonic())

        def probe_and_test() -> None:
            try:
                _into(tests, failures, plain_route.check, plain, scratch, probed.add)
            finally:
                probed.close()

        beside = threading.Thread(target=probe_and_test, name="plain-route")
        beside.start()
        try:
            report = judged(probed)
        finally:
            beside.join()
    if failures:
        raise failures[0]
    return report, tests


def _into(tests: dict, failures: list, fn, *args) -> None:
    try:
        tests.update(fn(*args))
    except BaseException as exc:  # noqa: BLE001 - re-raised in the checking thread
        failures.append(exc)


def _show_public_tests(exercise_id: str, tests, words: dict[str, str], lang: str, rows: list) -> bool:
    """The public tests' line (and one line for each that failed, with pytest's reason); whether they passed."""
    said = (tests.problem or counts_text(tests.counts)).render(lang)
    mark = "✔" if tests.passed else "✘"
    print(f"{mark} {exercise_id}  {words['public_tests']}{words['colon']}{terminal_text(said)}")
    rows.append((exercise_id, words["public_tests"],
                 f"{STATUS_MARK['passed' if tests.passed else 'failed']} {markdown_text(said)}"))
    for name, reason in tests.failures:
        print(f"      ✘ {terminal_text(name)} — {terminal_text(reason)}")
        rows.append((exercise_id, f"{words['public_tests']}{words['colon']}{markdown_text(name)}",
                     f"{STATUS_MARK['failed']} {markdown_text(reason)}"))
    return tests.passed


def _show_visible(ex, result, words: dict[str, str], lang: str, rows: list) -> bool:
    """The visible criteria of one exercise, explained where they did not pass; whether all passed."""
    ok = True
    shown = [c for c in result.criteria if ex.gradescope_visibility(c.id, c.kind) == VISIBLE]   # grader.feedback
    if shown:
        count = t("{passed} / {total} passed", passed=sum(c.status == Status.PASSED for c in shown), total=len(shown))
        print(f"    {words['visible_criteria']}{words['colon']}{count.render(lang)}")
    for c in shown:
        good = c.status == Status.PASSED
        ok &= good
        print(f"      {'✔' if good else '✘'} {terminal_text(c.title[lang])}"
              + ("" if good else f" — {terminal_text(c.message[lang])}"))
        if not good:
            print(f"          {words['hint']}{words['colon']}{terminal_text(c.hint[lang])}")
        mark = STATUS_MARK[Status.PASSED] if good else f"{STATUS_MARK[c.status]} {markdown_text(c.message[lang])}"
        rows.append((ex.id, markdown_text(c.title[lang]), mark))
    hidden = len(result.criteria) - len(shown) + ex.hidden_criteria
    if hidden:
        print("    " + t("{n} more criteria are judged when you submit.", n=hidden).render(lang))
    return ok


def _show_answers(course: Course, submission: Path, exercise_ids: list[str], started: bool, lang: str,
                  rows: list) -> None:
    """The written answers still empty, and what in an answers file or notebook names no question; the exit status
    stays the code's (answers are graded by a reviewer, and a student writes them last). Nothing started and nothing
    written is a fresh handout: its check stays one line an exercise."""
    from grader.grading.answers import ANSWERS_FILE, read_answers

    asked = [course.exercise(e) for e in exercise_ids if course.exercise(e).questions]
    answers = {ex.id: read_answers(submission, ex) for ex in asked}
    written = any(len(answers[ex.id].empty()) < len(ex.questions) or answers[ex.id].problems for ex in asked)
    if not asked or not (started or written):
        return
    print()
    print(t("Written answers:").render(lang))
    for ex in asked:
        read = answers[ex.id]
        file = f"{ex.id}/{ANSWERS_FILE}"
        said = [("·", "not_attempted", t("{file}: {question} is empty", file=file, question=q))
                for q in read.empty()]
        said += [("✘", "error", problem) for problem in read.problems]
        if not said:
            said = [("✔", "passed", t("{file}: every question has an answer", file=file))]
        for mark, status, text in said:
            line = text.render(lang)
            print(f"{mark} {terminal_text(line)}")
            rows.append((ex.id, t("Written answers").render(lang), f"{STATUS_MARK[status]} {markdown_text(line)}"))


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
