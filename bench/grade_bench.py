"""Grading speed, measured side by side in one run:
python bench/grade_bench.py [--n N] [--rejudge-n M] [--all [--repeat R] [--naive]]

The figures of issue 24, one function each (FIGURES), printed together in one table at the end:
  - per-submission wall of `grader batch --jobs 2` over a class of N distinct copies of the solutions, over the
    probes' own compute with everything imported (the last of three passes of bench/floor.py's exercise loop in one
    process), once with each strict sandbox's worker started afresh and once forked from the fork server
    (GRADER_FORK_SERVER)                                                             goal <= 0.75
  - `grader batch --rejudge` over a class of M (default 100) stored submissions (bench/rejudge_bench.py), after a
    change of points and with every criterion judged again, in all and per submission   goal <= 10 s
  - throughput of two workers over one, each pinned to a core of its own (taskset)      goal >= 1.8
    on a batch of N, and on the submissions N+1 to 2N (a batch of 2N less one of N: each worker's start-up out)
A quick run: --n 2 --rejudge-n 20; `--only overhead,scaling` leaves the re-judging figure out.

With --all, also the earlier figures, printed as they come:
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
from dataclasses import dataclass
from pathlib import Path

from phase_profile import stat as proc_stat   # bench/, this script's folder

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


def own_cpu(pid: int) -> float:
    """CPU seconds of a living process and of the children it has reaped, 0 where it is gone."""
    read = proc_stat(pid)
    return 0.0 if read is None else read[1] + read[2]


def pinned_cluster_run(classroom: Path, out: Path, cores: list[int], folder: Path) -> tuple[float, float]:
    """Wall seconds of a batch on a scheduler and one Dask worker process per core in `cores`, each pinned to its
    core (with the warm process and sandboxes it starts), timed from when every worker has joined; and the CPU
    seconds of what is not pinned (the `grader batch` command, the children it waited for, such as the similarity
    comparison, and the scheduler), which shares the workers' cores when there are two."""
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
        scheduler_before = own_cpu(procs[0].pid)
        wall, client_cpu, _ = timed([*GRADER, "batch", str(classroom), "--out", str(out), "--cluster", address])
        return wall, client_cpu + own_cpu(procs[0].pid) - scheduler_before
    finally:
        for proc in procs:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()


def legacy_figures(args: argparse.Namespace, tmp: Path) -> None:
    """The figures (a) to (f1) of the module's docstring, printed as they come (--all)."""
    # The two alternate, --repeat times: a disturbance then falls on both alike, and the medians are compared.
    floors, forked, lones = [], [], []
    for _ in range(args.repeat):
        floors.append(timed([PYTHON, str(ROOT / "bench" / "floor.py")]))
        forked.append(timed([PYTHON, str(ROOT / "bench" / "fork_floor.py")]))
        lones.append(timed([*GRADER, "grade", str(ROOT / "solutions"), "--out", str(tmp / "lone")]))
    floor_wall, floor_cpu = (statistics.median(run[i] for run in floors) for i in (0, 1))
    # the exercises' own walls, fork to reaped (the process also runs them warm, for the penalty it prints)
    forked_runs = [json.loads(run[2].stdout) for run in forked]
    forked_walls = [run["exercises_s"] for run in forked_runs]
    forked_wall = statistics.median(forked_walls)
    penalty = statistics.median(run["penalty"] for run in forked_runs)
    lone_wall, lone_cpu = (statistics.median(run[i] for run in lones) for i in (0, 1))
    floor = json.loads(floors[-1][2].stdout)
    report = json.loads((tmp / "lone" / "report.json").read_text())

    print(f"{'exercise':<16}{'floor s':>9}{'grader s':>10}{'worker RSS MB':>15}")
    for e in report["exercises"]:
        print(f"{e['id']:<16}{floor['exercises'][e['id']]['wall_s']:>9.2f}{e['run'].get('wall_s', 0):>10.2f}"
              f"{e['run'].get('max_rss_mb', 0):>15.0f}")
    print(f"\nmedians of {args.repeat} alternating runs (walls: a {' '.join(f'{r[0]:.2f}' for r in floors)};"
          f" a2 {' '.join(f'{wall:.2f}' for wall in forked_walls)}; b {' '.join(f'{r[0]:.2f}' for r in lones)})")
    print(f"(a) bare floor          wall {floor_wall:6.2f} s   cpu {floor_cpu:6.2f} s   (import torch "
          f"{floor['import_torch_s']:.2f} s)")
    print(f"(a2) fork per exercise  wall {forked_wall:6.2f} s   (bench/fork_floor.py: a child per "
          f"exercise, no sandbox; its CPU {penalty:.2f} times the same probes' warm in one process)")
    print(f"(b) lone grader grade   wall {lone_wall:6.2f} s   cpu {lone_cpu:6.2f} s")
    if args.naive:
        naive_wall = sum(timed([*GRADER, "grade", str(ROOT / "solutions"), "--exercise", e["id"], "--out",
                                str(tmp / f"naive-{e['id']}")])[0] for e in report["exercises"])
        print(f"(c) naive, per exercise wall {naive_wall:6.2f} s   c/b = {naive_wall / lone_wall:.2f}")
    peak = max(e["run"].get("max_rss_mb", 0) for e in report["exercises"])
    print(f"worker peak memory (largest child) {peak:.0f} MB (budget < 1536 MB)")

    n = args.n
    classroom = class_of(tmp, n)
    measured = {
        "pool 1": batch_run(classroom, tmp / "pool-1", "--jobs", "1"),
        "pool 2": batch_run(classroom, tmp / "pool-2", "--jobs", "2"),
        "dask 1": batch_run(classroom, tmp / "dask-1", "--cluster", "local", "--jobs", "1"),
        "dask 2": batch_run(classroom, tmp / "dask-2", "--cluster", "local", "--jobs", "2"),
    }
    cores = sorted(os.sched_getaffinity(0))[:2]
    pinned = {f"{k} pinned": pinned_cluster_run(classroom, tmp / f"pinned-{k}", cores[:k], tmp / f"cluster-{k}")[0]
              for k in (1, 2)} if len(cores) == 2 and shutil.which("taskset") else {}
    runs = {name: wall for name, (wall, _) in measured.items()}
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


@dataclass
class Figure:
    """One line of the side-by-side table: what is measured, the figure, its goal, and how it was reached."""

    name: str
    value: str
    goal: str
    detail: str = ""


def class_of(tmp: Path, n: int) -> Path:
    """The class of N distinct copies of the solutions every batch figure grades, made once per run."""
    folder = tmp / f"class-{n}"
    return folder if folder.exists() else make_class(folder, n)


def overhead_figure(args: argparse.Namespace, tmp: Path) -> list[Figure]:
    """Per-submission wall of `grader batch --jobs 2` (both cores at work) over the probes' own compute with
    everything imported (the last of three passes of bench/floor.py's exercise loop in one process), once with each
    strict sandbox's worker started afresh and once forked from the fork server (GRADER_FORK_SERVER=0/1)."""
    _, _, done = timed([PYTHON, str(ROOT / "bench" / "floor.py"), "--passes", "3"])
    passes = json.loads(done.stdout)["passes"]
    figures = []
    for label, flag in (("fresh sandboxes", "0"), ("fork server", "1")):
        os.environ["GRADER_FORK_SERVER"] = flag
        try:
            wall, cpu = batch_run(class_of(tmp, args.n), tmp / f"overhead-{flag}", "--jobs", "2")
        finally:
            del os.environ["GRADER_FORK_SERVER"]
        per = wall / args.n
        figures.append(Figure(f"batch --jobs 2 over the probes' compute, {label}", f"{per / passes[-1]:.2f}",
                              "<= 0.75", f"{per:.2f} s / {passes[-1]:.2f} s, cpu {cpu / args.n:.2f} s per submission "
                              f"(floor passes {' '.join(f'{p:.2f}' for p in passes)} s; batch of {args.n} in "
                              f"{wall:.1f} s)"))
    return figures


def rejudge_figure(args: argparse.Namespace, tmp: Path) -> list[Figure]:
    """`grader batch --rejudge` over a class of --rejudge-n stored submissions (bench/rejudge_bench.py): after a
    change of points (the kept outcomes stand) and with every criterion judged again."""
    from rejudge_bench import rejudge_times

    n = args.rejudge_n
    return [Figure(f"re-judging {n} stored submissions, {way}", f"{wall:.1f} s", "<= 10 s",
                   f"{wall / n:.3f} s per submission, a fresh grader process, --jobs 2")
            for way, wall in rejudge_times(tmp / "rejudge", n, 2).items()]


def scaling_figure(args: argparse.Namespace, tmp: Path) -> list[Figure]:
    """Throughput of two workers over one, each worker pinned to a core of its own (taskset), as two one-core
    machines would be: Dask worker processes here, each with the warm process and sandboxes it starts."""
    cores = sorted(os.sched_getaffinity(0))[:2]
    if len(cores) < 2 or not shutil.which("taskset"):
        return [Figure("--jobs 2 over --jobs 1, pinned", "n/a", ">= 1.8", "needs two cores and taskset")]
    before = machine_ceiling(cores)
    # Each worker's warm process pays its start-up (its fork server's and judging server's imports) once, on its
    # one core: a batch of N counts it in every ratio, and the same batch twice as large shows the rate past it.
    sizes = (args.n, 2 * args.n)
    runs = {(k, n): pinned_cluster_run(class_of(tmp, n), tmp / f"scaling-{k}-{n}", cores[:k],
                                       tmp / f"scaling-cluster-{k}-{n}")
            for n in sizes for k in (1, 2)}
    walls = {key: wall for key, (wall, _) in runs.items()}
    unpinned = {key: cpu for key, (_, cpu) in runs.items()}
    after = machine_ceiling(cores)
    n, m = sizes
    past = {k: walls[k, m] - walls[k, n] for k in (1, 2)}   # the last n submissions of the larger batch
    return [Figure("--jobs 2 over --jobs 1 throughput, one core each", f"{walls[1, n] / walls[2, n]:.2f}", ">= 1.8",
                   f"batch of {n}: {walls[1, n]:.1f} s with one worker, {walls[2, n]:.1f} s with two"),
            Figure(f"the same, submissions {n + 1} to {m} (a batch of {m} less one of {n})",
                   f"{past[1] / past[2]:.2f}", ">= 1.8",
                   f"batch of {m}: {walls[1, m]:.1f} s with one worker, {walls[2, m]:.1f} s with two; "
                   f"{past[1]:.1f} s and {past[2]:.1f} s past the batch of {n}"),
            # Two workers leave no core free for what is not pinned: at most, its CPU is taken from them. An
            # estimate of the ratio that work spares them, not a measurement of one.
            Figure(f"the batch of {n}, less what is not pinned (an upper estimate)",
                   f"{walls[1, n] / max(walls[2, n] - unpinned[2, n] / 2, 1e-9):.2f}", "",
                   f"batch of {n}: the command, its children and the scheduler took {unpinned[1, n]:.1f} s of CPU "
                   f"with one worker, {unpinned[2, n]:.1f} s with two; two workers' wall less half of it "
                   f"{walls[2, n] - unpinned[2, n] / 2:.1f} s"),
            Figure("the machine's own: two CPU-bound loops over one, one core each", f"{min(before, after):.2f}",
                   "2.00", f"before the batches {before:.2f}, after {after:.2f}: the most the line above can reach "
                   "now (cores shared with other work, or with each other, give less than 2)")]


SPIN = "import time\nt = time.perf_counter()\nx = 0\nfor i in range(20_000_000): x += i\nprint(time.perf_counter() - t)"


def machine_ceiling(cores: list[int]) -> float:
    """Throughput of the same pure-Python loop run on both cores at once over it run alone on the first, each
    process pinned (taskset): what the cores give two workers that share nothing of the grader's."""
    def spin(core: int) -> subprocess.Popen:
        return subprocess.Popen(["taskset", "-c", str(core), PYTHON, "-c", SPIN], stdout=subprocess.PIPE, text=True)

    alone = float(spin(cores[0]).communicate()[0])
    pair = [spin(core) for core in cores]
    together = max(float(p.communicate()[0]) for p in pair)
    return 2 * alone / together


# The figures, each measured by a function of its own and printed side by side; a new figure is one
# more function here.
FIGURES = (overhead_figure, rejudge_figure, scaling_figure)
NAMES = {"overhead": overhead_figure, "rejudge": rejudge_figure, "scaling": scaling_figure}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", "--batch", type=int, default=10, dest="n",
                        help="submissions in each batch figure (a quick run: --n 2)")
    parser.add_argument("--rejudge-n", type=int, default=100, help="stored submissions re-judged")
    parser.add_argument("--repeat", type=int, default=5, help="with --all: alternating runs of (a) and (b)")
    parser.add_argument("--naive", action="store_true", help="with --all: one `grader grade` process per exercise")
    parser.add_argument("--all", action="store_true", help="also the figures (a) to (f1) of this docstring")
    parser.add_argument("--only", default=",".join(NAMES),
                        help=f"the figures measured, comma-separated, of {', '.join(NAMES)} (default: all three)")
    args = parser.parse_args()
    before = os.getloadavg()
    print(f"load average before: {' '.join(f'{x:.2f}' for x in before)}  ({os.cpu_count()} cores)")
    with tempfile.TemporaryDirectory(prefix="grade-bench-") as folder:
        tmp = Path(folder)
        timed([*GRADER, "grade", str(ROOT / "solutions"), "--out", str(tmp / "warm")])  # fills the reference cache
        chosen = [NAMES[name] for name in args.only.split(",") if name]
        figures = [figure for measure in FIGURES if measure in chosen for figure in measure(args, tmp)]
        if args.all:
            legacy_figures(args, tmp)
    after = os.getloadavg()
    width = max(len(f.name) for f in figures)
    print(f"\n{'figure':<{width}}  {'value':>8}  {'goal':>8}  how")
    for f in figures:
        print(f"{f.name:<{width}}  {f.value:>8}  {f.goal:>8}  {f.detail}")
    print(f"load average before {' '.join(f'{x:.2f}' for x in before)}, after "
          f"{' '.join(f'{x:.2f}' for x in after)} ({os.cpu_count()} cores)")


if __name__ == "__main__":
    main()
