"""What one grading holds in memory and how long it takes, as a Gradescope container sees it: the peak of the
proportional set size (Pss) summed over the grading's whole process tree (the grading process, the fork server and
worker, each exercise's child, the judging server), sampled every 20 ms, with its wall time.

    python bench/gradescope_footprint.py [--submission DIR] [--exercise ID]... [--sandbox basic|strict]

The grading is `grader grade` of the reference solutions by default (correct code: what every grading costs; a
hostile submission adds at most its exercise's `memory_mb`). `GRADER_OWN_MEMORY_MB` in
grader/classroom/gradescope.py is this peak, less what the exercises' own code allocated, rounded up. Linux only
(it reads /proc); run as root to read every process's memory at the basic level.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def tree(pid: int) -> list[int]:
    """`pid` and every process descending from it."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            parent = int(stat.rsplit(")", 1)[1].split()[1])
            children.setdefault(parent, []).append(int(entry))
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        todo.extend(children.get(current, ()))
    return found


def pss_kb(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--submission", type=Path, default=ROOT / "solutions")
    parser.add_argument("--exercise", action="append", default=None)
    parser.add_argument("--sandbox", default="basic")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="footprint-") as out:
        command = [sys.executable, "-m", "grader", "grade", str(args.submission), "--sandbox", args.sandbox,
                   "--out", out, "--format", "json"]
        for exercise in args.exercise or ():
            command += ["--exercise", exercise]
        started = time.monotonic()
        grading = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        peak, processes = 0, 0
        while grading.poll() is None:
            pids = tree(grading.pid)
            total = sum(pss_kb(pid) for pid in pids)
            if total > peak:
                peak, processes = total, len(pids)
            time.sleep(0.02)
        wall = time.monotonic() - started
        report = json.loads((Path(out) / "report.json").read_text()) if grading.returncode == 0 else {}
    print(json.dumps({"exit": grading.returncode, "wall_s": round(wall, 1), "peak_pss_mb": round(peak / 1024),
                      "processes_at_peak": processes, "percent": report.get("percent"),
                      "stderr_tail": grading.stderr.read().decode()[-500:] if grading.stderr else ""}))


if __name__ == "__main__":
    main()
