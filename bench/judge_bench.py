"""The judge's cost per submission, two ways: python bench/judge_bench.py [--rounds N]

- session: a pytest session made for the submission in this process (`grader/judge/session.py`: what every
  grading paid before the judging server, set-up, collection and teardown included);
- server: a child forked by the judging server (`grader/judge/server.py`), whose session was set up once,
  under the judge's limits: what every grading pays now (the fork included).

Both judge the reference solutions' observations of every exercise (as a correct submission's), alternating,
N rounds each, after one of each that imports and fills the caches. Prints each round's CPU and wall time, the
medians, the machine's load average, and whether both ways gave the same outcomes.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from grader.course import load_course  # noqa: E402
from grader.grading.pipeline import probe_order, reference_folders  # noqa: E402


def cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"   # as the judging server runs
    from grader.judge.client import JudgeClient
    from grader.judge.session import InProcessJudge

    course = load_course(ROOT)
    references = reference_folders(course, list(course.exercises))
    request = [{"id": ex.id, "file": ex.file, "probes": probe_order(ex), "obs": str(references[ex.id]), "run": {},
                "staged": None, "reference": str(references[ex.id])} for ex in course.exercises]
    server = JudgeClient([ex.id for ex in course.exercises], course.judge_limits)
    in_process = InProcessJudge()
    outcomes = {}

    def session_round() -> tuple[float, float]:
        wall, spent = time.perf_counter(), cpu()
        outcomes["session"] = in_process.judge(request)
        return cpu() - spent, time.perf_counter() - wall

    def server_round() -> tuple[float, float]:
        wall = time.perf_counter()
        child, lines = server._child(request, [])
        outcomes["server"] = lines
        return child.cpu_s, time.perf_counter() - wall

    server.criteria()
    session_round(), server_round()   # imports, caches, the server's references read once
    figures: dict[str, list[tuple[float, float]]] = {"session": [], "server": []}
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    for _ in range(args.rounds):
        for way, run in (("session", session_round), ("server", server_round)):
            figures[way].append(run())
            print(f"{way:<8} cpu {figures[way][-1][0]:.3f} s   wall {figures[way][-1][1]:.3f} s")
    for way, got in figures.items():
        print(f"median {way:<8} cpu {statistics.median(c for c, _ in got):.3f} s   "
              f"wall {statistics.median(w for _, w in got):.3f} s")
    judged = {(o.meta.id, o.status) for ex in outcomes["session"].values() for o in ex}
    served = {(line["outcome"]["criterion"], line["outcome"]["status"]) for line in outcomes["server"]
              if "outcome" in line}
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}; same outcomes: {judged == served}")
    server.close()


if __name__ == "__main__":
    main()
