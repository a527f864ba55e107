"""A class's `grader batch` stopped again and again, resumed each time, against an uninterrupted run:
`python bench/fault_soak.py [--students 20] [--interruptions 20] [--seed N] [--exercises heads,decoder_block]`.

Grades a class of STUDENTS (correct, buggy and empty submissions, some as zip files) once without a pause, then
again into another folder, stopped INTERRUPTIONS times at random points: SIGINT to the batch alone or to its
process group (Ctrl-C), SIGTERM, SIGHUP, SIGKILL of the batch, or SIGKILL of one of its helper processes (the
warm grading process, its judging server, its fork server) followed by a signal that stops the batch once it has
gone on past the kill. Each stop is checked as the README's reliability section promises: a signal ends the batch
within STOP_SECONDS, with 128 + its number, "stopped after N of M; the same command resumes" as its last line and
no traceback; no process it started is left. The same command then resumes it; in the end its grades.csv must be
the uninterrupted run's, byte for byte. Prints each interruption and the figure (time, interruptions, result);
exits 1 when any check fails. tests/test_faults.py runs it on a batch of 8 with 5 interruptions.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import random
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from conftest import course_copy  # noqa: E402 - tests/, for a course of some exercises

STOP_SECONDS = 2.0        # from the signal to the batch's exit
LEFT_SECONDS = 2.0        # for what the batch started to be gone after it (a helper polls for its parent's death)
RUN_SECONDS = 900.0       # for one batch run to end by itself
STOPPED = re.compile(r"grader: stopped (after \d+ of \d+|before any submission was graded); the same command resumes")
# What a helper process's command line holds: the warm grading process, its judging server, its fork server.
HELPERS = {"grading process": "grader.batch.warm", "judging server": "grader.judge.server",
           "fork server": "--socket-fd"}
SIGNALS = {"SIGINT": signal.SIGINT, "SIGTERM": signal.SIGTERM, "SIGHUP": signal.SIGHUP}
# The ways a batch is interrupted: a signal to it (to its group: "Ctrl-C"), its SIGKILL, or a helper's SIGKILL.
ACTIONS = ("SIGINT", "Ctrl-C", "SIGTERM", "SIGHUP", "SIGKILL", *(f"kill {h}" for h in HELPERS))


@dataclasses.dataclass
class Round:
    action: str
    stored_before: int
    stored_after: int
    seconds_to_stop: float | None
    exit: int | None
    problems: list[str]


def make_class(folder: Path, students: int, exercises: list[str]) -> Path:
    """STUDENTS submissions: every fifth correct, every fifth empty, the others one exercise's mutant (a buggy one)
    beside correct others; every seventh handed in as a zip of its folder."""
    from grader.course import load_course
    from grader.review.selftest import catalog_mutants

    course = load_course(ROOT)
    mutants = {ex: list(catalog_mutants(course, ROOT / "tests", ex).values()) for ex in exercises}
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(students):
        student = folder / f"student{i:02d}"
        student.mkdir()
        if i % 5 == 4:
            continue
        for k, ex in enumerate(exercises):
            target = student / ex / course.exercise(ex).file
            target.parent.mkdir(parents=True)
            if i % 5 != 0 and k == i % len(exercises) and mutants[ex]:   # a mutant catalog entry is its text
                target.write_text(mutants[ex][i % len(mutants[ex])])
            else:
                shutil.copyfile(course.solution(course.exercise(ex)), target)
        if i % 7 == 6:
            with zipfile.ZipFile(folder / f"student{i:02d}.zip", "w") as zf:
                for f in sorted(student.rglob("*")):
                    if f.is_file():
                        zf.write(f, f.relative_to(folder).as_posix())
            shutil.rmtree(student)
    return folder


def batch_command(course: Path, classroom: Path, out: Path, jobs: int) -> list[str]:
    return [sys.executable, "-m", "grader", "--course", str(course), "batch", str(classroom), "--out", str(out),
            "--jobs", str(jobs)]


def stored(out: Path) -> int:
    """Submissions the gradebook holds a verdict of (a grader error is graded again)."""
    try:
        db = sqlite3.connect(f"file:{out / 'gradebook.sqlite'}?mode=ro", uri=True, timeout=0.1)
        try:
            return db.execute("SELECT COUNT(*) FROM submissions WHERE status != 'grader_error'").fetchone()[0]
        finally:
            db.close()
    except sqlite3.Error:
        return 0


def descendants(pid: int) -> list[psutil.Process]:
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def helper(pid: int, which: str) -> psutil.Process | None:
    for proc in descendants(pid):
        try:
            if any(HELPERS[which] in part for part in proc.cmdline()):
                return proc
        except psutil.Error:
            continue
    return None


def alive(procs: list[psutil.Process]) -> list[str]:
    left = []
    for proc in procs:
        try:
            if proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE:
                left.append(f"{proc.pid} {' '.join(proc.cmdline())[:80]}")
        except psutil.Error:
            continue
    return left


def wait_for(condition, seconds: float, step: float = 0.05) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(step)
    return condition()


@dataclasses.dataclass
class Pace:
    """How the uninterrupted run went: seconds from its first line to its first stored submission (the grading
    processes starting), then per submission."""
    startup_s: float
    per_submission_s: float


def run_through(command: list[str], out: Path, students: int, log: Path) -> tuple[int, str, Pace]:
    """An uninterrupted run: its exit status, what it said, and its pace."""
    with open(log, "w") as err:
        proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=err, start_new_session=True)
    wait_for(lambda: proc.poll() is not None or bool(log.read_text(errors="replace").strip()), RUN_SECONDS)
    begun = time.monotonic()
    wait_for(lambda: proc.poll() is not None or stored(out) > 0, RUN_SECONDS)
    first = time.monotonic()
    wait_for(lambda: proc.poll() is not None or stored(out) >= students, RUN_SECONDS)
    last = time.monotonic()
    proc.wait(RUN_SECONDS)
    return proc.returncode, log.read_text(errors="replace"), Pace(first - begun, (last - first) / max(1, students - 1))


def interrupt(command: list[str], out: Path, action: str, pace: Pace, share: int, rng: random.Random,
              log: Path) -> Round:
    """One run of the batch, interrupted by `action` at a random point once it has begun: as often while its
    grading processes start (a time drawn within the uninterrupted run's start) as once a number of submissions
    drawn up to `share` more is stored (the gradings come in a burst once the judge is up: counted, not timed)."""
    before = stored(out)
    with open(log, "w") as err:
        proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=err, start_new_session=True)
    problems: list[str] = []
    # once it has begun (its first line: a signal before the batch has read its arguments ends it as Python does)
    wait_for(lambda: proc.poll() is not None or bool(log.read_text(errors="replace").strip()), RUN_SECONDS)
    if rng.random() < 0.5:   # (a later run starts sooner, its caches filled: never past its share of the work)
        wait_for(lambda: proc.poll() is not None or stored(out) >= before + share, rng.uniform(0, pace.startup_s))
    else:
        target = before + rng.randint(1, share)
        wait_for(lambda: proc.poll() is not None or stored(out) >= target, RUN_SECONDS, step=0.01)
    if action.startswith("kill "):
        which = action.removeprefix("kill ")
        found = wait_for(lambda: proc.poll() is not None or helper(proc.pid, which) is not None, 60)
        victim = helper(proc.pid, which) if found else None
        if victim is not None:
            victim.kill()
            # the batch goes on past the death: one submission more, then it is stopped as a user would
            now = stored(out)
            wait_for(lambda: proc.poll() is not None or stored(out) > now, RUN_SECONDS)
        elif proc.poll() is None:
            problems.append(f"no {which} found")
        action = f"{action}, then SIGTERM"
        signum = signal.SIGTERM
    elif action == "SIGKILL":
        signum = signal.SIGKILL
    else:
        signum = SIGNALS.get(action, signal.SIGINT)
    procs = descendants(proc.pid)
    sent = time.monotonic()
    if proc.poll() is None:
        (os.killpg if action == "Ctrl-C" else os.kill)(proc.pid, signum)
    try:
        proc.wait(RUN_SECONDS)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        problems.append("did not stop")
    took = time.monotonic() - sent
    said = log.read_text(errors="replace")
    finished = proc.returncode == 0   # it ended before the signal came
    if signum != signal.SIGKILL and not finished:
        if took > STOP_SECONDS:
            problems.append(f"stopped in {took:.1f} s")
        if proc.returncode != 128 + signum:
            problems.append(f"exit {proc.returncode}, not {128 + signum}")
        last = said.strip().splitlines()[-1:] or [""]
        if not STOPPED.fullmatch(last[0].strip()):
            problems.append(f"its last line is {last[0][-200:]!r}")
    if "Traceback" in said:
        problems.append("a traceback: " + said[said.index("Traceback"):][-400:])
    wait_for(lambda: not alive(procs), LEFT_SECONDS)
    problems += [f"left behind: {p}" for p in alive(procs)]
    return Round(action, before, stored(out), None if finished else took, proc.returncode, problems)


def soak(course: Path, classroom: Path, work: Path, students: int, actions: list[str], seed: int, jobs: int = 2,
         say=print) -> tuple[list[Round], list[str]]:
    """The rounds, and every problem (the grades of the interrupted batch included)."""
    rng = random.Random(seed)
    reference, out = work / "uninterrupted", work / "interrupted"
    code, said, pace = run_through(batch_command(course, classroom, reference, jobs), reference, students,
                                   work / "uninterrupted.log")
    if code != 0:
        return [], [f"the uninterrupted run ended with {code}: {said[-2000:]}"]
    rounds, problems = [], []
    for i, action in enumerate(actions):
        share = max(1, (students - stored(out)) // (len(actions) - i))   # the work spread over the rounds
        round_ = interrupt(batch_command(course, classroom, out, jobs), out, action, pace, share, rng,
                           work / f"round{i}.log")
        rounds.append(round_)
        took = f"stopped in {round_.seconds_to_stop:.2f} s" if round_.seconds_to_stop is not None else "had ended"
        say(f"{i + 1:>3}. {round_.action}: {round_.stored_before} -> {round_.stored_after} of {students} stored, "
            f"{took}, exit {round_.exit}" + (f"  PROBLEMS: {round_.problems}" if round_.problems else ""))
        problems += [f"{round_.action}: {p}" for p in round_.problems]
    done = subprocess.run(batch_command(course, classroom, out, jobs), capture_output=True, text=True,
                          timeout=RUN_SECONDS)
    if done.returncode != 0:
        problems.append(f"the resumed run ended with {done.returncode}: {done.stderr[-2000:]}")
    elif (out / "grades.csv").read_bytes() != (reference / "grades.csv").read_bytes():
        problems.append("grades.csv differs from the uninterrupted run's")
    return rounds, problems


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--students", type=int, default=20)
    parser.add_argument("--interruptions", type=int, default=20)
    parser.add_argument("--seed", type=int, default=None, help="default: drawn, and printed")
    parser.add_argument("--exercises", default="heads,decoder_block", help="the course's exercises graded")
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args()
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    rng = random.Random(seed)
    actions = [ACTIONS[i % len(ACTIONS)] for i in range(args.interruptions)]
    rng.shuffle(actions)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="fault-soak-") as tmp:
        work = Path(tmp)
        exercises = args.exercises.split(",")
        course = course_copy(work / "course", exercises)
        classroom = make_class(work / "class", args.students, exercises)
        print(f"seed {seed}: a batch of {args.students} ({', '.join(exercises)}), {len(actions)} interruptions")
        rounds, problems = soak(course, classroom, work, args.students, actions, rng.randrange(1 << 30), args.jobs)
    print(f"{time.monotonic() - started:.0f} s, {len(rounds)} interruptions, "
          + ("grades.csv equal to the uninterrupted run's, every stop as promised" if not problems else
             f"{len(problems)} problems:"))
    for p in problems:
        print("  " + p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
