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
    grade.add_argument("--format", default="json,html,md", type=formats_argument,
                       help="comma-separated: json, html, md, gradescope (results.json), junit (junit.xml)")
    grade.set_defaults(handler=command_grade)

    batch = sub.add_parser("batch", help="grade a folder of student folders or zip files into a gradebook")
    batch.add_argument("submissions", type=Path, help="a folder whose entries are student folders or .zip files")
    batch.add_argument("--out", type=Path, required=True, help="gradebook.sqlite, grades.csv, class.html, students/")
    batch.add_argument("--jobs", type=int, default=max(1, (os.cpu_count() or 1)), help="submissions graded at once")
    batch.add_argument("--regrade", action="store_true", help="grade again what the gradebook already holds")
    batch.add_argument("--sandbox", choices=("strict", "basic"), default="strict")
    batch.add_argument("--lang", choices=("en", "zh"), default="en")
    batch.set_defaults(handler=command_batch)

    handout = sub.add_parser("handout", help="write the student repository: exercises, public tests, a CI workflow")
    handout.add_argument("out", type=Path)
    handout.set_defaults(handler=command_handout)

    check = sub.add_parser("check", help="for students: public tests and the visible criteria, no root needed")
    check.add_argument("exercise", nargs="?", default=None, help="one exercise (default: every exercise)")
    check.add_argument("--submission", type=Path, default=None,
                       help="folder laid out like exercises/ (default: ./exercises, else the course's exercises/)")
    check.add_argument("--lang", choices=("en", "zh"), default="en")
    check.set_defaults(handler=command_check)

    bundle = sub.add_parser("gradescope", help="build a Gradescope autograder bundle (setup.sh, run_autograder)")
    bundle.add_argument("out", type=Path, help="the .zip to write")
    bundle.set_defaults(handler=command_gradescope)

    gs_run = sub.add_parser("gradescope-run", help=argparse.SUPPRESS)
    gs_run.add_argument("--root", type=Path, default=Path("/autograder"))
    gs_run.set_defaults(handler=command_gradescope_run)

    selftest = sub.add_parser("selftest", help="grade every solution, variant and mutant; fail on any false verdict")
    selftest.add_argument("--catalog", type=Path, default=None, help="folder holding variants/ and mutants/ (default: tests/)")
    selftest.add_argument("--matrix", type=Path, default=None, help="also write the mutant x criterion matrix (Markdown) here")
    selftest.set_defaults(handler=command_selftest)
    return parser


def formats_argument(text: str) -> tuple[str, ...]:
    from grader.reporting import FORMATS

    chosen = tuple(dict.fromkeys(f.strip() for f in text.split(",") if f.strip()))
    unknown = [f for f in chosen if f not in FORMATS]
    if unknown or not chosen:
        raise argparse.ArgumentTypeError(f"unknown format {', '.join(unknown) or '(none)'}; choose from {', '.join(FORMATS)}")
    return chosen


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
    written = write_reports(report, out, course.root / "templates", args.lang, args.format)
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


def command_batch(args) -> int:
    from grader.batch import run_batch
    from grader.sandbox.levels import strict_missing

    course = load_course(args.course)
    if not args.submissions.is_dir():
        raise UsageError(f"{args.submissions} is not a folder of submissions")
    if args.sandbox == "strict" and strict_missing():
        raise UsageError(f"the strict sandbox is unavailable: {strict_missing()}; pass --sandbox basic to grade "
                         "with weaker isolation")
    interactive = sys.stderr.isatty()

    def progress(done, total, last):
        width = 30
        filled = int(width * done / total) if total else width
        text = f"[{done:>{len(str(total))}}/{total}] {'#' * filled}{'.' * (width - filled)}"
        if last:
            name, summary = last
            text += f"  {name}: {summary['percent']:g}%" + (f" ({summary['message']})" if summary["status"] == "error" else "")
        print(("\r" + text.ljust(100)) if interactive else text, end="" if interactive else "\n", file=sys.stderr, flush=True)

    outcome = run_batch(course, args.submissions.absolute(), args.out.absolute(), args.jobs, args.regrade,
                        args.sandbox, args.lang, progress)
    if interactive:
        print(file=sys.stderr)
    print(f"{outcome['total']} submissions: {outcome['graded']} graded, {outcome['skipped']} already in the gradebook; "
          f"{args.out / 'grades.csv'}, {args.out / 'class.html'}")
    return EXIT_OK


def command_handout(args) -> int:
    from grader.handout import write_handout

    course = load_course(args.course)
    try:
        files = write_handout(course, args.out)
    except FileExistsError as exc:
        raise UsageError(str(exc)) from None
    print(f"{len(files)} files written to {args.out}")
    return EXIT_OK


def command_gradescope(args) -> int:
    from grader.gradescope import build_bundle

    names = build_bundle(load_course(args.course), args.out)
    print(f"{args.out}: {len(names)} files (setup.sh, run_autograder, the course)")
    return EXIT_OK


def command_gradescope_run(args) -> int:
    from grader.gradescope import run_in_gradescope

    print(run_in_gradescope(load_course(args.course), args.root))
    return EXIT_OK


def command_check(args) -> int:
    from grader.check import run_check

    course = load_course(args.course)
    submission = args.submission or (Path("exercises") if Path("exercises").is_dir() else course.root / "exercises")
    if not submission.is_dir():
        raise UsageError(f"{submission} is not a folder laid out like exercises/")
    ids = [args.exercise] if args.exercise else [e.id for e in course.exercises]
    for ex in ids:
        course.exercise(ex)
    return run_check(course, submission.absolute(), ids, args.lang)
