"""Time exercise `audits`' served catalog: building every wheat and chaff, and the reference audit on each.

    .venv/bin/python bench/audits_catalog.py [--seed 1234] [--threads 1]

Everything in this process, through the in-process handles of tests/audits_inprocess.py: what the grader's model
process spends on building and on the audits' calls, without the quanta its replies wait for (grader/models/host.py
ModelLimits) or the sandbox. One intra-op thread by default, as the model process runs.
"""
from __future__ import annotations

import argparse
import sys
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    started = time.perf_counter()
    import torch

    torch.set_num_threads(args.threads)
    imported = time.perf_counter()
    from audits_inprocess import ENTRIES, ROOT as COURSE, reference, served, verdict

    loaded = time.perf_counter()
    built = defaultdict(float)       # CPU seconds of this process: a busy machine inflates wall clock, not these
    audited = defaultdict(float)
    counts = defaultdict(lambda: [0, 0])
    wrong = []
    for entry in ENTRIES:
        t0 = time.process_time()
        served.build(COURSE, entry, args.seed)
        t1 = time.process_time()
        got = verdict(getattr(reference, f"audit_{entry.audit}"), entry, args.seed)   # builds again, then audits
        t2 = time.process_time()
        built[entry.audit] += t1 - t0
        audited[entry.audit] += t2 - t1
        counts[entry.audit][0 if entry.wheat else 1] += 1
        if got != ("accepted" if entry.wheat else "rejected"):
            wrong.append(f"{entry.audit} {entry.key}: {got}")
    print(f"{'audit':13s} {'wheats':>6s} {'chaffs':>6s} {'build':>7s} {'build+audit':>12s}  (CPU s)")
    for audit in served.AUDITS:
        print(f"{audit:13s} {counts[audit][0]:6d} {counts[audit][1]:6d} {built[audit]:7.2f} {audited[audit]:12.2f}")
    print(f"wall: import torch {imported - started:.2f} s, served + catalog + reference {loaded - imported:.2f} s, "
          f"total {time.perf_counter() - started:.2f} s; CPU: build {sum(built.values()):.2f} s, build+audit "
          f"{sum(audited.values()):.2f} s, this process {time.process_time():.2f} s ({args.threads} thread(s))")
    if wrong:
        print("verdicts the reference should not give:\n  " + "\n  ".join(wrong))
        raise SystemExit(1)


if __name__ == "__main__":
    main()
