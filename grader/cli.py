"""The `grader` command."""

from __future__ import annotations

import argparse
import atexit
import dataclasses
import math
import os
import sys
import threading
import time
from pathlib import Path

from grader.course import CourseError, load_course

EXIT_OK, EXIT_BELOW_THRESHOLD, EXIT_USAGE, EXIT_INCOMPLETE = 0, 1, 2, 3


class UsageError(Exception):
    """Bad arguments or an unreadable submission: one line, exit status 2."""


def run() -> None:
    """The `grader` command as a process: `main`, then an exit that skips tearing down the interpreter.

    Everything the command writes is written and closed when `main` returns; what remains at exit is freeing
    torch, pytest and the judge module by module, about half a second of every grading for nothing. Threads
    still running are waited for and exit handlers run (Dask's among them), as a normal exit would."""
    code = main()
    for thread in threading.enumerate():
        if thread is not threading.main_thread() and not thread.daemon:
            thread.join()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):   # a reader that went away, or a closed stream: nothing more to say
            pass
    os._exit(code)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.handler(args)
    except (UsageError, CourseError) as exc:
        from grader.render.safe_text import terminal_text

        print(f"grader: {terminal_text(str(exc))}", file=sys.stderr)  # it may name the submission's folder
        return EXIT_USAGE


def student_edition() -> bool:
    """Whether this is the checker a handout ships (`grader handout` leaves out the instructor's modules, this
    one's writer among them): its `grader` offers `check` alone, the one command that works there. The file is
    looked for beside this one, not imported: an editable install of the whole grader would answer for it."""
    return not (Path(__file__).resolve().parent / "handout.py").is_file()


def build_parser() -> argparse.ArgumentParser:
    student = student_edition()
    described = "Check your exercises before you submit them." if student else "Grade Transformer course submissions."
    parser = argparse.ArgumentParser(prog="grader", description=described)
    if not student:
        parser.add_argument("--course", type=Path, default=None,
                            help="folder holding course.toml (default: this checkout)")
    # The metavar keeps the hidden command out of the usage line; leaving it without help keeps it out of the list.
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    check = sub.add_parser("check", help="for students: public tests and the visible criteria, no root needed")
    check.add_argument("exercise", nargs="?", default=None, help="one exercise (default: every exercise)")
    check.add_argument("--submission", type=Path, default=None,
                       help="folder laid out like exercises/ (default: ./exercises, the root of a student repository)")
    check.add_argument("--lang", choices=("en", "zh"), default="en")
    check.set_defaults(handler=command_check)
    if student_edition():
        return parser

    grade = sub.add_parser("grade", help="grade one submission and write report.json, report.html, scorecard.md")
    grade.add_argument("submission", nargs="?", type=Path, default=None,
                       help="a folder laid out like exercises/ (default: the bundled sample submission)")
    grade.add_argument("--exercise", action="append", dest="exercises", metavar="ID",
                       help="grade only this exercise (repeatable)")
    grade.add_argument("--out", type=Path, default=None, help="report folder (default: reports/<submission-name>/)")
    grade.add_argument("--lang", choices=("en", "zh"), default="en")
    grade.add_argument("--sandbox", choices=("strict", "basic", "none"), default="strict",
                       help="isolation of student code; strict needs root, and a weaker level must be asked for")
    grade.add_argument("--fail-under", type=percent_argument, default=None, metavar="PCT",
                       help="exit 1 when the total is below PCT percent (0 to 100)")
    grade.add_argument("--format", default="json,html,md", type=formats_argument,
                       help="comma-separated: json, html, md, gradescope (results.json), junit (junit.xml)")
    grade.set_defaults(handler=command_grade)

    batch = sub.add_parser("batch", help="grade a folder of student folders or zip files into a gradebook")
    batch.add_argument("submissions", type=Path, help="a folder whose entries are student folders or .zip files")
    batch.add_argument("--out", type=Path, required=True, help="gradebook.sqlite, grades.csv, class.html, students/")
    batch.add_argument("--jobs", type=positive_int_argument, default=max(1, (os.cpu_count() or 1)),
                       help="submissions graded at once (at least 1)")
    batch.add_argument("--regrade", action="store_true", help="grade again what the gradebook already holds")
    batch.add_argument("--sandbox", choices=("strict", "basic"), default="strict")
    batch.add_argument("--lang", choices=("en", "zh"), default="en", help="language of class.html and the messages")
    batch.add_argument("--roster", type=Path, default=None, metavar="CSV",
                       help="the class list, a CSV file with a header row naming id, name, email (only id is "
                            "required). A submission (folder, or zip without .zip) belongs to the student whose id "
                            "it is named after, else whose email (whole, or the part before @), else whose name "
                            "(letter case, spaces and punctuation ignored: zhang_san is Zhang San); a name that "
                            "fits two students is matched to neither. grades.csv then lists every student: one with "
                            "no submission as `missing`, a submission that fits no one flagged in the roster column")
    batch.add_argument("--excel", action="store_true",
                       help="write grades.csv as UTF-8 with a byte order mark, so spreadsheet programs (Excel) "
                            "read names in any script correctly")
    batch.add_argument("--cluster", default=None, metavar="WHERE",
                       help="grade on Dask: local (--jobs workers here), tcp://HOST:8786 (a running scheduler), or "
                            "slurm, pbs, sge, lsf, htcondor, moab, oar (--jobs workers as batch jobs; settings from "
                            "course.toml's [cluster.<kind>] and --cluster-option). Default: warm processes here, no Dask")
    batch.add_argument("--cluster-option", action="append", default=[], metavar="KEY=VALUE", type=cluster_option,
                       help="a dask-jobqueue setting, e.g. queue=gpu or walltime=01:00:00 (repeatable)")
    batch.set_defaults(handler=command_batch)

    handout = sub.add_parser("handout", help="write the student repository: exercises, public tests, a CI workflow")
    handout.add_argument("out", type=Path)
    handout.set_defaults(handler=command_handout)

    classroom = sub.add_parser("classroom", help="hidden grading of a GitHub Classroom assignment, posted back")
    classroom_sub = classroom.add_subparsers(dest="classroom_command", required=True, metavar="ACTION")
    sync = classroom_sub.add_parser("sync", help="grade each student repository's new commit; post status and scorecard")
    sync.add_argument("--org", required=True, help="the organisation holding the students' repositories")
    sync.add_argument("--prefix", required=True, help="the assignment's prefix: repositories are <prefix>-<username>")
    sync.add_argument("--out", type=Path, required=True, help="the gradebook folder, kept between runs")
    sync.add_argument("--api-url", default=os.environ.get("GITHUB_API_URL", "https://api.github.com"),
                      help="GitHub's REST API (default: $GITHUB_API_URL, else https://api.github.com)")
    sync.add_argument("--jobs", type=int, default=max(1, (os.cpu_count() or 1)), help="submissions graded at once")
    sync.add_argument("--sandbox", choices=("strict", "basic"), default="strict")
    sync.add_argument("--lang", choices=("en", "zh"), default="en")
    sync.set_defaults(handler=command_classroom_sync)

    bundle = sub.add_parser("gradescope", help="build a Gradescope autograder bundle (setup.sh, run_autograder)")
    bundle.add_argument("out", type=Path, help="the .zip to write")
    bundle.add_argument("--lang", choices=("en", "zh"), default="en",
                        help="the language of the results students see in Gradescope")
    bundle.set_defaults(handler=command_gradescope)

    gs_run = sub.add_parser("gradescope-run")  # what the bundle's run_autograder calls; not for people
    gs_run.add_argument("--root", type=Path, default=Path("/autograder"))
    gs_run.add_argument("--lang", choices=("en", "zh"), default="en")
    gs_run.set_defaults(handler=command_gradescope_run)

    selftest = sub.add_parser("selftest", help="grade every solution, variant and mutant; fail on any false verdict")
    selftest.add_argument("--catalog", type=Path, default=None, help="folder holding variants/ and mutants/ (default: tests/)")
    selftest.add_argument("--matrix", type=Path, default=None, help="also write the mutant x criterion matrix (Markdown) here")
    selftest.add_argument("--exercise", action="append", default=None, metavar="ID",
                          help="only this exercise's solution, variants and mutants (repeatable)")
    selftest.add_argument("--mutate", action="store_true",
                          help="instead of the catalog: grade first-order mutants of the solutions, made inside the "
                               "functions students write, and list the survivors")
    selftest.add_argument("--sample", type=positive_int_argument, default=None, metavar="N",
                          help="with --mutate: at most N mutants per exercise, drawn with --seed (default: all)")
    selftest.add_argument("--seed", type=int, default=0, help="with --mutate: the seed --sample draws with")
    selftest.add_argument("--equivalents", type=Path, default=None, metavar="TOML",
                          help="with --mutate: the reviewed list of equivalent mutants "
                               "(default: <catalog>/mutants/equivalent.toml)")
    selftest.add_argument("--mutant", action="append", default=None, metavar="ID",
                          help="with --mutate: only this mutant (repeatable; the ids --list and the survivors show)")
    selftest.add_argument("--list", action="store_true", help="with --mutate: list the mutants, grade none")
    selftest.set_defaults(handler=command_selftest)
    return parser


def formats_argument(text: str) -> tuple[str, ...]:
    from grader.reporting import FORMATS

    chosen = tuple(dict.fromkeys(f.strip() for f in text.split(",") if f.strip()))
    unknown = [f for f in chosen if f not in FORMATS]
    if unknown or not chosen:
        raise argparse.ArgumentTypeError(f"unknown format {', '.join(unknown) or '(none)'}; choose from {', '.join(FORMATS)}")
    return chosen


def percent_argument(text: str) -> float:
    """A finite percentage in [0, 100]: `nan` would make every comparison false, so every grade would pass."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not (math.isfinite(value) and 0 <= value <= 100):
        raise argparse.ArgumentTypeError(f"{text!r} is not a percentage from 0 to 100")
    return value


def positive_int_argument(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is less than 1")
    return value


def command_grade(args) -> int:
    from grader.grading import grade
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
        sandbox = choose(args.sandbox)
    except SandboxUnavailable as exc:
        raise UsageError(f"{exc}; pass --sandbox basic to grade with weaker isolation") from None
    report = grade(course, submission, exercise_ids, sandbox)
    return publish(report, out, course.root / "templates", args.lang, args.format, args.fail_under)


def publish(report, out: Path, templates: Path, lang: str, formats: tuple[str, ...], fail_under: float | None) -> int:
    """Write every report, print the table, and return the exit status the grading ended with."""
    from grader.render.safe_text import terminal_text
    from grader.render.terminal import render_table
    from grader.reporting import append_step_summary, write_reports

    from grader.i18n import join, rendered, t, verbatim
    from grader.render.labels import LABELS

    written = write_reports(report, out, templates, lang, formats)
    print(render_table(report, lang))
    # the default report folder is named after the submission's
    print(f"\n{LABELS[lang]['reports_written']}{LABELS[lang]['colon']}{', '.join(terminal_text(str(p)) for p in written)}")
    if "md" in formats:
        try:
            append_step_summary(out / "scorecard.md")
        except OSError as exc:  # the CI summary is a copy: losing it changes nothing about the grading
            print(f"grader: warning: GITHUB_STEP_SUMMARY not written: {terminal_text(str(exc))}", file=sys.stderr)
    incomplete = [e for e in report.exercises if e.status == "grader_error"]
    if incomplete:
        # the score is not the student's yet, so --fail-under has nothing to judge
        said = join((t("{exercise}: {said}", exercise=verbatim(e.id), said=rendered(e.message)) for e in incomplete),
                    t("; "))
        print(terminal_text(t("grading incomplete: {said}", said=said).render(lang)), file=sys.stderr)
        return EXIT_INCOMPLETE
    if fail_under is not None and report.percent < fail_under:
        print("grader: " + t("{percent:g}% is below --fail-under {fail_under:g}%", percent=report.percent,
                             fail_under=fail_under).render(lang), file=sys.stderr)
        return EXIT_BELOW_THRESHOLD
    return EXIT_OK


def command_selftest(args) -> int:
    from grader.sandbox.levels import choose, strict_missing
    from grader.selftest import CatalogError, coverage_problems, matrix_markdown, run_selftest

    course = load_course(args.course)
    catalog = args.catalog or course.root / "tests"
    if args.exercise:
        unknown = sorted(set(args.exercise) - {ex.id for ex in course.exercises})
        if unknown:
            raise UsageError(f"no exercise {', '.join(unknown)} in the course")
        course = dataclasses.replace(course, exercises=tuple(ex for ex in course.exercises if ex.id in args.exercise))
    if not args.mutate and (args.sample or args.list or args.equivalents or args.mutant):
        raise UsageError("--sample, --mutant, --list and --equivalents go with --mutate")
    if args.mutate:
        return mutation_selftest(args, course, catalog)
    sandbox = choose("basic" if strict_missing() else "strict")

    def progress(done, total, group):
        print(f"round {done}/{total}: " + ", ".join(f"{c.kind} {c.label}" for c in group), flush=True)

    try:
        cases = run_selftest(course, catalog, sandbox, progress)
    except CatalogError as exc:
        raise UsageError(f"the catalog cannot be used as it is:\n{exc}") from None
    matrix = matrix_markdown(course, cases)
    if args.matrix:
        from grader.reporting import write_atomic

        write_atomic(args.matrix, matrix)
    print(matrix)
    problems = [p for case in cases for p in case.problems()] + coverage_problems(course, cases)
    counts = {k: sum(c.kind == k for c in cases) for k in ("solution", "variant", "mutant")}
    print(f"\n{counts['solution']} solutions, {counts['variant']} variants, {counts['mutant']} mutants; "
          f"{len(problems)} problems")
    for p in problems:
        print("  " + p)
    return 1 if problems else 0


def mutation_selftest(args, course, catalog: Path) -> int:
    """`grader selftest --mutate`: the figure per exercise, the survivors, and every problem."""
    try:
        from grader.mutation import EQUIVALENTS, EquivalentsError, excerpt, figures, load_equivalents, mutants_of
        from grader.mutation import mutation_problems, run_mutation, sample
    except ImportError as exc:
        raise UsageError(f"--mutate needs mutmut ({exc.name} is missing): pip install -e '.[mutation]'") from None
    from grader.sandbox.levels import choose, strict_missing

    try:
        equivalents = load_equivalents(args.equivalents or catalog / "mutants" / EQUIVALENTS)
    except EquivalentsError as exc:
        raise UsageError(str(exc)) from None
    if args.mutant and not args.exercise:   # only the exercises the ids name need their mutants made
        named = {i.split(":", 1)[0] for i in args.mutant}
        course = dataclasses.replace(course, exercises=tuple(ex for ex in course.exercises if ex.id in named))
    generated = {ex.id: mutants_of(course, ex) for ex in course.exercises}
    chosen = [m for ex in course.exercises for m in sample(generated[ex.id], args.sample, args.seed)]
    if args.mutant:
        unknown = sorted(set(args.mutant) - {m.id for m in chosen})
        if unknown:
            raise UsageError(f"no mutant {', '.join(unknown)} among those made of today's solutions")
        chosen = [m for m in chosen if m.id in args.mutant]
    if args.list:
        for m in chosen:
            listed = "  (equivalent)" if m.id in equivalents else ""
            print(f"{m.id}  {m.file}:{m.line}  {excerpt(m)}{listed}")
        print(f"{len(chosen)} mutants")
        return 0
    sandbox = choose("basic" if strict_missing() else "strict")
    started = time.monotonic()
    print(f"{len(chosen)} mutants of {sum(map(len, generated.values()))}"
          + (f" (--sample {args.sample} per exercise, --seed {args.seed})" if args.sample else ""), flush=True)

    def progress(done, total, group):
        print(f"round {done}/{total}: " + ", ".join(c.exercise for c in group), flush=True)

    problems, outcomes = run_mutation(course, chosen, sandbox, progress)
    complete = {ex.id for ex in course.exercises
                if not args.mutant and (args.sample is None or args.sample >= len(generated[ex.id]))}
    problems += mutation_problems(outcomes, equivalents, [m for ms in generated.values() for m in ms], complete)
    print()
    total = {"mutants": 0, "caught": 0, "non_equivalent": 0, "equivalent": 0}
    for f in figures(course, outcomes, equivalents):
        print(f"{f.exercise:<16} {f.caught}/{f.non_equivalent} caught ({f.percent:.1f}%), {f.equivalent} equivalent, "
              f"{len(f.survivors)} survivors, {len(f.faults)} grader faults, of {f.mutants} mutants")
        for o in f.survivors:
            m = o.mutant
            print(f"    survivor {m.file}:{m.line} {m.function}: {excerpt(m)}   [{m.id}]")
        for key in total:
            total[key] += getattr(f, key)
    percent = 100.0 * total["caught"] / total["non_equivalent"] if total["non_equivalent"] else 100.0
    print(f"{'all':<16} {total['caught']}/{total['non_equivalent']} caught ({percent:.1f}%), {total['equivalent']} "
          f"equivalent, of {total['mutants']} mutants; {time.monotonic() - started:.0f} s; {len(problems)} problems")
    for p in problems:
        print("  " + p)
    return 1 if problems else 0


def cluster_option(text: str) -> tuple[str, object]:
    """KEY=VALUE, the value read as a TOML value when it is one (4, true, ["a"]) and as text otherwise."""
    import tomllib

    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"{text!r} is not KEY=VALUE")
    try:
        return key.strip(), tomllib.loads(f"v = {value}")["v"]
    except tomllib.TOMLDecodeError:
        return key.strip(), value


def command_batch(args) -> int:
    from grader.batch import BatchBusy, run_batch
    from grader.cluster import ClusterError
    from grader.progress import BatchProgress
    from grader.roster import RosterError, read_roster
    from grader.sandbox.levels import strict_missing

    course = load_course(args.course)
    if not args.submissions.is_dir():
        raise UsageError(f"{args.submissions} is not a folder of submissions")
    # Where workers run elsewhere, each states the level it grades with; the gradebook records it.
    if args.sandbox == "strict" and args.cluster in (None, "local") and strict_missing():
        raise UsageError(f"the strict sandbox is unavailable: {strict_missing()}; pass --sandbox basic to grade "
                         "with weaker isolation")
    guard_basic_level(course, args.sandbox, args.lang, args.submissions)
    try:
        roster = read_roster(args.roster) if args.roster else None
    except RosterError as exc:
        raise UsageError(str(exc)) from None
    interactive = sys.stderr.isatty()
    progress = BatchProgress(on_change=lambda *event: show_progress(progress, interactive, args.lang, *event))
    try:
        outcome = run_batch(course, args.submissions.absolute(), args.out.absolute(), args.jobs, args.regrade,
                            args.sandbox, args.lang, progress, args.cluster, dict(args.cluster_option), roster,
                            args.excel)
    except (BatchBusy, ClusterError) as exc:
        raise UsageError(str(exc)) from None
    if interactive:
        print(file=sys.stderr)
    from grader.i18n import t

    print(t("{total} submissions: {graded} graded, {skipped} already in the gradebook; {csv}, {page}",
            total=outcome["total"], graded=outcome["graded"], skipped=outcome["skipped"],
            csv=str(args.out / "grades.csv"), page=str(args.out / "class.html")).render(args.lang))
    if outcome["rendered"]:   # reports of earlier runs, in another language
        print(t("{count} students' reports written again in this language, from their report.json (no grading)",
                count=outcome["rendered"]).render(args.lang))
    return EXIT_OK


def guard_basic_level(course, sandbox: str, lang: str, class_folder: Path | None) -> None:
    """At the basic level as root, student code runs as a grading uid and reads what every user can. A class
    folder other users can enter gives every classmate's code away: refused. The course's hidden files (the
    solutions, the hidden criteria, course.toml and its seed) readable by all are named in a warning."""
    import grader
    from grader.course import COURSE_FILE
    from grader.i18n import t
    from grader.render.safe_text import terminal_text
    from grader.sandbox.private import open_to_others

    if sandbox != "basic" or os.geteuid() != 0:
        return
    if class_folder is not None and open_to_others(class_folder):
        raise UsageError(t("at the basic level student code can read what every user can, and every user can enter "
                           "{folder}: make it yours alone (chmod o-rwx {folder}) or grade with --sandbox strict",
                           folder=str(class_folder.absolute())).render(lang))
    secret = (course.root / "solutions", Path(grader.__file__).parent / "criteria", course.root / COURSE_FILE)
    hidden = [p for p in secret if open_to_others(p)]
    if hidden:
        said = t("warning: at the basic level student code can read what every user can, and every user can read "
                 "{paths}: make them root-only (chmod -R go-rwx ...), as the Gradescope bundle's setup does",
                 paths=", ".join(str(p) for p in hidden))
        print("grader: " + terminal_text(said.render(lang)), file=sys.stderr)


def show_progress(progress, interactive: bool, lang: str, event: str, name: str | None, summary: dict | None) -> None:
    """On a terminal, one line redrawn in place, with a line of its own above it for each submission that got
    no verdict; in a log, a plain line when the batch begins and each time a submission is in the gradebook."""
    import shutil

    from grader.render.labels import CLASS_LABELS
    from grader.render.safe_text import terminal_text
    from grader.render.terminal import fit

    # a folder's name is the student's choice, and so is much of an error message
    problem = None
    if summary is not None and summary["status"] not in ("passed", "graded"):
        words = CLASS_LABELS[lang]
        problem = (f"{terminal_text(name)}: {words.get(summary['status'], summary['status'])} "
                   f"({terminal_text(summary['message'][lang])})")
    if interactive:
        columns = shutil.get_terminal_size().columns
        if problem:
            print("\r\x1b[K" + problem, file=sys.stderr)
        print("\r\x1b[K" + fit(terminal_text(progress.line(lang)), columns - 1), end="", file=sys.stderr, flush=True)
    elif event != "started":
        done = f"  {terminal_text(name)}: {summary['percent']:g}%" if name and summary else ""
        print(terminal_text(progress.line(lang)) + (f"  {problem}" if problem else done), file=sys.stderr, flush=True)


def command_handout(args) -> int:
    from grader.handout import write_handout

    course = load_course(args.course)
    try:
        files = write_handout(course, args.out)
    except FileExistsError as exc:
        raise UsageError(str(exc)) from None
    print(f"{len(files)} files written to {args.out}")
    return EXIT_OK


def command_classroom_sync(args) -> int:
    from grader.batch import run_batch
    from grader.classroom import (GitHub, GitHubError, POSTED, RETRY, classroom_settings, iso, parse_time, sync,
                                  token_from_environment)
    from grader.render.safe_text import terminal_text
    from grader.sandbox.levels import strict_missing

    course = load_course(args.course)
    token = token_from_environment()
    if not token:
        raise UsageError("set GRADER_TOKEN (or GITHUB_TOKEN) to a token that can read the students' repositories "
                         "and write their commit statuses")
    if args.sandbox == "strict" and strict_missing():
        raise UsageError(f"the strict sandbox is unavailable: {strict_missing()}; pass --sandbox basic")
    guard_basic_level(course, args.sandbox, args.lang, None)   # the fetched files stay in --out, owner-only
    deadline = classroom_settings(course).get("deadline")
    try:
        deadline = parse_time(str(deadline)) if deadline is not None else None
    except ValueError:
        raise UsageError(f"course.toml: [classroom] deadline {deadline!r} is not an ISO 8601 time such as "
                         "2026-12-01T23:59:59Z") from None
    out = args.out.absolute()

    def grade_batch(submissions, gradebook):
        return run_batch(course, submissions, gradebook, args.jobs, True, args.sandbox, args.lang)

    try:
        rows = sync(course, GitHub(token, args.api_url), args.org, args.prefix, out, grade_batch, deadline, args.lang)
    except GitHubError as exc:   # the organisation's repositories could not be listed: nothing is known
        raise UsageError(f"GitHub: {exc}") from None
    for row in rows:
        where = f" {row.sha[:12]}" if row.sha else ""
        came = f" ({row.arrival.how} {iso(row.arrival.at)})" if row.arrival else ""
        stage = f" [{row.stage}]" if row.stage else ""
        print(terminal_text(f"{row.repository}{where}: {row.status}{stage}: {row.description}{came}"))
    posted = sum(r.status == POSTED for r in rows)
    retried = sum(r.status == RETRY for r in rows)
    print(f"{posted} scorecards posted, {retried} repositories to try again; gradebook in {out}")
    return EXIT_INCOMPLETE if retried else EXIT_OK


def command_gradescope(args) -> int:
    from grader.gradescope import build_bundle

    names = build_bundle(load_course(args.course), args.out, args.lang)
    print(f"{args.out}: {len(names)} files (setup.sh, run_autograder, the course)")
    return EXIT_OK


def command_gradescope_run(args) -> int:
    from grader.gradescope import UnsafeToGrade, run_in_gradescope

    try:
        print(run_in_gradescope(load_course(args.course), args.root, args.lang))
    except UnsafeToGrade as exc:   # no results.json: Gradescope shows the instructor a failed autograder run
        raise UsageError(f"refusing to grade: {exc}") from None
    return EXIT_OK


def command_check(args) -> int:
    from grader.check import CheckRefused, run_check, submission_folder

    course = load_course(getattr(args, "course", None))
    try:
        submission = submission_folder(course, args.submission, Path.cwd())
    except CheckRefused as exc:
        raise UsageError(exc.said.render(args.lang)) from None
    ids = [args.exercise] if args.exercise else [e.id for e in course.exercises]
    for ex in ids:
        course.exercise(ex)
    return run_check(course, submission, ids, args.lang)
