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

WORDS = {
    "en": {"public": "public tests", "visible": "visible criteria", "none": "no public test file",
           "hidden": "{n} more criteria are judged when you submit.", "hint": "hint", "passed": "passed",
           "checking": "Checking {folder} ({n} exercises): public tests and visible criteria.",
           "untouched": "not started ({file} is the unchanged stub)",
           "all_good": "All public tests and visible criteria pass.", "fix": "Something above needs work.",
           "exercise": "exercise", "criterion": "criterion", "result": "result", "title": "Visible scorecard"},
    "zh": {"public": "公开测试", "visible": "可见评分项", "none": "没有公开测试文件",
           "hidden": "另有 {n} 项评分在提交后评判。", "hint": "提示", "passed": "通过",
           "checking": "检查 {folder}（{n} 道练习）：公开测试与可见评分项。",
           "untouched": "尚未开始（{file} 仍是原始模板）",
           "all_good": "公开测试与可见评分项全部通过。", "fix": "上面还有需要修改的地方。",
           "exercise": "练习", "criterion": "评分项", "result": "结果", "title": "可见评分卡"},
}


class CheckRefused(Exception):
    """`grader check` would check the wrong folder; the message says which folder to use."""


def submission_folder(course: Course, given: Path | None, cwd: Path) -> Path:
    """The folder to check: `given`, else `exercises/` in the current folder (a student repository's root).
    Never the course's own exercises/, whose files are the unchanged stubs."""
    folder = (given or cwd / "exercises").absolute()
    if given is None and not folder.is_dir():
        raise CheckRefused(f"no exercises/ folder in {cwd}: run grader check from the root of your repository "
                           "(the folder holding exercises/), or pass --submission DIR")
    if not folder.is_dir():
        raise CheckRefused(f"{folder} is not a folder laid out like exercises/")
    if folder.resolve() == (course.root / "exercises").resolve():
        raise CheckRefused(f"{folder} holds the course's own stubs, not a student's work: run grader check from "
                           "the root of a student repository, or pass --submission DIR")
    return folder


def public_tests(course: Course, exercise_id: str, submission: Path) -> tuple[bool, str]:
    """The course's public tests (not a copy the student may have edited) run on the student's file, in a
    folder of their own; (all passed, pytest's closing line)."""
    ex = course.exercise(exercise_id)
    tests = sorted((course.root / "exercises" / ex.id).glob("test_*.py"))
    student = submission / ex.id / ex.file
    if not tests:
        return True, ""
    if not student.is_file():
        return False, f"{ex.id}/{ex.file} is missing"
    with tempfile.TemporaryDirectory(prefix="grader-check-") as tmp:
        for t in tests:
            shutil.copyfile(t, Path(tmp) / t.name)
        shutil.copyfile(student, Path(tmp) / ex.file)
        done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", tmp],
                              capture_output=True, text=True, cwd=tmp, timeout=900)
    lines = [line for line in done.stdout.strip().splitlines() if line.strip()]
    summary = lines[-1].strip("= ") if lines else done.stderr.strip()[-200:]
    return done.returncode == 0, re.sub(r"\s+in [\d.]+s.*$", "", summary)


def untouched(course: Course, exercise_id: str, submission: Path) -> bool:
    """The exercise's file is missing or still the course's stub, byte for byte."""
    ex = course.exercise(exercise_id)
    student = submission / ex.id / ex.file
    return not student.is_file() or student.read_bytes() == course.stub(ex).read_bytes()


def run_check(course: Course, submission: Path, exercise_ids: list[str], lang: str) -> int:
    from grader.grading import grade
    from grader.render.safe_text import markdown_text, terminal_text
    from grader.sandbox.levels import choose, strict_missing

    w = WORDS[lang]
    print(w["checking"].format(folder=submission, n=len(exercise_ids)))
    started = [e for e in exercise_ids if not untouched(course, e, submission)]
    report = grade(course, submission, started, choose("basic" if strict_missing() else "strict")) if started else None
    results = {r.id: r for r in (report.exercises if report else [])}
    ok = not (set(exercise_ids) - set(started))
    rows: list[tuple[str, str, str]] = []   # the Markdown scorecard: exercise, criterion, result
    for exercise_id in exercise_ids:
        ex = course.exercise(exercise_id)
        if exercise_id not in results:   # one line, not every criterion saying the same
            print(f"· {ex.id}  " + w["untouched"].format(file=f"{ex.id}/{ex.file}"))
            rows.append((ex.id, "", "⬜ " + w["untouched"].format(file=f"{ex.id}/{ex.file}")))
            continue
        ex_result = results[exercise_id]
        passed, summary = public_tests(course, ex.id, submission)
        ok &= passed
        print(f"{'✔' if passed else '✘'} {ex.id}  {w['public']}: {terminal_text(summary) or w['none']}")
        rows.append((ex.id, w["public"], f"{'✅' if passed else '❌'} {markdown_text(summary or w['none'])}"))
        shown = [c for c in ex_result.criteria if ex.is_visible(c.id, c.kind)]
        if shown:
            print(f"    {w['visible']}: {sum(c.status == 'passed' for c in shown)} / {len(shown)} {w['passed']}")
        for c in shown:
            good = c.status == "passed"
            ok &= good
            print(f"      {'✔' if good else '✘'} {c.title[lang]}" + ("" if good else f" — {terminal_text(c.message)}"))
            if not good:
                print(f"          {w['hint']}: {c.hint[lang]}")
            rows.append((ex.id, c.title[lang], "✅" if good else f"❌ {markdown_text(c.message[lang])}"))
        hidden = len(ex_result.criteria) - len(shown) + ex.hidden_criteria
        if hidden:
            print("    " + w["hidden"].format(n=hidden))
    print()
    print(w["all_good"] if ok else w["fix"])
    write_step_summary(scorecard_markdown(rows, w, ok))
    return 0 if ok else 1


def scorecard_markdown(rows: list[tuple[str, str, str]], w: dict[str, str], ok: bool) -> str:
    lines = [f"## {w['title']}", "", f"| {w['exercise']} | {w['criterion']} | {w['result']} |", "|---|---|---|"]
    lines += [f"| `{ex}` | {criterion} | {result} |" for ex, criterion, result in rows]
    return "\n".join(lines + ["", w["all_good"] if ok else w["fix"], ""])


def write_step_summary(markdown: str) -> None:
    """A CI job's summary page ($GITHUB_STEP_SUMMARY), when the checker runs in one."""
    path = os.environ.get("GITHUB_STEP_SUMMARY")
    if path:
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(markdown + "\n")
