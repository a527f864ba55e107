"""Grading speed, measured side by side in one run: python bench/grade_bench.py [--batch N] [--repeat R] [--naive]

On the reference solutions (reference observations cached first):
  (a) the bare floor: the same probes called in one plain process (bench/floor.py)
  (a2) the same with each exercise in a forked child, no sandbox (bench/fork_floor.py)
  (b) a lone `grader grade solutions`                                     b/a   goal <= 1.25
      (a, a2 and b alternate R times; their medians are compared)
  (c) with --naive: one fresh `grader grade --exercise X` process per exercise
Then a class of N distinct copies of the solutions, each run into a fresh gradebook:
  (d) `grader batch --jobs 1` (warm pool), per submission, over (b)        goal <= 0.6
  (e) `--cluster local --jobs 2` (Dask) over `--jobs 2` (warm pool)         goal <= 1.1
  (f) throughput of `--cluster local --jobs 2` over `--cluster local --jobs 1`  goal >= 1.7
  (f1) the same scaling where workers cannot share cores: a scheduler and Dask worker processes here, each pinned
       to a core of its own (taskset), as two one-core machines would be: two such workers over one
  (g) `--jobs 2` per submission over the probes' own compute with everything imported, with fresh sandboxes and
      with the fork server (`fork_server_figure`; alone: --fork-server-only)   goal <= 0.75
and the worker's peak memory (budget: < 1.5 GB). The machine's load average is printed: measure when it is quiet.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PYTHON = sys.executable
GRADER = [PYTHON, "-m", "grader"]


def timed(command: list[str]) -> tuple[float, float, subprocess.CompletedProcess]:
    """Wall seconds, CPU seconds of the children, and the finished process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode not in (0, 1):
        sys.exit(f"command failed: {' '.join(command)}\n{done.stderr[-2000:]}")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), done


def make_class(folder: Path, size: int) -> Path:
    """`size` copies of the solutions, each with a distinct comment so none is a gradebook hit."""
    for i in range(size):
        student = folder / f"student{i:02d}"
        shutil.copytree(ROOT / "solutions", student, ignore=shutil.ignore_patterns("__pycache__"))
        for f in student.rglob("*.py"):
            f.write_text(f.read_text() + f"\n# student {i}\n")
    return folder


def batch_run(classroom: Path, out: Path, *options: str) -> tuple[float, float]:
    """Wall and CPU seconds (every process it waited for, sandboxes included) of one batch into a fresh gradebook."""
    wall, cpu, _ = timed([*GRADER, "batch", str(classroom), "--out", str(out), *options])
    return wall, cpu


def pinned_cluster_run(classroom: Path, out: Path, cores: list[int], folder: Path) -> float:
    """Wall seconds of a batch on a scheduler and one Dask worker process per core in `cores`, each pinned to its
    core (with the warm process and sandboxes it starts), timed from when every worker has joined."""
    folder.mkdir()
    scheduler_file = folder / "scheduler.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    procs = [subprocess.Popen([PYTHON, "-m", "distributed.cli.dask_scheduler", "--host", "127.0.0.1", "--port", "0",
                               "--no-dashboard", "--scheduler-file", str(scheduler_file)], cwd=folder, env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)]
    try:
        t0 = time.perf_counter()
        while not scheduler_file.exists():
            if time.perf_counter() - t0 > 60:
                sys.exit("the Dask scheduler did not start")
            time.sleep(0.1)
        address = json.loads(scheduler_file.read_text())["address"]
        for core in cores:   # two threads each: a worker feeds its warm process two submissions, as the pool does
            procs.append(subprocess.Popen(["taskset", "-c", str(core), PYTHON, "-m", "distributed.cli.dask_worker",
                                           address, "--nthreads", "2", "--no-nanny", "--no-dashboard", "--host",
                                           "127.0.0.1", "--local-directory", str(folder / f"worker-{core}")],
                                          cwd=folder, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                          start_new_session=True))
        from distributed import Client

        with Client(address, timeout="60s") as client:
            client.wait_for_workers(len(cores), timeout=120)
        return timed([*GRADER, "batch", str(classroom), "--out", str(out), "--cluster", address])[0]
    finally:
        for proc in procs:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()


WARM_FLOOR = """
import json, sys, time
sys.path.insert(0, {bench!r})
import floor
course = floor.load_course()
walls = []
for _ in range(3):
    t0 = time.perf_counter()
    for ex in course.exercises:
        floor.run_exercise(course, ex)
    walls.append(time.perf_counter() - t0)
print(json.dumps(walls))
"""


def fork_server_figure(classroom: Path, tmp: Path, n: int) -> None:
    """Per-submission wall of `grader batch --jobs 2` over the probes' own compute with everything imported (the
    third pass of bench/floor.py's exercise loop in one process), with each sandbox's worker started afresh and
    forked from the fork server (GRADER_FORK_SERVER). Goal <= 0.75."""
    done = subprocess.run([PYTHON, "-c", WARM_FLOOR.format(bench=str(ROOT / "bench"))], capture_output=True,
                          text=True, cwd=ROOT, check=True)
    warm_floor = json.loads(done.stdout)[-1]
    print(f"\nprobes' own compute, everything imported (third pass in one process): {warm_floor:.2f} s")
    for label, flag in (("fresh sandboxes", "0"), ("fork server", "1")):
        os.environ["GRADER_FORK_SERVER"] = flag
        try:
            wall, cpu = batch_run(classroom, tmp / f"fork-server-{flag}", "--jobs", "2")
        finally:
            del os.environ["GRADER_FORK_SERVER"]
        print(f"  batch --jobs 2, {label:<15} {wall / n:5.2f} s/submission   cpu {cpu / n:5.2f} s/submission   "
              f"over the floor {wall / n / warm_floor:5.2f} (goal <= 0.75)")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch", type=int, default=10, help="submissions in each batch figure")
    parser.add_argument("--repeat", type=int, default=5, help="alternating runs of (a) and (b), medians compared")
    parser.add_argument("--naive", action="store_true", help="also time one `grader grade` process per exercise")
    parser.add_argument("--fork-server-only", action="store_true", help="only the fork server's figure")
    args = parser.parse_args()
    if args.fork_server_only:
        with tempfile.TemporaryDirectory(prefix="grade-bench-") as tmp:
            timed([*GRADER, "grade", str(ROOT / "solutions"), "--out", str(Path(tmp) / "warm")])  # the references
            fork_server_figure(make_class(Path(tmp) / "class", args.batch), Path(tmp), args.batch)
        return
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}  ({os.cpu_count()} cores)")
    with tempfile.TemporaryDirectory(prefix="grade-bench-") as tmp:
        tmp = Path(tmp)
        timed([*GRADER, "grade", str(ROOT / "solutions"), "--out", str(tmp / "warm")])  # fills the reference cache

        # The two alternate, --repeat times: a disturbance then falls on both alike, and the medians are compared.
        floors, forked, lones = [], [], []
        for _ in range(args.repeat):
            floors.append(timed([PYTHON, str(ROOT / "bench" / "floor.py")]))
            forked.append(timed([PYTHON, str(ROOT / "bench" / "fork_floor.py")]))
            lones.append(timed([*GRADER, "grade", str(ROOT / "solutions"), "--out", str(tmp / "lone")]))
        floor_wall, floor_cpu = (statistics.median(run[i] for run in floors) for i in (0, 1))
        forked_wall = statistics.median(run[0] for run in forked)
        lone_wall, lone_cpu = (statistics.median(run[i] for run in lones) for i in (0, 1))
        floor = json.loads(floors[-1][2].stdout)
        report = json.loads((tmp / "lone" / "report.json").read_text())

        print(f"{'exercise':<16}{'floor s':>9}{'grader s':>10}{'worker RSS MB':>15}")
        for e in report["exercises"]:
            print(f"{e['id']:<16}{floor['exercises'][e['id']]['wall_s']:>9.2f}{e['run'].get('wall_s', 0):>10.2f}"
                  f"{e['run'].get('max_rss_mb', 0):>15.0f}")
        print(f"\nmedians of {args.repeat} alternating runs (walls: a {' '.join(f'{r[0]:.2f}' for r in floors)};"
              f" a2 {' '.join(f'{r[0]:.2f}' for r in forked)}; b {' '.join(f'{r[0]:.2f}' for r in lones)})")
        print(f"(a) bare floor          wall {floor_wall:6.2f} s   cpu {floor_cpu:6.2f} s   (import torch "
              f"{floor['import_torch_s']:.2f} s)")
        print(f"(a2) fork per exercise  wall {forked_wall:6.2f} s   (bench/fork_floor.py: a child per "
              "exercise, no sandbox)")
        print(f"(b) lone grader grade   wall {lone_wall:6.2f} s   cpu {lone_cpu:6.2f} s")
        if args.naive:
            naive_wall = sum(timed([*GRADER, "grade", str(ROOT / "solutions"), "--exercise", e["id"], "--out",
                                    str(tmp / f"naive-{e['id']}")])[0] for e in report["exercises"])
            print(f"(c) naive, per exercise wall {naive_wall:6.2f} s   c/b = {naive_wall / lone_wall:.2f}")
        peak = max(e["run"].get("max_rss_mb", 0) for e in report["exercises"])
        print(f"worker peak memory (largest child) {peak:.0f} MB (budget < 1536 MB)")

        n = args.batch
        classroom = make_class(tmp / "class", n)
        measured = {
            "pool 1": batch_run(classroom, tmp / "pool-1", "--jobs", "1"),
            "pool 2": batch_run(classroom, tmp / "pool-2", "--jobs", "2"),
            "dask 1": batch_run(classroom, tmp / "dask-1", "--cluster", "local", "--jobs", "1"),
            "dask 2": batch_run(classroom, tmp / "dask-2", "--cluster", "local", "--jobs", "2"),
        }
        cores = sorted(os.sched_getaffinity(0))[:2]
        pinned = {f"{k} pinned": pinned_cluster_run(classroom, tmp / f"pinned-{k}", cores[:k], tmp / f"cluster-{k}")
                  for k in (1, 2)} if len(cores) == 2 and shutil.which("taskset") else {}
        runs = {name: wall for name, (wall, _) in measured.items()}
        fork_server_figure(classroom, tmp, n)
        print(f"\nbatch of {n} (per submission: wall, and CPU of every process, sandboxes included):")
        for name, (wall, cpu) in measured.items():
            # Dask's in-process workers leave their warm processes to die with the client, unwaited: no CPU figure
            shown = f"cpu {cpu / n:5.2f} s/submission" if name.startswith("pool") else "cpu     n/a           "
            print(f"  {name:<8} {wall:7.1f} s   {wall / n:5.2f} s/submission   {shown}   {n / wall * 60:5.1f} "
                  "submissions/min")
        for name, wall in pinned.items():
            print(f"  {name:<8} {wall:7.1f} s   {wall / n:5.2f} s/submission   (Dask worker processes, one core each)"
                  f"   {n / wall * 60:5.1f} submissions/min")
        print(f"  lone grade cpu {lone_cpu:5.2f} s")
        print(f"\nb/a = {lone_wall / floor_wall:.2f}  lone grade over the floor (goal <= 1.25); a2/a = "
              f"{forked_wall / floor_wall:.2f} (a fresh process per exercise), b/a2 = {lone_wall / forked_wall:.2f} "
              "(the sandbox, the judge and the reports)")
        print(f"d   = {runs['pool 1'] / n / lone_wall:.2f}  batch --jobs 1 per submission over a lone "
              "grade (goal <= 0.6)")
        print(f"e   = {runs['dask 2'] / runs['pool 2']:.2f}  local Dask over the warm pool, --jobs 2 (goal <= 1.1)")
        print(f"f   = {runs['dask 1'] / runs['dask 2']:.2f}  two local Dask workers over one, throughput (goal >= 1.7)")
        if pinned:
            print(f"f1  = {pinned['1 pinned'] / pinned['2 pinned']:.2f}  two one-core Dask workers over one, "
                  "throughput (goal >= 1.7)")
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
