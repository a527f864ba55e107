"""The sandboxed worker: `python -I -m grader.worker --control-fd N REQUEST.json`.

One worker per submission imports torch once, then forks a child per exercise (and one per isolated
probe). Children run the student's code under rlimits; the parent never does. The parent drains each
child's output, enforces the wall clock, cleans up whatever the child left running, and reports each
exercise's fate as a JSON line on the control descriptor, which children do not hold.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time

from grader.worker.jail import apply_jail, child_limits, cleanup_strays

OUTPUT_TAIL_BYTES = 4096


def main() -> int:
    parser = argparse.ArgumentParser(prog="grader.worker")
    parser.add_argument("--control-fd", type=int, required=True)
    parser.add_argument("request")
    args = parser.parse_args()
    with open(args.request, encoding="utf-8") as fh:
        request = json.load(fh)
    control = os.fdopen(args.control_fd, "w", buffering=1, encoding="utf-8")

    apply_jail(request["jail"])  # masks, then drops to the unprivileged user, before any heavy import

    os.environ["OMP_NUM_THREADS"] = "1"
    import torch  # noqa: F401 - imported once here, inherited by every forked child

    torch.set_num_threads(1)
    torch.set_num_interop_threads(1)
    from grader.worker.runner import load_probe_groups

    send(control, {"event": "ready", "torch": torch.__version__})
    for job in request["exercises"]:
        send(control, {"event": "start", "id": job["id"]})
        groups = load_probe_groups(job["probes_module"])
        started = time.monotonic()
        deadline = started + job["timeout_s"]
        result = {"event": "done", "id": job["id"], "exit": None, "signal": None, "limit": None,
                  "output_tail": "", "output_bytes": 0, "max_rss_mb": 0.0, "cpu_s": 0.0}
        tail = bytearray()
        for group in groups:
            run = run_child(job, group, request["seed"], request["jail"], deadline, tail, control)
            result["output_bytes"] += run["output_bytes"]
            result["max_rss_mb"] = max(result["max_rss_mb"], run["max_rss_mb"])
            result["cpu_s"] += run["cpu_s"]
            result["exit"], result["signal"], result["limit"] = run["exit"], run["signal"], run["limit"]
            if run["limit"] or run["signal"] is not None or run["exit"] not in (0, None):
                break
        result["wall_s"] = round(time.monotonic() - started, 3)
        result["cpu_s"] = round(result["cpu_s"], 3)
        result["output_tail"] = bytes(tail[-OUTPUT_TAIL_BYTES:]).decode("utf-8", "replace")
        send(control, result)
    send(control, {"event": "finished"})
    return 0


def send(control, message: dict) -> None:
    control.write(json.dumps(message) + "\n")


def run_child(job: dict, group: list[str], seed: int, jail: dict, deadline: float, tail: bytearray, control) -> dict:
    """Fork one child for a group of probes, supervise it to its end, and say how it ended."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: student code runs from here on
        try:
            os.close(control.fileno())  # the control pipe is the parent's word alone
            os.close(read_end)
            os.dup2(write_end, 1)
            os.dup2(write_end, 2)
            os.close(write_end)
            os.setpgid(0, 0)
            child_limits(job, jail)
            from grader.worker.runner import run_probes

            run_probes(job, group, seed)
        except BaseException:  # noqa: BLE001 - whatever happens, the child must not return into the parent's loop
            os._exit(3)
        os._exit(0)

    send(control, {"event": "child", "pid": pid})
    os.close(write_end)
    os.set_blocking(read_end, False)
    limit = None
    output_bytes = 0
    cap = job["output_kb"] * 1024
    status = rusage = None
    while True:
        output_bytes += drain(read_end, tail)
        if output_bytes > cap and limit is None:
            limit = "output"
            kill_child(pid, jail)
        waited, status, rusage = os.wait4(pid, os.WNOHANG)
        if waited == pid:
            break
        if time.monotonic() > deadline and limit is None:
            limit = "time"
            kill_child(pid, jail)
        wait_readable(read_end, 0.02)
    output_bytes += drain(read_end, tail)
    os.close(read_end)
    cleanup_strays(pid, jail)

    exit_code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else None
    sig = os.WTERMSIG(status) if os.WIFSIGNALED(status) else None
    if limit is None and sig == signal.SIGXCPU:
        limit = "cpu"
    if limit is None and sig == signal.SIGXFSZ:
        limit = "file_size"
    return {"exit": exit_code, "signal": sig, "limit": limit, "output_bytes": output_bytes,
            "max_rss_mb": round(rusage.ru_maxrss / 1024, 1),
            "cpu_s": rusage.ru_utime + rusage.ru_stime}


def drain(fd: int, tail: bytearray) -> int:
    """Read what is waiting on fd, keep the last few kilobytes, return how many bytes came."""
    total = 0
    while True:
        try:
            chunk = os.read(fd, 65536)
        except BlockingIOError:
            return total
        if not chunk:
            return total
        total += len(chunk)
        tail.extend(chunk)
        if len(tail) > 2 * OUTPUT_TAIL_BYTES:
            del tail[: len(tail) - OUTPUT_TAIL_BYTES]


def wait_readable(fd: int, seconds: float) -> None:
    import select

    select.select([fd], [], [], seconds)


def kill_child(pid: int, jail: dict) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    cleanup_strays(pid, jail)


if __name__ == "__main__":
    sys.exit(main())
