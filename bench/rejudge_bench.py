"""Re-judging a class of N stored submissions: `python bench/rejudge_bench.py [--n 100] [--jobs 2]`.

Grades two submissions (the reference solution and the bundled sample) once, with every exercise, then makes a
class of N by copying them under N names, their kept observations and gradebook rows with them (the same files,
so the same content hash: what a class of N graded before would hold) and their report files (written once for
each name, untimed, as the class's grading left them), and times `grader batch --rejudge` over it, each in a
fresh `grader` process (imports included; the class's comparison of code counted as done, as a graded class's
is), these ways:

- points changed: a copy of the course with one criterion worth more; every exercise's kept outcomes stand (its
  judge version is the same), so no judge starts: each report is built again and, its points changed, written;
- every criterion judged: the kept outcomes dropped first (as a change to every exercise's criteria would make
  them), so every submission is judged again; observations alike (the same bytes, as these copies are) are
  judged once per re-judging; each report comes out as it is on the disk (nothing changed), so none is written;
- every criterion judged, none alike: the same with that reuse switched off (GRADER_REJUDGE_ALIKE=0), so each of
  the N is judged in a judging child of its own, as a class of N distinct students would be;
- the same, every report written: the report files' stamps removed first, so each report is rendered and written
  again, as a change to every student's outcomes would make it;
- one exercise's criteria changed, none alike: a copy of the package with one tolerance of one criteria module
  changed (CHANGED_CRITERIA), run from there, the reuse switched off: that exercise alone is judged again, in a
  judging child per submission, and the others' kept outcomes stand.

`stored_class` and `rejudge_times` are what bench/grade_bench.py prints its re-judging figure from.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import resource
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

TABLES = ("submissions", "results", "observed", "sources")
CHANGED_POINTS = ("split_values", 2, 5)   # the criterion of course.toml the points-changed copy makes worth more
# the exercise whose criteria module the criteria-changed copy edits, and the edit: a tolerance, as a fix would be
CHANGED_CRITERIA = ("rope", "VALUE_TOLERANCE = 1e-5 ", "VALUE_TOLERANCE = 2e-5 ")


def stored_class(folder: Path, n: int, jobs: int) -> tuple[Path, Path]:
    """(the class folder, its gradebook folder): N submissions as a grading of each would have stored them."""
    from grader.batch.run import run_batch
    from grader.course import load_course

    course = load_course(ROOT)
    seeds = folder / "seeds"
    shutil.copytree(ROOT / "examples" / "submissions" / "sample", seeds / "sample")
    for ex in course.exercises:
        (seeds / "reference" / ex.id).mkdir(parents=True)
        shutil.copyfile(course.solution(ex), seeds / "reference" / ex.id / ex.file)
    out = folder / "out"
    run_batch(course, seeds, out, jobs, False, "strict", "en")
    klass = folder / "class"
    db = sqlite3.connect(out / "gradebook.sqlite")
    for i in range(n):
        seed = ("reference", "sample")[i % 2]
        name = f"s{i:03d}"
        shutil.copytree(seeds / seed, klass / name)
        for table in TABLES:
            columns = [row[1] for row in db.execute(f"PRAGMA table_info({table})")]
            picked = ", ".join("?" if c == "submission" else c for c in columns)
            db.execute(f"INSERT OR REPLACE INTO {table} SELECT {picked} FROM {table} WHERE submission=?",
                       (name, seed))
    for table in TABLES:   # the two graded only to be copied are no students of the class
        db.execute(f"DELETE FROM {table} WHERE submission IN ('reference', 'sample')")
    db.commit()
    db.close()
    _compared_before(course, out)
    return klass, out


def _compared_before(course, out: Path) -> None:
    """Record the class's comparison of code as done, as the grading of a real class does it once: a re-judging
    compares again only when the files changed. (Compared for real, these copies of two submissions would make
    thousands of pairs no real class has: the comparison is marked done, with no pairs.)"""
    import grader.review.similarity
    from grader.batch.run import compare_class

    compare = grader.review.similarity.compare_in_child
    grader.review.similarity.compare_in_child = lambda course, submissions, *args: []
    try:
        compare_class(course, out)
    finally:
        grader.review.similarity.compare_in_child = compare


def changed_course(folder: Path) -> Path:
    """This course with CHANGED_POINTS's criterion worth more: its exercises, solutions and templates shared."""
    folder.mkdir(parents=True)
    for name in ("exercises", "solutions", "templates"):
        (folder / name).symlink_to(ROOT / name)
    name, old, new = CHANGED_POINTS
    text, count = re.subn(rf"(?m)^{name} = {old}$", f"{name} = {new}", (ROOT / "course.toml").read_text())
    assert count == 1, f"course.toml sets {name} = {old} once"
    (folder / "course.toml").write_text(text)
    return folder


def criteria_changed(folder: Path) -> Path:
    """This course and a copy of the package with CHANGED_CRITERIA's edit, as an instructor's fix of one criterion is:
    a `grader` started there (its working folder) imports that package. Readable by others, the bench's temporary
    folder above it included: the strict sandbox's user must be able to read the package it would run."""
    folder.mkdir(parents=True)
    for readable in (folder.parent, folder):
        readable.chmod(0o755)
    shutil.copytree(ROOT / "grader", folder / "grader", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("exercises", "solutions", "templates", "course.toml"):
        (folder / name).symlink_to(ROOT / name)
    module, old, new = CHANGED_CRITERIA
    path = folder / "grader" / "criteria" / f"{module}.py"
    text = path.read_text(encoding="utf-8")
    assert text.count(old) == 1, f"{path.name} sets {old.strip()} once"
    path.write_text(text.replace(old, new), encoding="utf-8")
    return folder


def _drop_kept_outcomes(out: Path) -> None:
    db = sqlite3.connect(out / "gradebook.sqlite")
    for rowid, record in db.execute("SELECT rowid, record FROM observed").fetchall():
        data = json.loads(record)
        data.pop("judged", None)
        db.execute("UPDATE observed SET record=? WHERE rowid=?", (json.dumps(data), rowid))
    db.commit()
    db.close()


@dataclass
class Rejudged:
    """One `grader batch --rejudge`: wall seconds, CPU seconds of its whole process tree (None where it cannot be
    counted), and the load average (1 min) before and after."""

    wall_s: float
    cpu_s: float | None
    cpu_of: str          # what cpu_s counts
    load: tuple[float, float]


def _rejudge(course: Path, klass: Path, out: Path, jobs: int, env: dict[str, str] | None = None,
             package: Path = ROOT) -> Rejudged:
    """`package`: the folder whose `grader` package runs (the command's working folder)."""
    command = [sys.executable, "-m", "grader", "--course", str(course), "batch", str(klass), "--out", str(out),
               "--jobs", str(jobs), "--rejudge"]
    before = os.getloadavg()[0]
    with _tree_cpu() as (enter, counted):
        t0 = time.perf_counter()
        done = subprocess.run(command, capture_output=True, text=True, cwd=package, preexec_fn=enter,
                              env={**os.environ, **(env or {})})
        wall = time.perf_counter() - t0
    said = re.search(r"(\d+) submissions re-judged", done.stdout)
    if done.returncode != 0 or said is None or int(said.group(1)) != len(list(klass.iterdir())):
        sys.exit(f"the re-judging failed ({done.returncode}):\n{done.stdout[-1500:]}\n{done.stderr[-1500:]}")
    return Rejudged(wall, counted["cpu_s"], counted["of"], (before, os.getloadavg()[0]))


@contextlib.contextmanager
def _tree_cpu():
    """(a function for the command's process to run first, a dict that holds its CPU seconds once this ends). The
    whole tree's (the judging server, its children, the report processes, which no process waits for) in a
    control group of its own where this process may make one (cgroup v2's cpu.stat, v1's cpuacct); else the
    command's and the children it waited for (resource.RUSAGE_CHILDREN)."""
    counted: dict = {"cpu_s": None, "of": "the grader process and the children it waited for only"}
    v2, v1 = Path("/sys/fs/cgroup"), Path("/sys/fs/cgroup/cpuacct")
    root = v2 if (v2 / "cgroup.controllers").exists() else v1 if (v1 / "cpuacct.usage").exists() else None
    group = None if root is None else root / f"rejudge-bench-{os.getpid()}"
    try:
        if group is not None:
            group.mkdir()
    except OSError:   # not ours to make (no root, a delegated hierarchy elsewhere)
        group = None
    procs = str(group / "cgroup.procs") if group is not None else None

    def enter() -> None:
        if procs is not None:
            with open(procs, "w") as fh:
                fh.write(str(os.getpid()))

    spent = resource.getrusage(resource.RUSAGE_CHILDREN)
    try:
        yield enter, counted
    finally:
        if group is None:
            now = resource.getrusage(resource.RUSAGE_CHILDREN)
            counted["cpu_s"] = now.ru_utime + now.ru_stime - spent.ru_utime - spent.ru_stime
        else:
            time.sleep(0.5)   # the report processes' fork server ends once the grader has
            if (group / "cpu.stat").exists():
                text = (group / "cpu.stat").read_text()
                counted["cpu_s"] = int(re.search(r"usage_usec (\d+)", text).group(1)) / 1e6
            else:
                counted["cpu_s"] = int((group / "cpuacct.usage").read_text()) / 1e9
            counted["of"] = "its whole process tree, by control group"
            for _ in range(20):
                for pid in (group / "cgroup.procs").read_text().split():   # a straggler: back where we are
                    with contextlib.suppress(OSError):
                        (group.parent / "cgroup.procs").write_text(pid)
                try:
                    group.rmdir()
                    break
                except OSError:
                    time.sleep(0.1)


def rejudge_runs(folder: Path, n: int, jobs: int) -> dict[str, Rejudged]:
    """`grader batch --rejudge` over a stored class of N: with the points changed (kept outcomes stand), with every
    criterion judged again (kept outcomes dropped), and with one exercise's criteria changed."""
    from grader.grading.rejudge import ALIKE_SWITCH, PAGES_STAMP

    klass, out = stored_class(folder, n, jobs)
    _rejudge(ROOT, klass, out, jobs)   # each copy's report files, with its own name, as its grading wrote them
    changed = changed_course(folder / "changed")
    fixed = criteria_changed(folder / "fixed")
    judged_out, distinct_out, written_out, fixed_out = (folder / f"out-{way}"
                                                        for way in ("judged", "distinct", "written", "fixed"))
    for copy in (judged_out, distinct_out, written_out, fixed_out):
        shutil.copytree(out, copy, symlinks=True)
    for copy in (judged_out, distinct_out, written_out):
        _drop_kept_outcomes(copy)
    for stamp in (written_out / "students").glob(f"*/{PAGES_STAMP}"):
        stamp.unlink()

    distinct = {ALIKE_SWITCH: "0"}
    return {"points changed": _rejudge(changed, klass, out, jobs),
            "every criterion judged": _rejudge(ROOT, klass, judged_out, jobs),
            "every criterion judged, none alike": _rejudge(ROOT, klass, distinct_out, jobs, distinct),
            "every criterion judged, none alike, every report written": _rejudge(ROOT, klass, written_out, jobs,
                                                                                 distinct),
            f"{CHANGED_CRITERIA[0]}'s criteria changed, none alike": _rejudge(fixed, klass, fixed_out, jobs, distinct,
                                                                             package=fixed)}


def rejudge_times(folder: Path, n: int, jobs: int) -> dict[str, float]:
    """Wall seconds of each of rejudge_runs."""
    return {way: run.wall_s for way, run in rejudge_runs(folder, n, jobs).items()}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=100)
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args()
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}  ({os.cpu_count()} cores)")
    with tempfile.TemporaryDirectory(prefix="rejudge-bench-") as tmp:
        for way, run in rejudge_runs(Path(tmp), args.n, args.jobs).items():
            cpu = "n/a" if run.cpu_s is None else f"{run.cpu_s:.1f} s"
            print(f"re-judged {args.n} stored submissions, {way} (--jobs {args.jobs}): {run.wall_s:.1f} s, "
                  f"{run.wall_s / args.n:.3f} s per submission; CPU {cpu} ({run.cpu_of}); load average "
                  f"{run.load[0]:.2f} before, {run.load[1]:.2f} after (a fresh grader process; class files and "
                  "similarity included)")
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
