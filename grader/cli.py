"""The `grader` command."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from grader.course import CourseError, load_course

EXIT_OK, EXIT_BELOW_THRESHOLD, EXIT_USAGE = 0, 1, 2


class UsageError(Exception):
    """Bad arguments or an unreadable submission: one line, exit status 2."""


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.handler(args)
    except (UsageError, CourseError) as exc:
        print(f"grader: {exc}", file=sys.stderr)
        return EXIT_USAGE


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="grader", description="Grade Transformer course submissions.")
    parser.add_argument("--course", type=Path, default=None, help="folder holding course.toml (default: this checkout)")
    sub = parser.add_subparsers(dest="command", required=True)

    grade = sub.add_parser("grade", help="grade one submission and write report.json, report.html, scorecard.md")
    grade.add_argument("submission", nargs="?", type=Path, default=None,
                       help="a folder laid out like exercises/ (default: the bundled sample submission)")
    grade.add_argument("--exercise", action="append", dest="exercises", metavar="ID",
                       help="grade only this exercise (repeatable)")
    grade.add_argument("--out", type=Path, default=None, help="report folder (default: reports/<submission-name>/)")
    grade.add_argument("--lang", choices=("en", "zh"), default="en")
    grade.add_argument("--sandbox", choices=("strict", "basic", "none"), default="strict",
                       help="isolation of student code; strict needs root, and a weaker level must be asked for")
    grade.add_argument("--fail-under", type=float, default=None, metavar="PCT",
                       help="exit 1 when the total is below PCT percent")
    grade.set_defaults(handler=command_grade)

    selftest = sub.add_parser("selftest", help="grade every solution, variant and mutant; fail on any false verdict")
    selftest.add_argument("--catalog", type=Path, default=None, help="folder holding variants/ and mutants/ (default: tests/)")
    selftest.add_argument("--matrix", type=Path, default=None, help="also write the mutant x criterion matrix (Markdown) here")
    selftest.set_defaults(handler=command_selftest)
    return parser


def command_grade(args) -> int:
    from grader.grading import grade, hidden_paths
    from grader.render.terminal import render_table
    from grader.reporting import write_reports
    from grader.sandbox.levels import SandboxUnavailable, choose

    course = load_course(args.course)
    submission = (args.submission or course.root / "examples" / "submissions" / "sample").absolute()
    if not submission.is_dir() or not os.access(submission, os.R_OK | os.X_OK):
        raise UsageError(f"submission {submission} is not a readable folder")
    exercise_ids = args.exercises or [e.id for e in course.exercises]
    for ex in exercise_ids:
        course.exercise(ex)
    out = (args.out or course.root / "reports" / submission.name).absolute()
    try:
        sandbox = choose(args.sandbox, hidden_paths(course, [out, submission]))
    except SandboxUnavailable as exc:
        raise UsageError(f"{exc}; pass --sandbox basic to grade with weaker isolation") from None
    report = grade(course, submission, exercise_ids, sandbox)
    written = write_reports(report, out, course.root / "templates", args.lang)
    print(render_table(report, args.lang))
    print(f"\nreports: {', '.join(str(p) for p in written)}")
    if args.fail_under is not None and report.percent < args.fail_under:
        print(f"grader: {report.percent:g}% is below --fail-under {args.fail_under:g}%", file=sys.stderr)
        return EXIT_BELOW_THRESHOLD
    return EXIT_OK


def command_selftest(args) -> int:
    from grader.grading import hidden_paths
    from grader.sandbox.levels import choose, strict_missing
    from grader.selftest import matrix_markdown, run_selftest

    course = load_course(args.course)
    catalog = args.catalog or course.root / "tests"
    sandbox = choose("basic" if strict_missing() else "strict", hidden_paths(course, []))

    def progress(i, group):
        print(f"round {i + 1}: " + ", ".join(f"{c.kind} {c.label}" for c in group), flush=True)

    cases = run_selftest(course, catalog, sandbox, progress)
    matrix = matrix_markdown(course, cases)
    if args.matrix:
        from grader.reporting import write_atomic

        write_atomic(args.matrix, matrix)
    print(matrix)
    problems = [p for case in cases for p in case.problems()]
    counts = {k: sum(c.kind == k for c in cases) for k in ("solution", "variant", "mutant")}
    print(f"\n{counts['solution']} solutions, {counts['variant']} variants, {counts['mutant']} mutants; "
          f"{len(problems)} problems")
    for p in problems:
        print("  " + p)
    return 1 if problems else 0
