"""Grading speed, measured: python bench/grade_bench.py [--batch N] [--skip-batch]

Three figures side by side, on the reference solutions:
  (a) the bare floor: the same probes called in one plain process (bench/floor.py)
  (b) the grader as shipped: `grader grade solutions` (reference observations already cached)
  (c) a naive baseline: one fresh `grader grade --exercise X` process per exercise
and the ratios b/a (budget: <= 1.5) and c/b. Then a batch of N submissions with --jobs 1 and --jobs 2
(budget: jobs 2 at least 1.7x the throughput of jobs 1), and the worker's peak memory (budget: < 1.5 GB).
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PYTHON = sys.executable


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


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch", type=int, default=30, help="submissions in the batch figure")
    parser.add_argument("--skip-batch", action="store_true")
    args = parser.parse_args()
    grader = [PYTHON, "-m", "grader"]
    with tempfile.TemporaryDirectory(prefix="grade-bench-") as tmp:
        tmp = Path(tmp)
        timed([*grader, "grade", str(ROOT / "solutions"), "--out", str(tmp / "warm")])  # fills the reference cache

        floor_wall, floor_cpu, done = timed([PYTHON, str(ROOT / "bench" / "floor.py")])
        floor = json.loads(done.stdout)
        shipped_wall, shipped_cpu, _ = timed([*grader, "grade", str(ROOT / "solutions"), "--out", str(tmp / "shipped")])
        report = json.loads((tmp / "shipped" / "report.json").read_text())
        ids = [e["id"] for e in report["exercises"]]
        naive_wall = naive_cpu = 0.0
        for ex in ids:
            w, c, _ = timed([*grader, "grade", str(ROOT / "solutions"), "--exercise", ex, "--out", str(tmp / f"naive-{ex}")])
            naive_wall += w
            naive_cpu += c

        print(f"{'exercise':<16}{'floor s':>9}{'grader s':>10}{'worker RSS MB':>15}")
        for e in report["exercises"]:
            print(f"{e['id']:<16}{floor['exercises'][e['id']]['wall_s']:>9.2f}{e['run'].get('wall_s', 0):>10.2f}"
                  f"{e['run'].get('max_rss_mb', 0):>15.0f}")
        print(f"\n(a) bare floor        wall {floor_wall:6.2f} s   cpu {floor_cpu:6.2f} s   (import torch {floor['import_torch_s']:.2f} s)")
        print(f"(b) grader as shipped wall {shipped_wall:6.2f} s   cpu {shipped_cpu:6.2f} s")
        print(f"(c) naive, per exercise wall {naive_wall:6.2f} s   cpu {naive_cpu:6.2f} s")
        print(f"b/a = {shipped_wall / floor_wall:.2f} (budget <= 1.5)    c/b = {naive_wall / shipped_wall:.2f}")
        peak = max(e["run"].get("max_rss_mb", 0) for e in report["exercises"])
        print(f"worker peak memory (largest child) {peak:.0f} MB (budget < 1536 MB)")

        if not args.skip_batch:
            classroom = tmp / "class"
            for i in range(args.batch):
                shutil.copytree(ROOT / "solutions", classroom / f"student{i:02d}",
                                ignore=shutil.ignore_patterns("__pycache__"))
            # every copy is the same content: give each a distinct comment so none is a cache hit
            for i in range(args.batch):
                for f in (classroom / f"student{i:02d}").rglob("*.py"):
                    f.write_text(f.read_text() + f"\n# student {i}\n")
            figures = {}
            for jobs in (1, 2):
                wall, cpu, _ = timed([*grader, "batch", str(classroom), "--out", str(tmp / f"batch-{jobs}"),
                                      "--jobs", str(jobs)])
                figures[jobs] = wall
                print(f"batch of {args.batch}, --jobs {jobs}: {wall:6.1f} s  ({args.batch / wall * 60:.1f} submissions/min)")
            print(f"throughput jobs 2 / jobs 1 = {figures[1] / figures[2]:.2f} (budget >= 1.7)")


if __name__ == "__main__":
    main()
