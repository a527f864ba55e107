"""The `grader` command."""

from __future__ import annotations

import argparse
import atexit
import dataclasses
import math
import os
import signal
import sqlite3
import sys
import threading
import time
from pathlib import Path

from grader.course import CourseError, load_course
from grader.exits import (EXIT_BELOW_THRESHOLD, EXIT_INCOMPLETE, EXIT_OK, EXIT_RATE_LIMITED, EXIT_REDIRECT_REFUSED,
                          EXIT_USAGE, SIGNALLED, Fault, epilog)
from grader.i18n import LANGS
from grader.worker.protocol import Status


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
    except (UsageError, CourseError, *refusals()) as exc:
        from grader.render.safe_text import terminal_text

        said = exc.problems if isinstance(exc, CourseError) else (str(exc),)   # a course's problems: a line each
        for line in said:
            print(f"grader: {terminal_text(line)}", file=sys.stderr)  # it may name the submission's folder
        return EXIT_USAGE
    except Fault as exc:   # a full disk, a read-only --out, a gradebook held or damaged: one line, its own status
        return said_fault(exc)
    except BrokenPipeError:   # the reader of its output went away (`grader ... | head`): end as a pipe's writer does
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())   # nothing more reaches the closed pipe, at exit neither
        return SIGNALLED + signal.SIGPIPE
    except (sqlite3.Error, OSError) as exc:   # the same faults met by a command reading a gradebook folder
        fault = gradebook_fault(args, exc)
        if fault is None:
            raise
        return said_fault(fault)


def said_fault(fault: Fault) -> int:
    """A machine's fault ends the command in its one line on stderr; returns its exit status."""
    from grader.render.safe_text import terminal_text

    print(f"grader: {terminal_text(fault.said)}", file=sys.stderr)
    return fault.status


def gradebook_fault(args, exc: BaseException) -> Fault | None:
    """The machine's fault `exc` is (grader.batch.faults), said of the command's gradebook folder (`--out` of a batch,
    the GRADEBOOK of override, lms and the classroom commands); None where the command names none, or it is none."""
    folder = getattr(args, "out", None) or getattr(args, "gradebook", None)
    if folder is None or student_edition():
        return None
    from grader.batch.faults import machine_fault

    folder = Path(folder)
    return machine_fault(exc, folder.parent if folder.suffix == ".sqlite" else folder)


def refusals() -> tuple[type[Exception], ...]:
    """The other refusals said in one line with status 2: a gradebook of a newer grader (the student edition
    has no gradebook, nor its module)."""
    if student_edition():
        return ()
    from grader.batch.schema import SchemaRefused

    return (SchemaRefused,)


def student_edition() -> bool:
    """Whether this is the checker a handout ships (`grader handout` leaves out the instructor's modules, this
    one's writer among them): its `grader` offers `check` alone, the one command that works there. The file is
    looked for beside this one, not imported: an editable install of the whole grader would answer for it."""
    return not (Path(__file__).resolve().parent / "classroom" / "handout.py").is_file()


def build_parser() -> argparse.ArgumentParser:
    student = student_edition()
    described = "Check your exercises before you submit them." if student else "Grade Transformer course submissions."
    parser = argparse.ArgumentParser(prog="grader", description=described, epilog=None if student else epilog(),
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    if not student:
        parser.add_argument("--course", type=Path, default=None,
                            help="folder holding course.toml (default: this checkout)")
    # The metavar keeps the hidden command out of the usage line; leaving it without help keeps it out of the list.
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    check = sub.add_parser("check", help="for students: public tests and the visible criteria, no root needed")
    check.add_argument("exercise", nargs="?", default=None, help="one exercise (default: every exercise)")
    check.add_argument("--submission", type=Path, default=None,
                       help="folder laid out like exercises/ (default: ./exercises, the root of a student repository)")
    check.add_argument("--lang", choices=LANGS, default="en")
    check.set_defaults(handler=command_check)
    if student_edition():
        return parser

    validate = sub.add_parser("validate", help="check course.toml against its schema: every problem with its line")
    validate.add_argument("--course", type=Path, default=argparse.SUPPRESS,   # as well as before the command
                          help="folder holding course.toml (default: this checkout)")
    validate.set_defaults(handler=command_validate)

    grade = sub.add_parser("grade", help="grade one submission and write report.json, report.html, scorecard.md")
    grade.add_argument("submission", nargs="?", type=Path, default=None,
                       help="a folder laid out like exercises/ (default: the bundled sample submission)")
    grade.add_argument("--exercise", action="append", dest="exercises", metavar="ID",
                       help="grade only this exercise (repeatable)")
    grade.add_argument("--out", type=Path, default=None, help="report folder (default: reports/<submission-name>/)")
    grade.add_argument("--lang", choices=LANGS, default="en")
    grade.add_argument("--sandbox", choices=("strict", "basic", "none"), default="strict",
                       help="isolation of student code; strict needs root, and a weaker level must be asked for")
    grade.add_argument("--fail-under", type=percent_argument, default=None, metavar="PCT",
                       help="exit 1 when the total is below PCT percent (0 to 100)")
    grade.add_argument("--format", default="json,html,md", type=formats_argument,
                       help="comma-separated: json, html, md, gradescope (results.json), junit (junit.xml)")
    grade.add_argument("--rejudge", action="store_true",
                       help="judge again what the last grading into --out observed, running no student code (graded "
                            "afresh when the submission or the probes changed); prints the grade diff")
    grade.set_defaults(handler=command_grade)

    batch = sub.add_parser("batch", help="grade a folder of student folders or zip files into a gradebook")
    batch.add_argument("submissions", type=Path, help="a folder whose entries are student folders or .zip files")
    batch.add_argument("--out", type=Path, required=True, help="gradebook.sqlite, grades.csv, class.html, students/")
    batch.add_argument("--jobs", type=positive_int_argument, default=max(1, (os.cpu_count() or 1)),
                       help="submissions graded at once (at least 1)")
    batch.add_argument("--regrade", action="store_true", help="grade again what the gradebook already holds")
    batch.add_argument("--rejudge", action="store_true",
                       help="judge again what each submission's grading observed, running no student code (after "
                            "criteria, points or visibility changed); those whose probes changed are graded afresh. "
                            "Prints the grade diff and writes it to OUT/rejudge-diff.csv")
    batch.add_argument("--sandbox", choices=("strict", "basic"), default="strict")
    batch.add_argument("--lang", choices=LANGS, default="en", help="language of class.html and the messages")
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
                            "course.toml's [cluster.<kind>] and --cluster-option). Default: warm "
                            "processes here, no Dask")
    batch.add_argument("--cluster-option", action="append", default=[], metavar="KEY=VALUE", type=cluster_option,
                       help="a dask-jobqueue setting, e.g. queue=gpu or walltime=01:00:00 (repeatable)")
    batch.add_argument("--format", default=(), type=lms_formats_argument, dest="formats", metavar="canvas,moodle",
                       help="also write the grades as a learning management system imports them: canvas.csv "
                            "(Canvas's gradebook import; the roster needs canvas_id, sis_user_id or sis_login_id) "
                            "and/or moodle.csv (Moodle's grade import); both need --roster")
    batch.add_argument("--submitted-at", type=Path, default=None, metavar="CSV",
                       help="when each submission was handed in, for course.toml's [policy]: a CSV with the columns "
                            "submission (or id, a roster's student) and submitted_at (ISO 8601). A roster's "
                            "submitted_at column does the same; a file's modification time is never used")
    batch.set_defaults(handler=command_batch)

    override = sub.add_parser("override", help="correct a grade by hand, with a comment; kept across regrades")
    override.add_argument("gradebook", type=Path, help="the folder grader batch wrote (or its gradebook.sqlite)")
    override.add_argument("student", nargs="?", default=None,
                          help="the submission's name in the gradebook, or a roster student's id")
    override.add_argument("target", nargs="?", default="", metavar="EXERCISE[/CRITERION]",
                          help="what the points are for: a criterion, a whole exercise, or (left out) the whole grade")
    override.add_argument("--points", type=points_argument, default=None, metavar="N",
                          help="the points it earns now (0 to its maximum)")
    override.add_argument("--comment", default=None, metavar="TEXT", help="why (shown in the student's report)")
    override.add_argument("--author", default=None, help="who corrects it (default: this account's user name)")
    override.add_argument("--list", action="store_true", help="list every override, and those no longer applied")
    override.add_argument("--remove", action="store_true", help="remove the override of STUDENT [TARGET]")
    override.add_argument("--lang", choices=LANGS, default=None,
                          help="language of the messages (default: the gradebook's, as grader batch last wrote it)")
    override.set_defaults(handler=command_override)

    review = sub.add_parser("review", help="grade the written answers by rubric in a browser, question by question")
    review.add_argument("gradebook", type=Path, help="the folder grader batch wrote (or its gradebook.sqlite)")
    review.add_argument("--host", default="127.0.0.1",
                        help="the address to serve on (default: this machine alone; another, such as 0.0.0.0, "
                             "serves a shared machine: give each TA a token with --ta)")
    review.add_argument("--port", type=int, default=0, help="the port (default 0: a free one)")
    review.add_argument("--ta", action="append", default=None, metavar="NAME",
                        help="a TA who grades, with an address of their own; repeat for each (default: one "
                             "address, changes made as this account's user name)")
    review.add_argument("--anonymise", action="store_true",
                        help="hide each student's name until their answer's grade is saved")
    review.add_argument("--lang", choices=LANGS, default=None,
                        help="language of the pages (default: the gradebook's; ?lang= in an address picks another)")
    review.set_defaults(handler=command_review)

    lms = sub.add_parser("lms", help="send the gradebook's grades to a learning management system")
    lms_sub = lms.add_subparsers(dest="lms_command", required=True, metavar="SYSTEM")
    canvas = lms_sub.add_parser("canvas", help="one PUT per student: the final grade and the scorecard as a comment")
    canvas.add_argument("gradebook", type=Path, help="the folder grader batch wrote (or its gradebook.sqlite)")
    canvas.add_argument("--course", dest="canvas_course", required=True, metavar="ID", help="Canvas's course id")
    canvas.add_argument("--assignment", required=True, metavar="ID", help="Canvas's assignment id")
    canvas.add_argument("--url", default=os.environ.get("CANVAS_URL"),
                        help="the Canvas instance, e.g. https://canvas.uni.edu (default: $CANVAS_URL); the token "
                             "comes from $CANVAS_TOKEN")
    canvas.add_argument("--roster", type=Path, default=None, metavar="CSV",
                        help="the roster (default: the one grader batch last used)")
    canvas.add_argument("--dry-run", action="store_true", help="print what would be sent; send nothing")
    canvas.add_argument("--force", action="store_true", help="send again what was sent before unchanged")
    canvas.add_argument("--lang", choices=LANGS, default=None)
    canvas.set_defaults(handler=command_lms_canvas)

    handout = sub.add_parser("handout", help="write the student repository: exercises, public tests, a CI workflow")
    handout.add_argument("out", type=Path)
    handout.set_defaults(handler=command_handout)

    classroom = sub.add_parser("classroom", help="hidden grading of a GitHub Classroom assignment, posted back")
    classroom_sub = classroom.add_subparsers(dest="classroom_command", required=True, metavar="ACTION")
    sync = classroom_sub.add_parser("sync",
                                    help="grade each student repository's new commit; post status and scorecard")
    sync.add_argument("--org", required=True, help="the organisation holding the students' repositories")
    sync.add_argument("--prefix", required=True, help="the assignment's prefix: repositories are <prefix>-<username>")
    sync.add_argument("--out", type=Path, required=True, help="the gradebook folder, kept between runs")
    sync.add_argument("--api-url", default=os.environ.get("GITHUB_API_URL", "https://api.github.com"),
                      help="GitHub's REST API (default: $GITHUB_API_URL, else https://api.github.com)")
    sync.add_argument("--jobs", type=int, default=max(1, (os.cpu_count() or 1)), help="submissions graded at once")
    sync.add_argument("--sandbox", choices=("strict", "basic"), default="strict")
    sync.add_argument("--lang", choices=LANGS, default="en")
    sync.add_argument("--roster", type=Path, default=None, metavar="CSV",
                      help="the class list, its id the GitHub user name: names the students and gives each their "
                           "extension (course.toml's [policy])")
    sync.add_argument("--max-wait", type=float, default=None, metavar="SECONDS",
                      help="the longest a rate limit of GitHub's may make the run sleep; a longer one stops it, to go "
                           "on by the same command later (default: 300)")
    sync.set_defaults(handler=command_classroom_sync)
    release = classroom_sub.add_parser("publish", help="release the feedback: post each student's whole scorecard; "
                                                       "every later sync shows it whole")
    release.add_argument("--org", required=True, help="the organisation holding the students' repositories")
    release.add_argument("--prefix", required=True,
                         help="the assignment's prefix: repositories are <prefix>-<username>")
    release.add_argument("--out", type=Path, required=True, help="the gradebook folder grader classroom sync keeps")
    release.add_argument("--api-url", default=os.environ.get("GITHUB_API_URL", "https://api.github.com"),
                         help="GitHub's REST API (default: $GITHUB_API_URL, else https://api.github.com)")
    release.add_argument("--lang", choices=LANGS, default="en")
    release.add_argument("--max-wait", type=float, default=None, metavar="SECONDS",
                         help="the longest a rate limit of GitHub's may make the run sleep (default: 300)")
    release.set_defaults(handler=command_classroom_publish)
    pages = classroom_sub.add_parser("reports", help="write each student's report.html and scorecard.md as the "
                                                     "feedback policy shows them now, to hand out")
    pages.add_argument("--out", type=Path, required=True, help="the gradebook folder (grader batch or classroom sync)")
    pages.add_argument("--to", type=Path, required=True, help="the folder to write <student>/report.html and "
                                                              "scorecard.md into")
    pages.add_argument("--lang", choices=LANGS, default="en")
    pages.set_defaults(handler=command_classroom_reports)

    bundle = sub.add_parser("gradescope", help="build a Gradescope autograder bundle (setup.sh, run_autograder)")
    bundle.add_argument("out", type=Path, help="the .zip to write")
    bundle.add_argument("--lang", choices=LANGS, default="en",
                        help="the language of the results students see in Gradescope")
    bundle.add_argument("--gradescope-memory-mb", type=positive_int_argument, default=None, metavar="MB",
                        help="the memory chosen in the assignment's Autograder Settings (default: Gradescope's, 768); "
                             "the bundle is refused when the course's limits need more")
    bundle.add_argument("--gradescope-timeout-min", type=positive_int_argument, default=None, metavar="MINUTES",
                        help="the timeout chosen there (default: Gradescope's, 10; at most 40)")
    bundle.add_argument("--gradescope-cpus", type=positive_float_argument, default=None, metavar="VCPU",
                        help="the CPUs chosen there (default: Gradescope's, 0.5); fewer than the course needs warns")
    bundle.set_defaults(handler=command_gradescope)

    gs_run = sub.add_parser("gradescope-run")  # what the bundle's run_autograder calls; not for people
    gs_run.add_argument("--root", type=Path, default=Path("/autograder"))
    gs_run.add_argument("--lang", choices=LANGS, default="en")
    gs_run.set_defaults(handler=command_gradescope_run)

    selftest = sub.add_parser("selftest", help="grade every solution, variant and mutant; fail on any false verdict")
    selftest.add_argument("--catalog", type=Path, default=None,
                          help="folder holding <exercise>/variants/ and <exercise>/mutants/ (default: the course's "
                               "solutions/)")
    selftest.add_argument("--matrix", type=Path, default=None,
                          help="also write the mutant x criterion matrix (Markdown) here")
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
                               "(default: <catalog>/equivalent.toml)")
    selftest.add_argument("--mutant", action="append", default=None, metavar="ID",
                          help="with --mutate: only this mutant (repeatable; the ids --list and the survivors show)")
    selftest.add_argument("--list", action="store_true", help="with --mutate: list the mutants, grade none")
    selftest.set_defaults(handler=command_selftest)

    new = sub.add_parser("new-exercise", help="write a working exercise skeleton into a course folder (making the "
                                              "course when the folder is new or empty)")
    new.add_argument("exercise_id", metavar="ID", help="the exercise's id: lower-case letters, digits, underscores")
    new.set_defaults(handler=command_new_exercise)
    if not student:
        course_after_the_command(sub)
    return parser


def course_after_the_command(sub) -> None:
    """`grader COMMAND --course DIR ...` as well as `grader --course DIR COMMAND ...`. Unset, a command's option sets
    nothing (SUPPRESS), so it never overwrites the folder given before the command; a command whose own --course
    means something else (`lms canvas`'s Canvas course) keeps it."""
    for command in sub.choices.values():
        try:
            command.add_argument("--course", type=Path, default=argparse.SUPPRESS, metavar="DIR",
                                 help="folder holding course.toml (as `grader --course DIR` before the command)")
        except argparse.ArgumentError:
            pass


def formats_argument(text: str) -> tuple[str, ...]:
    from grader.render.files import FORMATS

    chosen = tuple(dict.fromkeys(f.strip() for f in text.split(",") if f.strip()))
    unknown = [f for f in chosen if f not in FORMATS]
    if unknown or not chosen:
        raise argparse.ArgumentTypeError(f"unknown format {', '.join(unknown) or '(none)'}; choose from "
                                         f"{', '.join(FORMATS)}")
    return chosen


def lms_formats_argument(text: str) -> tuple[str, ...]:
    from grader.batch.run import LMS_FILES

    chosen = tuple(dict.fromkeys(f.strip() for f in text.split(",") if f.strip()))
    unknown = [f for f in chosen if f not in LMS_FILES]
    if unknown or not chosen:
        raise argparse.ArgumentTypeError(f"unknown format {', '.join(unknown) or '(none)'}; choose from "
                                         f"{', '.join(LMS_FILES)}")
    return chosen


def points_argument(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not (math.isfinite(value) and value >= 0):
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of points (0 or more)")
    return value


def percent_argument(text: str) -> float:
    """A finite percentage in [0, 100]: `nan` would make every comparison false, so every grade would pass."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not (math.isfinite(value) and 0 <= value <= 100):
        raise argparse.ArgumentTypeError(f"{text!r} is not a percentage from 0 to 100")
    return value


def positive_float_argument(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"{text!r} is not a number above 0")
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
    from grader.grading.rejudge import grade_one, print_diff
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
    report, rejudging = grade_one(course, submission, exercise_ids, sandbox, out, args.rejudge)
    code = publish(report, out, course.templates, args.lang, args.format, args.fail_under)
    if rejudging is not None:
        print_diff(rejudging, args.lang)
    return code


def publish(report, out: Path, templates: Path, lang: str, formats: tuple[str, ...], fail_under: float | None) -> int:
    """Write every report, print the table, and return the exit status the grading ended with."""
    from grader.render.safe_text import terminal_text
    from grader.render.terminal import render_table
    from grader.render.files import append_step_summary, write_reports

    from grader.i18n import join, rendered, t, verbatim
    from grader.render.labels import LABELS

    written = write_reports(report, out, templates, lang, formats)
    print(render_table(report, lang))
    # the default report folder is named after the submission's
    shown = ", ".join(terminal_text(str(p)) for p in written)
    print(f"\n{LABELS[lang]['reports_written']}{LABELS[lang]['colon']}{shown}")
    if "md" in formats:
        try:
            append_step_summary(out / "scorecard.md")
        except OSError as exc:  # the CI summary is a copy: losing it changes nothing about the grading
            print(f"grader: warning: GITHUB_STEP_SUMMARY not written: {terminal_text(str(exc))}", file=sys.stderr)
    incomplete = [e for e in report.exercises if e.status == Status.GRADER_ERROR]
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
    from grader.review.selftest import CatalogError, coverage_problems, matrix_markdown, run_selftest

    course = load_course(args.course)
    catalog = args.catalog or course.solutions
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
        from grader.render.files import write_atomic

        write_atomic(args.matrix, matrix)
    print(matrix)
    problems = [p for case in cases for p in case.problems()] + coverage_problems(course, cases)
    counts = {k: sum(c.kind == k for c in cases) for k in ("solution", "variant", "mutant")}
    print(f"\n{counts['solution']} solutions, {counts['variant']} variants, {counts['mutant']} mutants; "
          f"{len(problems)} problems")
    for p in problems:
        print("  " + p)
    return 1 if problems else 0


def command_new_exercise(args) -> int:
    from grader.authoring.skeleton import SkeletonError, new_exercise
    from grader.render.safe_text import terminal_text

    root = args.course
    if root is None:
        raise UsageError("name the course folder: grader new-exercise ID --course DIR")
    try:
        written = new_exercise(root, args.exercise_id)
    except SkeletonError as exc:
        raise UsageError(str(exc)) from None
    except OSError as exc:
        raise UsageError(f"the exercise could not be written into {root} ({exc.strerror or exc}); nothing was "
                         "left half-written") from None
    where = terminal_text(str(written.root))
    print(f"{'new course' if written.new_course else 'course'} {where}: exercise {args.exercise_id} written")
    for path in written.files:
        print("  " + terminal_text(path.relative_to(written.root).as_posix()))
    print(f"\nNext: grader --course {where} selftest --exercise {args.exercise_id}  (0 problems as written), then "
          "make it the exercise you mean: docs/authoring.md")
    return EXIT_OK


def mutation_selftest(args, course, catalog: Path) -> int:
    """`grader selftest --mutate`: the figure per exercise, the survivors, and every problem."""
    try:
        from grader.review.mutation import EQUIVALENTS, EquivalentsError, excerpt, figures, load_equivalents, mutants_of
        from grader.review.mutation import mutation_problems, run_mutation, sample
    except ImportError as exc:
        raise UsageError(f"--mutate needs mutmut ({exc.name} is missing): pip install -e '.[mutation]'") from None
    from grader.sandbox.levels import choose, strict_missing

    try:
        equivalents = load_equivalents(args.equivalents or catalog / EQUIVALENTS)
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
    """`grader batch`; SIGINT, SIGTERM and SIGHUP from here on stop it: its helper processes ended, what was graded
    kept, and said in one line (grader.batch.faults)."""
    from grader.batch.faults import Stopped, stopped_by_signals, stopped_line
    from grader.batch.progress import BatchProgress

    interactive = sys.stderr.isatty()
    progress = BatchProgress(on_change=lambda *event: show_progress(progress, interactive, args.lang, *event))
    try:
        with stopped_by_signals():
            return grade_class(args, progress, interactive)
    except Stopped as stop:
        print(("\r\x1b[K" if interactive else "") + "grader: " + stopped_line(progress.done, progress.total),
              file=sys.stderr, flush=True)
        return stop.status


def grade_class(args, progress, interactive: bool) -> int:
    from grader.batch.run import run_batch
    from grader.batch.cluster import ClusterError
    from grader.batch.roster import RosterError, read_roster
    from grader.sandbox.levels import strict_missing

    course = load_course(args.course)
    if not args.submissions.is_dir():
        raise UsageError(f"{args.submissions} is not a folder of submissions")
    if args.rejudge and (args.regrade or args.cluster):
        raise UsageError("--rejudge re-judges what this machine's gradings kept: not with --regrade or --cluster")
    # Where workers run elsewhere, each states the level it grades with; the gradebook records it.
    if args.sandbox == "strict" and args.cluster in (None, "local") and strict_missing():
        raise UsageError(f"the strict sandbox is unavailable: {strict_missing()}; pass --sandbox basic to grade "
                         "with weaker isolation")
    guard_basic_level(course, args.sandbox, args.lang, args.submissions)
    from grader.i18n import t
    from grader.policy import PolicyError, load_policy, read_submission_times

    try:
        roster = read_roster(args.roster) if args.roster else None
        load_policy(course)
        times = read_submission_times(args.submitted_at) if args.submitted_at else {}
    except (RosterError, PolicyError) as exc:
        raise UsageError(exc.said.render(args.lang)) from None
    if args.formats and roster is None:
        raise UsageError(t("--format {formats} needs --roster: the roster says who each student is to the system",
                           formats=",".join(args.formats)).render(args.lang))
    check_lms_roster(roster, args.formats, args.lang)
    try:
        tallies = run_batch(course, args.submissions.absolute(), args.out.absolute(), args.jobs, args.regrade,
                            args.sandbox, args.lang, progress, args.cluster, dict(args.cluster_option), roster,
                            args.excel, args.formats, times, rejudge=args.rejudge)
    except ClusterError as exc:
        raise UsageError(str(exc)) from None
    if interactive:
        print(file=sys.stderr)
    from grader.i18n import t

    print(t("{total} submissions: {graded} graded, {skipped} already in the gradebook; {csv}, {page}",
            total=tallies["total"], graded=tallies["graded"], skipped=tallies["skipped"],
            csv=str(args.out / "grades.csv"), page=str(args.out / "class.html")).render(args.lang))
    if tallies["rendered"]:   # reports of earlier runs, in another language
        print(t("{count} students' reports written again in this language, from their report.json (no grading)",
                count=tallies["rendered"]).render(args.lang))
    report_after_publishing(tallies, args.lang)
    if args.rejudge:
        from grader.grading.rejudge import print_diff

        print_diff(tallies, args.lang)
    return EXIT_OK


def check_lms_roster(roster, formats: tuple[str, ...], lang: str) -> None:
    """What --format canvas needs of the roster, found out before any grading."""
    from grader.classroom.lms import CANVAS_IDENTIFIERS
    from grader.i18n import t

    if "canvas" in formats and roster is not None and not any(s.column(c) for s in roster for c in CANVAS_IDENTIFIERS):
        raise UsageError(t("Canvas finds a student by ID, SIS User ID or SIS Login ID: the roster needs a column "
                           "canvas_id, sis_user_id or sis_login_id (a grade is never placed by a name)").render(lang))


def report_after_publishing(tallies: dict, lang: str) -> None:
    """What a batch (or an override) adds to its summary: reports written again for their grade, submission times
    that fit no submission, overrides no longer applied, a similarity comparison that did not finish."""
    from grader.i18n import t
    from grader.render.safe_text import terminal_text

    if tallies.get("regraded"):
        print(t("{count} students' reports written again for their grade (overrides, lateness), with no grading",
                count=tallies["regraded"]).render(lang))
    for name in tallies.get("unplaced_times", []):
        print("grader: " + terminal_text(t("warning: --submitted-at names {name}, which fits no submission",
                                           name=name).render(lang)), file=sys.stderr)
    for line in tallies.get("stale", []):
        print("grader: " + terminal_text(t("warning: override {target} of {student} is not applied: {said}",
                                           target=line.target or "*", student=line.student,
                                           said=line.said[lang]).render(lang)), file=sys.stderr)
    if tallies.get("similarity") is not None:
        print("grader: " + terminal_text(t("warning: similar code was not compared: {why}",
                                           why=tallies["similarity"]).render(lang)), file=sys.stderr)


def guard_basic_level(course, sandbox: str, lang: str, class_folder: Path | None) -> None:
    """At the basic level as root, student code runs as a grading uid and reads what every user can. A class
    folder other users can enter gives every classmate's code away: refused. The course's hidden files (the
    solutions, the hidden criteria, course.toml and its seed) readable by all are named in a warning."""
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
    secret = (course.solutions, course.root / COURSE_FILE)
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
    if summary is not None and summary["status"] not in (Status.PASSED, "graded"):
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
    from grader.classroom.handout import write_handout

    course = load_course(args.course)
    try:
        files = write_handout(course, args.out)
    except FileExistsError as exc:
        raise UsageError(str(exc)) from None
    print(f"{len(files)} files written to {args.out}")
    return EXIT_OK


def command_classroom_sync(args) -> int:
    from grader.batch.run import run_batch
    from grader.classroom.github import (MAX_WAIT_S, GitHub, GitHubError, classroom_settings, parse_time, sync,
                                         token_from_environment)
    from grader.sandbox.levels import strict_missing

    course = load_course(args.course)
    token = token_from_environment()
    if not token:
        raise UsageError("set GRADER_TOKEN (or GITHUB_TOKEN) to a token that can read the students' repositories "
                         "and write their commit statuses")
    if args.sandbox == "strict" and strict_missing():
        raise UsageError(f"the strict sandbox is unavailable: {strict_missing()}; pass --sandbox basic")
    guard_basic_level(course, args.sandbox, args.lang, None)   # the fetched files stay in --out, owner-only
    from grader.i18n import t
    from grader.policy import PolicyError, load_policy
    from grader.batch.roster import RosterError, read_roster

    deadline = classroom_settings(course).get("deadline")
    try:
        policy = load_policy(course)
        roster = read_roster(args.roster) if args.roster else None
    except (PolicyError, RosterError) as exc:
        raise UsageError(exc.said.render(args.lang)) from None
    if deadline is not None and policy is not None and policy.due is not None:
        raise UsageError(t("course.toml sets the deadline twice: [policy] due (with its late penalty and cutoff) "
                           "replaces [classroom] deadline; remove one").render(args.lang))
    try:
        deadline = parse_time(str(deadline)) if deadline is not None else None
    except ValueError:
        raise UsageError(f"course.toml: [classroom] deadline {deadline!r} is not an ISO 8601 time such as "
                         "2026-12-01T23:59:59Z") from None
    out = args.out.absolute()

    def grade_batch(submissions, gradebook):
        return run_batch(course, submissions, gradebook, args.jobs, True, args.sandbox, args.lang, roster=roster)

    github = GitHub(token, args.api_url, max_wait_s=MAX_WAIT_S if args.max_wait is None else args.max_wait)
    try:
        done = sync(course, github, args.org, args.prefix, out, grade_batch, deadline, args.lang, policy=policy,
                    roster=roster)
    except GitHubError as exc:   # the organisation's repositories could not be listed: nothing is known
        raise UsageError(f"GitHub: {exc}") from None
    return report_classroom_run(done, out)


def command_classroom_publish(args) -> int:
    """`grader classroom publish`: the release recorded, each student's whole scorecard posted (classroom.github)."""
    from grader.classroom.github import MAX_WAIT_S, GitHub, publish, token_from_environment

    course = load_course(args.course)
    token = token_from_environment()
    if not token:
        raise UsageError("set GRADER_TOKEN (or GITHUB_TOKEN) to a token that can write the students' commit statuses")
    out = gradebook_folder(args.out, args.lang)
    github = GitHub(token, args.api_url, max_wait_s=MAX_WAIT_S if args.max_wait is None else args.max_wait)
    return report_classroom_run(publish(course, github, args.org, args.prefix, out, args.lang), out)


def command_classroom_reports(args) -> int:
    """`grader classroom reports`: the students' pages as grader.feedback shows them, to hand out."""
    from grader.feedback import write_handed_out

    course = load_course(args.course)
    written = write_handed_out(course, gradebook_folder(args.out, args.lang), args.to.absolute(), args.lang)
    print(f"{len(written)} students' report.html and scorecard.md written to {args.to}")
    return EXIT_OK


def report_classroom_run(done, out: Path) -> int:
    """A line per repository of a sync or a publish, the calls it cost, and its exit status."""
    from grader.classroom.github import POSTED, iso
    from grader.render.safe_text import terminal_text

    for row in done.rows:
        where = f" {row.sha[:12]}" if row.sha else ""
        came = f" ({row.arrival.how} {iso(row.arrival.at)})" if row.arrival else ""
        stage = f" [{row.stage}]" if row.stage else ""
        print(terminal_text(f"{row.repository}{where}: {row.status}{stage}: {row.description}{came}"))
    posted = sum(r.status == POSTED for r in done.rows)
    print(f"{done.calls} calls ({done.not_modified} of them answered 304, free of the rate limit), {posted} "
          f"repositories posted, {done.left} left for the next run; gradebook in {out}")
    if done.stopped is not None:
        after = done.stopped.resume_at.astimezone().strftime("%H:%M %Z")
        print(f"stopped at GitHub's rate limit after {done.repositories - done.left} of {done.repositories} "
              f"repositories; run the same command after {after} to finish")
        return EXIT_RATE_LIMITED
    return EXIT_INCOMPLETE if done.left else EXIT_OK


def gradebook_folder(path: Path, lang: str) -> Path:
    """The folder `grader batch` wrote, given it or its gradebook.sqlite."""
    from grader.i18n import t

    folder = path.parent if path.name == "gradebook.sqlite" else path
    if not (folder / "gradebook.sqlite").is_file():
        raise UsageError(t("{path} holds no gradebook.sqlite: name the folder grader batch --out wrote",
                           path=str(path)).render(lang))
    return folder.absolute()


def command_override(args) -> int:
    """`grader override`: set, remove or list the instructor's overrides, then write the student's report and the
    class files again (no grading)."""
    from grader.batch.run import batch_lock, publish, stored_settings
    from grader.i18n import t
    from grader.policy import PolicyError
    from grader.render.safe_text import terminal_text

    course = load_course(args.course)
    probe_lang = args.lang or "en"
    out = gradebook_folder(args.gradebook, probe_lang)
    settings = stored_settings(out)
    lang = args.lang or settings["lang"]
    if args.list:
        if args.student or args.points is not None or args.comment or args.remove:
            raise UsageError(t("--list takes the gradebook alone").render(lang))
        return list_overrides(course, out, settings, lang)
    if not args.student:
        raise UsageError(t("name the student: grader override GRADEBOOK STUDENT [EXERCISE[/CRITERION]] --points N "
                           "--comment TEXT").render(lang))
    if args.remove and (args.points is not None or args.comment):
        raise UsageError(t("--remove takes no --points or --comment").render(lang))
    if not args.remove and (args.points is None or not (args.comment or "").strip()):
        raise UsageError(t("an override needs --points N and --comment TEXT (the comment is shown to the student)")
                         .render(lang))
    exercise, _, criterion = args.target.partition("/")
    try:
        with batch_lock(out):   # no batch writes the gradebook or its pages meanwhile
            name = change_override(course, out, settings, args, exercise, criterion, lang)
            tallies = publish(course, out, settings["lang"], settings["roster"], settings["excel"],
                              settings["formats"])
    except PolicyError as exc:
        raise UsageError(str(exc)) from None
    said = (t("override of {target} for {student} removed", target=args.target or t("the whole grade"), student=name)
            if args.remove else
            t("override stored: {target} of {student} earns {points:g}", target=args.target or t("the whole grade"),
              student=name, points=args.points))
    print(terminal_text(said.render(lang)))
    print(terminal_text(t("{count} students' reports and the class files written again (no grading)",
                          count=tallies["rendered"] + tallies["regraded"]).render(lang)))
    return EXIT_OK


def command_review(args) -> int:
    """`grader review`: serve the review pages until Ctrl-C; one address per TA, printed before the first request."""
    import socket

    import uvicorn

    from grader.batch.grades import author
    from grader.batch.run import stored_settings
    from grader.i18n import t
    from grader.review_app.app import ReviewSettings, create_app, new_token, opened

    course = load_course(args.course)
    out = gradebook_folder(args.gradebook, args.lang or "en")
    lang = args.lang or stored_settings(out)["lang"]
    names = [name.strip() for name in args.ta] if args.ta else [author()]
    if any(not name for name in names) or len(set(names)) != len(names):
        raise UsageError(t("each --ta names one TA, once").render(lang))
    if not any(q for ex in course.exercises for q in ex.questions):
        raise UsageError(t("the course asks no written question: nothing to review").render(lang))
    tas = {new_token(): name for name in names}
    settings = ReviewSettings(out=out, course=course, tas=tas, anonymise=args.anonymise, lang=lang)
    with opened(settings):   # a gradebook of a newer grader, damaged or unreadable: said now, before serving
        pass
    try:
        family = socket.AF_INET6 if ":" in args.host else socket.AF_INET
        listening = socket.socket(family, socket.SOCK_STREAM)
        listening.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listening.bind((args.host, args.port))
        listening.listen(128)   # before the addresses are printed: a browser opening one at once is queued
    except OSError as exc:
        raise UsageError(t("cannot serve on {host} port {port}: {error}", host=args.host, port=args.port,
                           error=exc.strerror or str(exc)).render(lang)) from None
    port = listening.getsockname()[1]
    # every address of the machine: the TAs reach it by its name
    shown_host = socket.gethostname() if args.host in ("0.0.0.0", "::") \
        else f"[{args.host}]" if ":" in args.host else args.host
    for token, name in tas.items():
        print(f"review: {name} http://{shown_host}:{port}/{token}/", flush=True)
    config = uvicorn.Config(create_app(settings), log_level="warning", access_log=False, lifespan="off")
    # uvicorn stops on Ctrl-C or SIGTERM, closes its connections, then raises the signal again: SIGINT comes back
    # as KeyboardInterrupt, the others through the handlers set here
    stopping = [sig for sig in ("SIGTERM", "SIGHUP") if hasattr(signal, sig)]
    before = {sig: signal.signal(getattr(signal, sig), _review_stopped) for sig in stopping}
    try:
        uvicorn.Server(config).run(sockets=[listening])
        status = EXIT_OK
    except KeyboardInterrupt:
        status = SIGNALLED + signal.SIGINT
    except ReviewStopped as stopped:
        status = SIGNALLED + stopped.signum
    finally:
        listening.close()
        for sig, handler in before.items():
            signal.signal(getattr(signal, sig), handler)
    print(t("review stopped").render(lang), file=sys.stderr)
    return status


class ReviewStopped(Exception):
    """`grader review` was stopped by a signal other than Ctrl-C."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


def _review_stopped(signum, frame):
    raise ReviewStopped(signum)


def change_override(course, out: Path, settings: dict, args, exercise: str, criterion: str, lang: str) -> str:
    """Store or remove the override the arguments say; the submission's name it is keyed by."""
    from grader.batch.gradebook import Gradebook, graded_lines, grader_key
    from grader.batch.grades import Override, author, now
    from grader.batch.manual import written_count
    from grader.i18n import t

    book = Gradebook(out / "gradebook.sqlite")
    try:
        lines = graded_lines(course, book, grader_key(course), settings["roster"])
        name = resolve_student(args.student, lines, lang)
        if args.remove:
            if not book.remove_override(name, exercise, criterion):
                raise UsageError(t("{student} has no override of {target}", student=name,
                                   target=args.target or t("the whole grade")).render(lang))
            return name
        line = next(line for line in lines if line.name == name)
        if line.grade is None:
            raise UsageError(t("{student} has no verdict to correct: {reason}", student=name,
                               reason=(line.reason or {}).get(lang, "")).render(lang))
        most = target_maximum(course, exercise, criterion, lang, written_count(book, course))
        if args.points > most:
            raise UsageError(t("{points:g} points is more than {target} is worth ({most:g})", points=args.points,
                               target=args.target or t("the whole grade"), most=most).render(lang))
        book.set_override(Override(name, exercise, criterion, args.points, args.comment.strip(),
                                   args.author or author(), now()))
        return name
    finally:
        book.close()


def resolve_student(given: str, lines, lang: str) -> str:
    """The gradebook's submission a STUDENT argument names: a submission's name, else a roster student's id (who
    must have one submission)."""
    from grader.i18n import t

    names = [line.name for line in lines if line.submission is not None]
    if given in names:
        return given
    theirs = [line.name for line in lines if line.student is not None and line.submission is not None
              and line.student.id.casefold() == given.casefold()]
    if len(theirs) == 1:
        return theirs[0]
    if theirs:
        raise UsageError(t("{student} has {count} submissions ({names}): name one", student=given, count=len(theirs),
                           names=", ".join(theirs)).render(lang))
    if any(line.student is not None and line.student.id.casefold() == given.casefold() for line in lines):
        raise UsageError(t("{student} has no submission to correct", student=given).render(lang))
    raise UsageError(t("the gradebook holds no submission or roster student {student}", student=given).render(lang))


def target_maximum(course, exercise: str, criterion: str, lang: str, written: bool = False) -> float:
    """What an override's target is worth, once it is known to be one of the course's (an exercise's written
    questions included when `written` answers count: grader.batch.grades)."""
    from grader.batch.grades import course_max, exercise_max
    from grader.i18n import t

    if not exercise:
        return course_max(course, written)
    known = {ex.id: ex for ex in course.exercises}
    if exercise not in known:
        raise UsageError(t("the course has no exercise {exercise}; it has {known}", exercise=exercise,
                           known=", ".join(known)).render(lang))
    ex = known[exercise]
    if not criterion:
        return exercise_max(ex, written)
    if criterion not in ex.points:
        raise UsageError(t("exercise {exercise} has no criterion {criterion}; it has {known}", exercise=exercise,
                           criterion=criterion, known=", ".join(ex.points)).render(lang))
    return ex.points[criterion]


def list_overrides(course, out: Path, settings: dict, lang: str) -> int:
    """One line per override: student, target, the points it gives and the grader gave, comment, author, time; one
    the grading no longer holds a target for says it is not applied."""
    from grader.batch.gradebook import Gradebook, class_summary, grader_key
    from grader.i18n import t
    from grader.render.safe_text import terminal_text

    book = Gradebook(out / "gradebook.sqlite")
    try:
        lines = class_summary(course, book, grader_key(course), settings["roster"]).overrides
    finally:
        book.close()
    for o in lines:
        target = o.target or t("the whole grade").render(lang)
        if o.graded is not None:
            said = t("{student} {target}: {points:g} (graded {graded:g}) · {comment} · {author}, {at}",
                     student=o.student, target=target, points=o.points, graded=o.graded, comment=o.comment,
                     author=o.author, at=o.at)
        else:
            said = t("{student} {target}: {points:g}, NOT APPLIED: {why} · {comment} · {author}, {at}",
                     student=o.student, target=target, points=o.points, why=o.said[lang], comment=o.comment,
                     author=o.author, at=o.at)
        print(terminal_text(said.render(lang)))
    print(t("{count} overrides", count=len(lines)).render(lang))
    return EXIT_OK


def command_lms_canvas(args) -> int:
    """`grader lms canvas`: each roster student's final grade and scorecard to a Canvas assignment."""
    from grader.batch.run import stored_settings
    from grader.i18n import t
    from grader.classroom.lms import FAILED, TOKEN_VARIABLE, LmsError, RedirectRefused, canvas_push, said_of
    from grader.render.safe_text import terminal_text
    from grader.batch.roster import RosterError, read_roster

    course = load_course(args.course)
    out = gradebook_folder(args.gradebook, args.lang or "en")
    settings = stored_settings(out)
    lang = args.lang or settings["lang"]
    try:
        roster = read_roster(args.roster) if args.roster else settings["roster"]
    except RosterError as exc:
        raise UsageError(exc.said.render(lang)) from None

    def show(sent) -> None:
        print(terminal_text(said_of(sent).render(lang)), flush=True)

    try:
        sent = canvas_push(course, out, roster, args.canvas_course, args.assignment, args.url,
                           os.environ.get(TOKEN_VARIABLE), args.dry_run, args.force, show, lang)
    except RedirectRefused as exc:
        print(f"grader: {terminal_text(exc.said.render(lang))}", file=sys.stderr)
        return EXIT_REDIRECT_REFUSED
    except LmsError as exc:
        raise UsageError(exc.said.render(lang)) from None
    counts = {status: sum(s.status == status for s in sent) for status in {s.status for s in sent}}
    print(t("{students} students: {sent} sent, {unchanged} unchanged, {skipped} not sent, {failed} failed",
            students=len(sent), sent=counts.get("sent", 0) + counts.get("dry run", 0),
            unchanged=counts.get("unchanged", 0), skipped=counts.get("skipped", 0),
            failed=counts.get(FAILED, 0)).render(lang))
    return EXIT_INCOMPLETE if counts.get(FAILED) else EXIT_OK


def command_validate(args) -> int:
    """course.toml alone: the schema's checks (load_course raises with every problem), then [policy], which
    grader.policy reads and checks in the language of the command that uses it."""
    from grader.course import COURSE_FILE
    from grader.policy import PolicyError, load_policy

    course = load_course(args.course)
    path = course.root / COURSE_FILE
    try:
        load_policy(course)
    except PolicyError as exc:
        raise CourseError(f"{path}: {exc.said.render('en').removeprefix(f'{COURSE_FILE}: ')}") from None
    print(f"{path}: valid ({len(course.exercises)} exercises)")
    return EXIT_OK


def command_gradescope(args) -> int:
    """The bundle, after the Autograder Settings the course needs. A setting stated with --gradescope-* that gives
    less memory or time than the course's limits can take is refused (a grading past it is killed with no results);
    Gradescope's defaults, when nothing is stated, and too few CPUs are warned about."""
    from grader.classroom.gradescope import (GRADESCOPE_DEFAULT_CPUS, GRADESCOPE_DEFAULT_MEMORY_MB,
                                             GRADESCOPE_DEFAULT_TIMEOUT_MIN, GRADESCOPE_MAX_TIMEOUT_MIN, Hardware,
                                             build_bundle, needs, settings_text, shortfall)

    course = load_course(args.course)
    print(settings_text(course))
    needed, _ = needs(course)
    if (args.gradescope_timeout_min or 0) > GRADESCOPE_MAX_TIMEOUT_MIN:
        raise UsageError(f"--gradescope-timeout-min {args.gradescope_timeout_min}: Gradescope allows at most "
                         f"{GRADESCOPE_MAX_TIMEOUT_MIN} minutes")
    if needed.timeout_min > GRADESCOPE_MAX_TIMEOUT_MIN:
        raise UsageError(f"the course needs a timeout of {needed.timeout_min} minutes and Gradescope allows at most "
                         f"{GRADESCOPE_MAX_TIMEOUT_MIN}: lower the exercises' timeout_s in course.toml")
    stated = args.gradescope_memory_mb is not None or args.gradescope_timeout_min is not None
    chosen = Hardware(args.gradescope_memory_mb or GRADESCOPE_DEFAULT_MEMORY_MB,
                      args.gradescope_timeout_min or GRADESCOPE_DEFAULT_TIMEOUT_MIN,
                      args.gradescope_cpus or GRADESCOPE_DEFAULT_CPUS)
    fatal, slow = shortfall(course, chosen)
    which = (f"the chosen Gradescope setting ({chosen.short()}) gives" if stated or args.gradescope_cpus is not None
             else f"Gradescope's default Autograder Settings ({chosen.short()}) give")
    if fatal and stated:
        raise UsageError(f"{which} {'; '.join(fatal)} (course.toml's memory_mb and timeout_s): choose a larger "
                         "setting, or lower those limits")
    if fatal or slow:
        print(f"grader: warning: {which} {'; '.join(fatal + slow)}: choose at least {needed.short()} in the "
              "assignment's Autograder Settings", file=sys.stderr)
    names = build_bundle(course, args.out, args.lang)
    print(f"{args.out}: {len(names)} files (setup.sh, run_autograder, the course)")
    return EXIT_OK


def command_gradescope_run(args) -> int:
    from grader.classroom.gradescope import UnsafeToGrade, run_in_gradescope

    try:
        print(run_in_gradescope(load_course(args.course), args.root, args.lang))
    except UnsafeToGrade as exc:   # no results.json: Gradescope shows the instructor a failed autograder run
        raise UsageError(f"refusing to grade: {exc}") from None
    return EXIT_OK


def command_check(args) -> int:
    from grader.grading.precheck import CheckRefused, run_check, submission_folder

    course = load_course(getattr(args, "course", None))
    try:
        submission = submission_folder(course, args.submission, Path.cwd())
    except CheckRefused as exc:
        raise UsageError(exc.said.render(args.lang)) from None
    ids = [args.exercise] if args.exercise else [e.id for e in course.exercises]
    for ex in ids:
        course.exercise(ex)
    return run_check(course, submission, ids, args.lang)
