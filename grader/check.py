"""`grader check`: what a student runs before submitting. The public tests, then the criteria the
instructor marked visible, explained; the rest are counted, not shown. No root needed."""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
import sys
from pathlib import Path

from grader.course import Course

WORDS = {
    "en": {"public": "public tests", "visible": "visible criteria", "none": "no public test file",
           "hidden": "{n} more criteria are judged when you submit.", "hint": "hint", "passed": "passed",
           "all_good": "All public tests and visible criteria pass.", "fix": "Something above needs work."},
    "zh": {"public": "公开测试", "visible": "可见评分项", "none": "没有公开测试文件",
           "hidden": "另有 {n} 项评分在提交后评判。", "hint": "提示", "passed": "通过",
           "all_good": "公开测试与可见评分项全部通过。", "fix": "上面还有需要修改的地方。"},
}


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


def run_check(course: Course, submission: Path, exercise_ids: list[str], lang: str) -> int:
    from grader.grading import grade, hidden_paths
    from grader.sandbox.levels import choose, strict_missing

    w = WORDS[lang]
    sandbox = choose("basic" if strict_missing() else "strict", hidden_paths(course, [submission]))
    report = grade(course, submission, exercise_ids, sandbox)
    ok = True
    for ex_result in report.exercises:
        ex = course.exercise(ex_result.id)
        passed, summary = public_tests(course, ex.id, submission)
        ok &= passed
        print(f"{'✔' if passed else '✘'} {ex.id}  {w['public']}: {summary or w['none']}")
        shown = [c for c in ex_result.criteria if ex.is_visible(c.id, c.kind)]
        if shown:
            print(f"    {w['visible']}: {sum(c.status == 'passed' for c in shown)} / {len(shown)} {w['passed']}")
        for c in shown:
            good = c.status == "passed"
            ok &= good
            print(f"      {'✔' if good else '✘'} {c.title[lang]}" + ("" if good else f" — {c.message}"))
            if not good:
                print(f"          {w['hint']}: {c.hint[lang]}")
        hidden = len(ex_result.criteria) - len(shown)
        if hidden:
            print("    " + w["hidden"].format(n=hidden))
    print()
    print(w["all_good"] if ok else w["fix"])
    return 0 if ok else 1
