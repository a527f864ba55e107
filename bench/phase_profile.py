"""Where one submission's wall and CPU go, phase by phase, as a warm grading process (grader/batch/warm.py) grades
it: `python bench/phase_profile.py [--n N] [--fresh]` (root, strict sandbox; --fresh: no fork server).

The phases of grader/grading/pipeline.py are called here one after the other, for N distinct copies of the
solutions, each sandbox pre-started while the one before it is judged (as a warm process does), and each phase is
timed: wall, and the CPU of whichever processes ran it. This process's own phases (staging, supervising, building
and rendering the report) are measured by thread CPU time; the sandbox's processes (the fork server, each keeper,
worker and exercise child) by watching /proc every few milliseconds (a process's last few milliseconds may be
missed) and, for the exercise children, by what the worker's wait4 said (each Run's cpu_s); the probes' own time
by the seconds each observation records; the judge by its server's CPU, its reaped children's included.
Prints one table per submission and the medians, with the load average.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

TICK = os.sysconf("SC_CLK_TCK")


def stat(pid: int) -> tuple[int, float, float] | None:
    """(parent pid, own CPU s, reaped children's CPU s) of a process."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            fields = fh.read().rsplit(b")", 1)[1].split()
    except OSError:
        return None
    return int(fields[1]), (int(fields[11]) + int(fields[12])) / TICK, (int(fields[13]) + int(fields[14])) / TICK


class Watcher:
    """Every process below `root`'s pid seen so far: its largest own CPU seen, by role (from its ancestry)."""

    def __init__(self, root: int):
        self.root = root
        self.cpu: dict[int, float] = {}
        self.parent: dict[int, int] = {}
        self.born: dict[int, float] = {}
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            for entry in os.listdir("/proc"):
                if not entry.isdigit():
                    continue
                pid = int(entry)
                got = stat(pid)
                if got is None:
                    continue
                parent, own, _ = got
                if pid == self.root or parent in self.parent or parent == self.root:
                    self.parent.setdefault(pid, parent)
                    self.born.setdefault(pid, time.monotonic())
                    self.cpu[pid] = max(self.cpu.get(pid, 0.0), own)
            time.sleep(0.005)

    def depth(self, pid: int) -> int:
        d = 0
        while pid != self.root and pid in self.parent:
            pid, d = self.parent[pid], d + 1
        return d

    def by_depth(self) -> dict[int, float]:
        out: dict[int, float] = {}
        for pid, cpu in self.cpu.items():
            out[self.depth(pid)] = out.get(self.depth(pid), 0.0) + cpu
        return out

    def stop(self) -> None:
        self._stop.set()
        self.thread.join()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=3)
    parser.add_argument("--fresh", action="store_true", help="every worker a fresh process (no fork server)")
    args = parser.parse_args()
    os.environ["GRADER_FORK_SERVER"] = "0" if args.fresh else "1"
    from grade_bench import make_class

    from grader.batch.warm import REPORT_FILES
    from grader.course import load_course
    from grader.grading import pipeline
    from grader.render.files import FORMATS
    from grader.sandbox.levels import choose

    course = load_course()
    sandbox = choose("strict")
    ids = [ex.id for ex in course.exercises]
    tmp = Path(tempfile.mkdtemp(prefix="phase-profile-"))
    classroom = make_class(tmp / "class", args.n)
    print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    t0 = time.monotonic()
    judge = pipeline.judge_for(course)
    judge.start()
    judge.criteria()
    print(f"judge server up in {time.monotonic() - t0:.2f} s")
    t0 = time.monotonic()
    server = pipeline.fork_server(course, sandbox)
    watcher = Watcher(server.proc.pid if server else os.getpid())
    rows = []
    session = pipeline.prestart(course, sandbox, server=server)
    if server is not None:
        print(f"fork server ready in {time.monotonic() - t0:.2f} s, server CPU {watcher.by_depth()}")
    for i, sub in enumerate(sorted(classroom.iterdir())):
        row: dict[str, float] = {}
        before = dict(watcher.cpu)
        t_sub = time.monotonic()
        c = time.thread_time()
        taken = session
        session = pipeline.prestart(course, sandbox, server=server) if i + 1 < args.n else None
        row["prestart next wall"], row["prestart next cpu"] = time.monotonic() - t_sub, time.thread_time() - c
        t = time.monotonic()
        c = time.thread_time()
        probed = pipeline.staged_for_probes(course, sub, ids, sandbox, taken)
        row["stage wall"], row["stage cpu"] = time.monotonic() - t, time.thread_time() - c
        t = time.monotonic()
        c = time.thread_time()
        pipeline.run_in_sandbox(probed, taken, server)
        row["sandbox wall"], row["supervisor cpu"] = time.monotonic() - t, time.thread_time() - c
        runs = probed.runs
        row["children cpu (wait4)"] = sum(r.cpu_s for r in runs.values())
        row["children wall (worker)"] = sum(r.wall_s for r in runs.values())
        probe_s = import_s = 0.0
        for ex in probed.exercises:
            for f in (probed.scratch / ex.id / "obs").glob("*.json"):
                seconds = json.loads(f.read_text()).get("seconds", 0.0)
                if f.stem == "__import__":
                    import_s += seconds
                else:
                    probe_s += seconds
        row["probes s (obs)"], row["student import s (obs)"] = probe_s, import_s
        judge_pid = judge.pid
        j0 = stat(judge_pid) if judge_pid else None
        t = time.monotonic()
        c = time.thread_time()
        outcomes = pipeline.judge_outcomes(judge, probed)
        row["judge wall"] = time.monotonic() - t
        j1 = stat(judge_pid) if judge_pid else None
        if j0 and j1:
            row["judge cpu"] = (j1[1] - j0[1]) + (j1[2] - j0[2])
        t = time.monotonic()
        c = time.thread_time()
        run_by = {ex.id: r for ex in probed.exercises if (r := probed.run_of(ex.id)) is not None}
        report = pipeline.build_report(course, sub.name, probed.exercises, outcomes, run_by, sandbox.describe(),
                                       probed.started_at, 0.0)
        for fmt in REPORT_FILES:
            name, render = FORMATS[fmt]
            render(report, course.root / "templates", "en")
        row["report wall"], row["report cpu"] = time.monotonic() - t, time.thread_time() - c
        pipeline.remove_scratch(probed.scratch)
        row["total wall"] = time.monotonic() - t_sub
        time.sleep(0.1)
        new = {pid: cpu - before.get(pid, 0.0) for pid, cpu in watcher.cpu.items()}
        depths: dict[int, float] = {}
        for pid, cpu in new.items():
            depths[watcher.depth(pid)] = depths.get(watcher.depth(pid), 0.0) + cpu
        row["sandbox procs cpu by depth"] = 0.0
        for d, cpu in sorted(depths.items()):
            row[f"  depth {d} cpu"] = cpu
        row["percent"] = report.percent
        rows.append(row)
        print(f"submission {i}: " + ", ".join(f"{k} {v:.2f}" for k, v in row.items()), flush=True)
    watcher.stop()
    print("\nmedians:")
    for key in rows[0]:
        print(f"  {key:<28} {statistics.median(r.get(key, 0.0) for r in rows):7.2f}")
    print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    if server is not None:
        server.close()
    judge.close()
    shutil.rmtree(tmp, ignore_errors=True)
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
