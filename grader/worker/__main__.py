"""The sandboxed worker: `python -I -m grader.worker --control-fd N --request-fd M`.

One worker per submission imports torch once, then forks a child per exercise (and one per isolated
probe). Children run the student's code under rlimits; the parent never does. The parent drains each
child's output, enforces the wall clock, cleans up whatever the child left running, and reports each
exercise's fate as a JSON line on the control descriptor, which children do not hold.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import json
import os
import re
import signal
import sys
import time

from grader.worker import protocol
from grader.worker.jail import (ExerciseBox, become_subreaper, child_limits, cleanup_strays, drop_privileges,
                               hand_over, oom_kills)

OUTPUT_TAIL_BYTES = 4096
MEMORY_WORDS = (b"MemoryError", b"std::bad_alloc", b"Cannot allocate memory", b"can't allocate memory")


def main() -> int:
    parser = argparse.ArgumentParser(prog="grader.worker")
    parser.add_argument("--control-fd", type=int, required=True)
    parser.add_argument("--request-fd", type=int, required=True)
    args = parser.parse_args()
    requests = os.fdopen(args.request_fd, encoding="utf-8")
    # Two lines: the sandbox's own (seed, jail, probe modules), then the submission's exercises. A pre-started
    # sandbox gets the second only once its submission is known, and waits for it below, warm.
    setup = json.loads(requests.readline())
    control = os.fdopen(args.control_fd, "w", buffering=1, encoding="utf-8")
    jail = setup["jail"]
    if not jail.get("kill_all"):
        become_subreaper()

    os.environ["OMP_NUM_THREADS"] = "1"
    import torch  # noqa: F401 - imported once here, inherited by every forked child

    torch.set_num_threads(1)
    torch.set_num_interop_threads(1)

    for module in setup["probes_modules"]:
        # Probe modules' own imports (torch._dynamo, which the first optimizer needs) are paid here, once,
        # before any exercise's clock starts, instead of in every forked child.
        importlib.import_module(module)

    # Every object so far (torch, the probes) lives as long as the worker: frozen, the collector never walks
    # them in a forked child, where walking writes to each one's header and copies every page it touches.
    gc.freeze()
    send(control, {"event": "ready", "torch": torch.__version__})
    line = requests.readline()
    requests.close()
    if not line:
        return 0  # a pre-started sandbox that no submission needed
    request = {**setup, **json.loads(line)}
    for job in request["exercises"]:
        importlib.import_module(job["probes_module"])  # imported above, unless the request names another
    for job in request["exercises"]:
        send(control, {"event": "start", "id": job["id"]})
        started = time.monotonic()
        result = {"event": "done", "id": job["id"], "exit": None, "signal": None, "limit": None,
                  "output_tail": "", "output_bytes": 0, "max_rss_mb": 0.0, "cpu_s": 0.0, "grader_fault": ""}
        tail = bytearray()
        try:
            if jail.get("box"):
                with ExerciseBox(job, jail) as box:
                    run_exercise(job, jail, request["seed"], result, tail, control, started)
                    if result["limit"] is None and box.disk_full():
                        result["limit"] = "disk"
                    box.copy_out()
            else:
                hand_over(job["workdir"], jail, to_user=True)
                run_exercise(job, jail, request["seed"], result, tail, control, started)
                hand_over(job["workdir"], jail, to_user=False)
        except OSError as exc:  # the sandbox itself failed (a mount, a fork, a copy): never the student's fault
            result["grader_fault"] = result["grader_fault"] or f"the sandbox failed: {exc}"
        result["wall_s"] = round(time.monotonic() - started, 3)
        result["cpu_s"] = round(result["cpu_s"], 3)
        result["output_tail"] = bytes(tail[-OUTPUT_TAIL_BYTES:]).decode("utf-8", "replace")
        send(control, result)
    send(control, {"event": "finished"})
    return 0


def run_exercise(job: dict, jail: dict, seed: int, result: dict, tail: bytearray, control, started: float) -> None:
    """Run the exercise's probe groups, a child each, until one ends abnormally; fill `result`."""
    from grader.worker.runner import load_probe_groups

    deadline = started + job["timeout_s"]
    acks: dict[str, list | None] = {}
    for index, group in enumerate(load_probe_groups(job["probes_module"])):
        run = run_child(job, group, seed, jail, deadline, tail, control, first=index == 0)
        for name, digests in run["acks"].items():
            acks[name] = None if name in acks else digests  # reported twice: neither report is trusted
        send(control, {"event": "acks", "id": job["id"], "acks": acks})
        result["output_bytes"] += run["output_bytes"]
        result["max_rss_mb"] = max(result["max_rss_mb"], run["max_rss_mb"])
        result["cpu_s"] += run["cpu_s"]
        result["exit"], result["signal"], result["limit"] = run["exit"], run["signal"], run["limit"]
        result["grader_fault"] = run["grader_fault"]
        if run["limit"] or run["signal"] is not None or run["exit"] not in (0, None):
            break


def send(control, message: dict) -> None:
    control.write(json.dumps(message) + "\n")


def run_child(job: dict, group: list[str], seed: int, jail: dict, deadline: float, tail: bytearray, control,
              first: bool = True) -> dict:
    """Fork one child for a group of probes, supervise it to its end, and say how it ended."""
    read_end, write_end = os.pipe()
    ack_read, ack_write = os.pipe()
    worker = os.getpid()
    kills = oom_kills(jail)
    try:
        pid = os.fork()
    except OSError:
        for fd in (read_end, write_end, ack_read, ack_write):
            os.close(fd)
        raise
    if pid == 0:  # the child: student code runs from here on
        try:
            os.close(control.fileno())  # the control pipe is the parent's word alone
            if jail.get("scratch_fd") is not None:
                os.close(jail["scratch_fd"])  # the supervisor's folder is the worker's alone
            os.close(read_end)
            os.close(ack_read)
            os.dup2(write_end, 1)
            os.dup2(write_end, 2)
            os.close(write_end)
            os.setpgid(0, 0)
            child_limits(job, jail)
            drop_privileges(jail, worker)
            from grader.worker.runner import run_probes

            run_probes(job, group, seed, ack_fd=ack_write, write_import=first)
            try:  # os._exit skips it, and what the student printed belongs in the output tail
                sys.stdout.flush()
                sys.stderr.flush()
            except BaseException:  # noqa: BLE001 - a replaced sys.stdout is the student's loss, not a crash
                pass
        except BaseException:  # noqa: BLE001 - whatever happens, the child must not return into the parent's loop
            try:
                import traceback

                traceback.print_exc()  # into the output tail: a grader fault, or a submission that broke the runner
            finally:
                os._exit(3)
        os._exit(0)

    send(control, {"event": "child", "pid": pid})
    os.close(write_end)
    os.close(ack_write)
    os.set_blocking(read_end, False)
    os.set_blocking(ack_read, False)
    acks = Acks({*group, protocol.IMPORT_PROBE} if first else set(group))
    limit = None
    output_bytes = 0
    cap = job["output_kb"] * 1024
    status = rusage = None
    while True:
        output_bytes += drain(read_end, tail)
        acks.read(ack_read)
        if output_bytes > cap and limit is None:
            limit = "output"
            kill_child(pid, jail)
        waited, status, rusage = os.wait4(pid, os.WNOHANG)
        if waited == pid:
            break
        if time.monotonic() > deadline and limit is None:
            limit = "time"
            kill_child(pid, jail)
        if limit is None and oom_kills(jail) > kills:   # a process of the exercise passed its memory group's limit
            limit = "memory"
            kill_child(pid, jail)
        wait_readable(read_end, 0.02)
    cleanup_strays(pid, jail)  # first, so that no stray keeps writing while the pipes are drained
    output_bytes += drain(read_end, tail)
    acks.read(ack_read)
    os.close(read_end)
    os.close(ack_read)

    exit_code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else None
    sig = os.WTERMSIG(status) if os.WIFSIGNALED(status) else None
    if limit is None and sig == signal.SIGXCPU:
        limit = "cpu"
    if limit is None and sig == signal.SIGXFSZ:
        limit = "file_size"
    if limit is None and (sig is not None or exit_code not in (0, None)) and (
            oom_kills(jail) > kills or any(m in tail for m in MEMORY_WORDS)):
        limit = "memory"  # the memory group's limit killed it, or an allocation failed in C (abort) and it said so
    fault = ""
    if not acks.started and (sig is not None or exit_code not in (0, None)):
        # Before the runner announced the student's import nothing of the student's had run: the grader's fault.
        fault = (f"the grading process ended ({f'signal {sig}' if sig is not None else f'exit status {exit_code}'}) "
                 "before the student's code was imported")
    return {"exit": exit_code, "signal": sig, "limit": limit, "output_bytes": output_bytes, "acks": acks.digests,
            "grader_fault": fault,
            "max_rss_mb": round(rusage.ru_maxrss / 1024, 1),
            "cpu_s": rusage.ru_utime + rusage.ru_stime}


class Acks:
    """The digests of the observation files a child's runner wrote, as it reported them on a pipe of its own.

    The child runs student code, which can write files anywhere in its folder, observations included (a
    forged `obs/*.json` followed by os._exit(0) would otherwise read as probes that passed). The judge only
    trusts an observation file whose digest was reported here, once, for a probe of this child's group.
    """

    MAX_BYTES = 1 << 20
    LINE = re.compile(rb"^([A-Za-z0-9_.\-]{1,80}) ([0-9a-f]{64}) ([0-9a-f]{64}|-)$")

    def __init__(self, allowed: set[str]):
        self.allowed = allowed
        self.buffer = b""
        self.received = 0
        self.digests: dict[str, list | None] = {}
        self.started = False   # the runner announced the student's import (protocol.STARTED)

    def read(self, fd: int) -> None:
        while True:
            try:
                chunk = os.read(fd, 65536)
            except BlockingIOError:
                return
            if not chunk:
                return
            self.received += len(chunk)
            if self.received > self.MAX_BYTES:
                continue  # a flood is not what the runner writes: keep draining, stop listening
            *lines, self.buffer = (self.buffer + chunk).split(b"\n")
            for line in lines:
                if line == protocol.STARTED:
                    self.started = True
                    continue
                match = self.LINE.match(line)
                if match and match.group(1).decode() in self.allowed:
                    name = match.group(1).decode()
                    digests = [match.group(2).decode(), None if match.group(3) == b"-" else match.group(3).decode()]
                    self.digests[name] = None if name in self.digests else digests  # twice: trust neither


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
    """SIGKILL the child's group (and, in a pid namespace, everything else) without reaping anything.

    The child is reaped by run_child's own wait4, which needs its status; cleanup_strays reaps with
    waitpid(-1) and, called here, used to take the child's status away (wait4 then raised
    ChildProcessError and the whole worker died, so a plain timeout was reported as a crash).
    """
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    if jail.get("kill_all"):
        try:
            os.kill(-1, signal.SIGKILL)  # strays that left the group (setsid); run_child cleans up after the wait
        except ProcessLookupError:
            pass


if __name__ == "__main__":
    sys.exit(main())
