"""Time exercise `audits` through the grader's model process: what its reply quanta cost, and how far each kind of
call stays below its quantum.

    .venv/bin/python bench/audits_model_process.py [--audits solutions/audits/audits.py] [--seed 1234]

The reference audits (or `--audits`) run in this process on handles to a real model process (grader/models), twice:
with the quanta of grader/models/host.py's ModelLimits, and with quanta of 0.1 ms (the replies then leave as soon as
they are computed). Per audit: entries served, requests, wall time of each run. Per call (method), from the second
run: the slowest reply, against its quantum; a call slower than its quantum replies a quantum later, which timing could
tell apart, so the quantum must stay above it. No sandbox: the audits' own compute and the probe's are the same here.
"""
from __future__ import annotations

import argparse
import importlib.util
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

AUDITS = ("causality", "targets", "registration", "gradients", "resume")


def run(audits, limits, seed: int) -> tuple[dict, dict]:
    """(audit -> (entries, requests, seconds), method -> slowest reply in seconds) of one run of every audit."""
    import socket

    import torch

    from grader.models import handles
    from grader.models.host import ModelHost

    slowest: dict[str, float] = defaultdict(float)
    per_audit = {}
    with tempfile.TemporaryDirectory() as folder:
        host = ModelHost("audits", ROOT / "solutions" / "audits" / "served.py", seed, Path(folder), limits)
        host.start()
        try:
            sock = socket.socket(socket.AF_UNIX)
            sock.connect(str(Path(folder) / host.name))
            connection = handles.Connection(sock.fileno(), sock.fileno(), keep=sock)
            connection.count("causality")   # waits for the model process to be up
            requests = [0]
            original = connection.request

            def timed(header, tensors=None):
                started = time.perf_counter()
                try:
                    return original(header, tensors)
                finally:
                    name = header.get("method") or header.get("op")
                    slowest[name] = max(slowest[name], time.perf_counter() - started)
                    requests[0] += 1

            connection.request = timed   # type: ignore[method-assign]
            generator = torch.Generator().manual_seed(seed)
            for audit in AUDITS:
                requests[0] = 0
                started = time.perf_counter()
                served = connection.count(audit)
                for index in range(served):
                    handle = connection.open(audit, index)
                    args = (handle,)
                    if audit == "gradients":
                        config = handle.config
                        shape = (2, min(8, config.block_size))
                        args = (handle, torch.randint(0, config.vocab_size, shape, generator=generator),
                                torch.randint(0, config.vocab_size, shape, generator=generator))
                    try:
                        getattr(audits, f"audit_{audit}")(*args)
                    except AssertionError:
                        pass
                per_audit[audit] = (served, requests[0], time.perf_counter() - started)
        finally:
            host.stop()
    return per_audit, dict(slowest)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--audits", type=Path, default=ROOT / "solutions" / "audits" / "audits.py")
    parser.add_argument("--seed", type=int, default=1234)
    args = parser.parse_args()
    import torch

    from grader.models.host import ModelLimits

    torch.set_num_threads(1)
    spec = importlib.util.spec_from_file_location("bench_audits", args.audits)
    audits = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(audits)
    limits = ModelLimits()
    quick = ModelLimits(quantum_s=1e-4, run_quantum_s=1e-4, open_quantum_s=1e-4)
    held, _ = run(audits, limits, args.seed)
    free, slowest = run(audits, quick, args.seed)
    print(f"{'audit':<14}{'entries':>8}{'requests':>10}{'quantised s':>13}{'free s':>8}")
    for audit in AUDITS:
        (served, requests, seconds), (_, _, quick_s) = held[audit], free[audit]
        print(f"{audit:<14}{served:>8}{requests:>10}{seconds:>13.2f}{quick_s:>8.2f}")
    total, quick_total = sum(v[2] for v in held.values()), sum(v[2] for v in free.values())
    print(f"{'all':<14}{'':>8}{'':>10}{total:>13.2f}{quick_total:>8.2f}")
    run_calls = {"new", "load", "step", "save", "parameters"}
    print("\nslowest reply without quanta (ms), against the quantum it is held to:")
    for name, seconds in sorted(slowest.items(), key=lambda kv: -kv[1]):
        quantum = (limits.open_quantum_s if name == "open" else limits.run_quantum_s if name in run_calls
                   else limits.quantum_s)
        flag = "  OVER" if seconds > quantum else ""
        print(f"  {name:<18}{seconds * 1000:>8.1f}  / {quantum * 1000:.0f}{flag}")


if __name__ == "__main__":
    main()
