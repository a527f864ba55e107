"""A single grading, judging beside the worker against judging after it: python bench/judge_overlap.py [--rounds N]

Grades the reference solutions in this process (strict sandbox where it can be had, else basic), N rounds of one
grading each way, alternating so that the machine's load falls on both alike, after one grading that fills the
reference cache and imports the judge. Prints every wall time, the medians, and whether the reports agree.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import grader.grading as grading  # noqa: E402
from grader.course import load_course  # noqa: E402
from grader.report.model import stable_view  # noqa: E402
from grader.sandbox.levels import choose, strict_missing  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    course = load_course(ROOT)
    sandbox = choose("basic" if strict_missing() else "strict")
    ids = [ex.id for ex in course.exercises]
    solutions = ROOT / "solutions"
    grading.grade(course, solutions, ids, sandbox)   # the reference cache, and the judge's imports
    beside_core = grading.spare_core
    timings: dict[str, list[float]] = {"beside": [], "after": []}
    views = {}
    print(f"sandbox {sandbox.level}; load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    for _ in range(args.rounds):
        for mode in ("beside", "after"):
            grading.spare_core = beside_core if mode == "beside" else (lambda: False)
            t0 = time.perf_counter()
            report = grading.grade(course, solutions, ids, sandbox)
            timings[mode].append(time.perf_counter() - t0)
            views[mode] = stable_view(report.to_dict())
            print(f"{mode:<7} {timings[mode][-1]:6.2f} s")
    grading.spare_core = beside_core
    beside, after = statistics.median(timings["beside"]), statistics.median(timings["after"])
    print(f"median: beside {beside:.2f} s, after {after:.2f} s, beside/after {beside / after:.2f}; "
          f"same report: {views['beside'] == views['after']}")
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
