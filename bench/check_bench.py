"""`grader check` speed as a student meets it: python bench/check_bench.py [--exercise ID]... [--repeat R] [--all]

In a fresh handout (`grader handout`) with the reference solution of each exercise asked for copied in, from the
handout's root with its checker, alternating R times (default 5):
  (p) `pytest exercises/<id>`: the public tests alone, the floor a check cannot go under
  (c) `grader check <id>` on the plain route (GRADER_CHECK_PLAIN=1): what macOS, Windows and a student's own
      Linux account get                                                        goal: under 10 s
  (s) `grader check <id>` in the strict sandbox (root only)                   goal: under 10 s
and, with --all, once each over every exercise. Medians of the wall time and of the CPU time of the whole process
tree; the machine's load average before each round (measure when it is quiet: on 2 cores, a load of 4 doubles
every wall time).
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PYTHON = sys.executable


def timed(command: list[str], cwd: Path, env: dict) -> tuple[float, float]:
    """Wall seconds and CPU seconds of the command's process tree."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, cwd=cwd, env=env)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        sys.exit(f"{' '.join(command)} failed ({done.returncode}):\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--exercise", action="append", default=None, help="default: attention")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--all", action="store_true", help="also check every exercise at once, once per route")
    args = parser.parse_args()
    exercises = args.exercise or ["attention"]
    sys.path.insert(0, str(ROOT))
    from grader.course import load_course

    course = load_course(ROOT)
    with tempfile.TemporaryDirectory(prefix="check-bench-") as tmp:
        repo = Path(tmp) / "repo"
        subprocess.run([PYTHON, "-m", "grader", "--course", str(ROOT), "handout", str(repo)], check=True,
                       capture_output=True, cwd=ROOT)
        for ex in course.exercises:
            if args.all or ex.id in exercises:
                shutil.copyfile(course.solution(ex), repo / "exercises" / ex.id / ex.file)
        env = {**os.environ, "PYTHONPATH": str(repo / "checker")}
        env.pop("GITHUB_STEP_SUMMARY", None)
        plain = {**env, "GRADER_CHECK_PLAIN": "1"}
        grader = [PYTHON, "-m", "grader", "check"]
        ways = {"p": ("pytest alone", lambda e: ([PYTHON, "-m", "pytest", "-q", f"exercises/{e}"], env)),
                "c": ("grader check, plain route", lambda e: ([*grader, e], plain))}
        if os.geteuid() == 0:
            ways["s"] = ("grader check, strict sandbox", lambda e: ([*grader, e], env))
        timed([*grader, exercises[0]], repo, plain)   # warm the disk cache: no first round pays for it
        for exercise in exercises:
            results: dict[str, list[tuple[float, float]]] = {k: [] for k in ways}
            loads = []
            for _ in range(args.repeat):
                loads.append(os.getloadavg()[0])
                for key, (_, how) in ways.items():
                    command, command_env = how(exercise)
                    results[key].append(timed(command, repo, command_env))
            print(f"\n{exercise}: {args.repeat} rounds, load average {min(loads):.1f} to {max(loads):.1f}")
            for key, (label, _) in ways.items():
                walls, cpus = zip(*results[key], strict=True)
                print(f"  ({key}) {label:32s} wall {statistics.median(walls):6.2f} s "
                      f"(min {min(walls):.2f}, max {max(walls):.2f})   cpu {statistics.median(cpus):6.2f} s")
        if args.all:
            print(f"\nevery exercise at once, load average {os.getloadavg()[0]:.1f}")
            for key, (label, how) in ways.items():
                command, command_env = how("")
                command = [c for c in command if c] if key != "p" else [PYTHON, "-m", "pytest", "-q", "exercises"]
                wall, cpu = timed(command, repo, command_env)
                print(f"  ({key}) {label:32s} wall {wall:6.2f} s   cpu {cpu:6.2f} s")


if __name__ == "__main__":
    main()
