"""`grader check`'s plain route: student code in child processes of the same Python, with no sandbox.

On a student's own machine there is nothing to hide from the student, and macOS, Windows and most containers lack
what the sandbox is built from (namespaces, prctl, setpriv, a fork of a process that imported torch). So `grader
check` runs the public tests here on every system, and here too the probes of the visible criteria wherever the
strict sandbox cannot be had. A child is started as any Python program is (`python -I`), imports torch once, and runs
tasks: an exercise's probe group (the same runner the sandbox's worker calls, writing the same observation files,
which the judge reads as it reads the sandbox's), then that exercise's public tests (pytest in the same process:
one import of torch for both). Each exercise starts in a fresh child, as each starts in a fresh process in the
sandbox, so nothing one exercise's code changes reaches another's verdicts; each isolated probe group gets one too.

Theory of operation. The parent writes one task a line to the child's stdin and reads one event a line from the
child's stdout. The child keeps both pipes for itself: it points its descriptor 0 at nothing and its descriptor 1
at 2, which the parent opened on a log file, so whatever the student's code reads or prints never meets the task
stream. The parent holds each task to its wall-clock limit and the exercise's output cap (the log's growth), and
kills the child that passes either. A child that dies, or is killed, ends its task as the sandbox's worker would
have: a `Run` with the limit, exit status or signal, and its output's tail. The next exercise gets a fresh child,
started ahead while this one runs, so that its import of torch overlaps the running task.

What the plain route does not give: memory, CPU-time and process limits (the wall clock and output cap hold), and
observation files checked against the runner's digests (nothing on a student's own machine forges them for gain).
"""

from __future__ import annotations

import io
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from grader.i18n import Text, t
from grader.worker import protocol
from grader.worker.protocol import Event, Limit, Limits

OUTPUT_TAIL_BYTES = 4096        # what the report keeps of a run's output, as the sandbox's worker does
TESTS_OUTPUT_BYTES = 8 << 20    # what a public test run may print: pytest's own report is not printed
POLL_SECONDS = 0.05
REASON_CHARS = 200              # of a failing test's reason: one line of a terminal, as pytest's `-rf` cuts it
PROBES_FLAG = "--probes"        # a child started to run probes (it imports what they need before it is ready)
TESTS_INI = "pytest.ini"        # written beside the public tests: no configuration of a folder above applies
# pytest's outcomes in the order its closing line names them
OUTCOMES = ("failed", "passed", "skipped", "xfailed", "xpassed", "error")
# pytest plugins the public tests need none of; plugins installed in the environment are not loaded at all
UNUSED_PLUGINS = ("cacheprovider", "terminal", "pastebin", "junitxml", "doctest", "stepwise", "logging",
                  "faulthandler")


@dataclass
class PublicTests:
    """What the course's public tests said of one exercise's file."""

    counts: dict[str, int] = field(default_factory=dict)    # pytest's outcome -> how many
    failures: list[tuple[str, str]] = field(default_factory=list)   # (test, pytest's one-line reason)
    problem: Text | None = None    # they could not run to their end: why

    @property
    def passed(self) -> bool:
        return self.problem is None and not self.counts.get("failed") and not self.counts.get("error")


@dataclass(frozen=True)
class Exercise:
    """One exercise for the plain route: its job (what the sandbox's worker would be told) and its public tests,
    copied next to the student's file in `tests_dir`."""

    job: dict
    module_name: str
    tests_dir: Path
    limits: Limits
    probes: bool   # run the probes here (the plain route), or only the public tests (the sandbox probes)


def check(exercises: list[Exercise], scratch: Path,
          on_run: Callable | None = None) -> dict[str, PublicTests]:
    """Run every exercise's probes (where asked; each Run goes to `on_run` as soon as it is final) and public tests;
    the public tests' outcome by exercise id."""
    children = _Children(scratch, probes=any(ex.probes for ex in exercises))
    results: dict[str, PublicTests] = {}
    child: _Child | None = None
    try:
        for i, ex in enumerate(exercises):
            more = any(e.probes for e in exercises[i + 1:])   # another exercise will want a fresh child
            if ex.probes:
                if child is not None:
                    child.stop()
                child = _probe(ex, children, on_run, more)
            if child is None or not child.alive():
                child = children.fresh(ahead=more)
            results[ex.job["id"]], child = _tests(ex, child)
    finally:
        if child is not None:
            child.stop()
        children.stop()
    return results


def _probe(ex: Exercise, children: _Children, on_run: Callable | None, more: bool) -> _Child | None:
    """The exercise's probe groups, each in a fresh child (`more`: another exercise's child is to start ahead);
    returns the last group's child when it is still alive."""
    from grader.sandbox.supervisor import Run

    job = ex.job
    Path(job["obs_dir"]).mkdir(parents=True, exist_ok=True)
    # acks None: the observation files are read as written, as the references are (see the module's last paragraph)
    run = Run(job["id"], acks=None)  # type: ignore[arg-type]
    run.served_seed = job.get("models", {}).get("spawn", {}).get("seed")   # its model process's (grader/models)
    budget = float(ex.limits.timeout_s)   # for all its groups, as the sandbox's worker counts it
    group, groups = 0, 1
    child: _Child | None = None
    while group < groups:
        child = children.fresh(ahead=more)
        ack = Path(job["workdir"]).parent / f".{job['id']}-{group}.acks"   # outside the folder student code writes
        ended = child.run({"task": "probes", "job": job, "group": group, "ack": str(ack)},
                          budget, ex.limits.output_kb << 10)
        budget -= ended.wall_s
        run.wall_s = round(run.wall_s + ended.wall_s, 3)
        run.cpu_s = round(run.cpu_s + ended.event.get("cpu_s", 0.0), 3)
        run.output_bytes += ended.output_bytes
        run.output_tail = (run.output_tail + ended.output_tail)[-OUTPUT_TAIL_BYTES:]
        run.forbidden = sorted(set(run.forbidden) | _forbidden_seen(ack, job.get("forbidden", [])))
        if ended.event.get("event") != Event.DONE:
            run.limit, run.exit, run.signal = ended.limit, ended.exit, ended.signal
            if ended.limit is None and not _started(ack):
                # before the runner announced the student's import nothing of the student's ran: the grader's fault
                run.grader_fault = t("the checking process ended ({how}) before the student's code was imported",
                                     how=ended.how)
            child = None
            break
        run.exit = 0
        groups = int(ended.event.get("groups", 1))
        group += 1
        if group < groups:
            child.stop()
    if on_run is not None:
        on_run(run)
    return child


def _forbidden_seen(ack: Path, forbidden: list[str]) -> set[str]:
    """The exercise's forbidden APIs the child's hooks wrote in `ack` (one `op <name>` or `call <name>` a line)."""
    try:
        lines = ack.read_bytes().split(b"\n")
    except OSError:
        return set()
    wanted = set(forbidden)
    return {name for line in lines if (name := protocol.hook_name(line)) is not None and name in wanted}


def _started(ack: Path) -> bool:
    try:
        return protocol.STARTED in ack.read_bytes().split(b"\n")
    except OSError:
        return False


def _tests(ex: Exercise, child: _Child) -> tuple[PublicTests, _Child | None]:
    """The exercise's public tests in `child`; the child, or None when it did not survive them."""
    ended = child.run({"task": "tests", "folder": str(ex.tests_dir), "module": ex.module_name},
                      max(float(ex.limits.timeout_s), 120.0), TESTS_OUTPUT_BYTES)
    event = ended.event
    if event.get("event") == Event.DONE:
        return PublicTests({k: int(v) for k, v in event.get("counts", {}).items()},
                           [(str(n), str(r)) for n, r in event.get("failures", [])]), child
    if ended.limit == Limit.TIME:
        problem = t("stopped after {seconds:g} s: a test did not end", seconds=ended.limit_s)
    elif ended.limit == Limit.OUTPUT:
        problem = t("stopped: the code printed more than {kb:,} KB", kb=TESTS_OUTPUT_BYTES >> 10)
    else:
        problem = t("the tests' process ended ({how}); its last output: {output}", how=ended.how,
                    output=repr(ended.output_tail[-300:]))
    return PublicTests(problem=problem), None


@dataclass
class _Ended:
    """How a child's task ended: its event, or the limit, exit status or signal that ended the child instead."""

    event: dict
    wall_s: float
    output_bytes: int
    output_tail: str
    limit: Limit | None = None
    limit_s: float = 0.0
    exit: int | None = None
    signal: int | None = None

    @property
    def how(self) -> Text:
        if self.signal is not None:
            return t("signal {signal}", signal=self.signal)
        return t("exit status {code}", code=self.exit)


class _Children:
    """Fresh children, each with a log file of its own; one started ahead when another will be wanted."""

    def __init__(self, scratch: Path, probes: bool):
        self.scratch, self.probes = scratch, probes
        self.count = 0
        self.waiting: list[_Child] = []

    def fresh(self, ahead: bool) -> _Child:
        """A fresh child (the one started ahead, if any); `ahead`: start the next one now."""
        child = self.waiting.pop(0) if self.waiting else self._start()
        if ahead and not self.waiting:
            self.waiting.append(self._start())
        return child

    def _start(self) -> _Child:
        self.count += 1
        return _Child(self.scratch / f"plain-{self.count}.log", self.probes)

    def stop(self) -> None:
        for child in self.waiting:
            child.stop()
        self.waiting.clear()


class _Child:
    """One child process: tasks in on stdin, events out on stdout, everything else it prints in its log."""

    def __init__(self, log_path: Path, probes: bool):
        from grader.sandbox.levels import _run_module

        self.log_path = log_path
        env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}   # one thread, as in the sandbox
        with open(log_path, "wb") as log:
            command = [*_run_module("grader.grading.plain"), *([PROBES_FLAG] if probes else [])]
            self.proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, env=env,
                                         cwd=str(log_path.parent), start_new_session=os.name == "posix")
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.tasks: IO[bytes] = self.proc.stdin
        self.said: IO[bytes] = self.proc.stdout
        self.events: queue.Queue = queue.Queue()
        self.ready = False
        threading.Thread(target=self._read, daemon=True, name="plain-events").start()

    def _read(self) -> None:
        for line in self.said:
            try:
                self.events.put(json.loads(line))
            except ValueError:
                continue
        self.events.put(None)   # the child closed its end: it ended

    def alive(self) -> bool:
        return self.proc.poll() is None

    def run(self, task: dict, limit_s: float, output_cap: int) -> _Ended:
        """Send the task and wait for its end: its event, or the child's end (killed past `limit_s` or
        `output_cap`). The wait for the child's start (importing torch) is not the task's time."""
        from grader.sandbox.supervisor import STARTUP_SECONDS

        if not self.ready:
            first = self._next(time.monotonic() + STARTUP_SECONDS, None, 0)
            if first[0] != "event" or first[1].get("event") != Event.READY:
                return self._ended(first, time.monotonic(), 0)
            self.ready = True
        offset = self._log_size()
        started = time.monotonic()
        try:
            self.tasks.write((json.dumps(task) + "\n").encode("utf-8"))
            self.tasks.flush()
        except OSError:
            pass   # it is gone: its end is read below
        got = self._next(started + max(limit_s, 0.0), offset, output_cap)
        ended = self._ended(got, started, offset)
        ended.limit_s = limit_s
        return ended

    def _next(self, deadline: float, offset: int | None, output_cap: int) -> tuple[str, dict]:
        while True:
            try:
                event = self.events.get(timeout=POLL_SECONDS)
            except queue.Empty:
                event = ...
            if event is None:
                self.proc.wait()
                return "died", {}
            if event is not ...:
                return "event", event
            if offset is not None and self._log_size() - offset > output_cap:
                self.kill()
                return Limit.OUTPUT, {}
            if time.monotonic() > deadline:
                self.kill()
                return Limit.TIME, {}

    def _ended(self, got: tuple[str, dict], started: float, offset: int) -> _Ended:
        kind, event = got
        wall = round(time.monotonic() - started, 3)
        size = self._log_size()
        tail = self._tail(offset)
        if kind == "event":
            return _Ended(event, wall, size - offset, tail)
        code = self.proc.wait()
        limit = Limit(kind) if kind in (Limit.TIME, Limit.OUTPUT) else None
        sig = -code if code is not None and code < 0 else None
        return _Ended({}, wall, size - offset, tail, limit=limit, exit=None if sig is not None else code, signal=sig)

    def _log_size(self) -> int:
        try:
            return self.log_path.stat().st_size
        except OSError:
            return 0

    def _tail(self, offset: int) -> str:
        try:
            with open(self.log_path, "rb") as fh:
                fh.seek(max(offset, self._log_size() - OUTPUT_TAIL_BYTES))
                return fh.read(OUTPUT_TAIL_BYTES).decode("utf-8", "replace")
        except OSError:
            return ""

    def kill(self) -> None:
        if os.name == "posix" and hasattr(os, "killpg"):
            try:   # what the student's code started in the child's session goes with it
                os.killpg(self.proc.pid, signal.SIGKILL)
            except OSError:
                pass
        try:
            self.proc.kill()
        except OSError:
            pass
        self.proc.wait()

    def stop(self) -> None:
        """End a child whose tasks are done (or one never used)."""
        try:
            self.tasks.close()
        except OSError:
            pass
        self.kill()


# --- the child -------------------------------------------------------------------------------------------------


def main() -> int:
    """The child: read tasks from stdin, run each, report its end on stdout."""
    tasks = os.fdopen(os.dup(0), "r", encoding="utf-8")
    events = os.fdopen(os.dup(1), "w", buffering=1, encoding="utf-8")
    nothing = os.open(os.devnull, os.O_RDONLY)
    os.dup2(nothing, 0)   # the student's code reads nothing of the task stream
    os.close(nothing)
    os.dup2(2, 1)          # and prints into the log, not into the event stream
    for stream in (sys.stdout, sys.stderr):   # in any language, whatever the system's own encoding
        if isinstance(stream, io.TextIOWrapper):
            stream.reconfigure(encoding="utf-8", errors="backslashreplace")
    os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    sys.dont_write_bytecode = True
    import torch

    torch.set_num_threads(1)   # one thread, as in the sandbox: the same submission gives the same report
    torch.set_num_interop_threads(1)
    if PROBES_FLAG in sys.argv:
        # The probes' first dispatch mode (the forbidden-operator recorder) imports torch._dynamo: as in the sandbox's
        # worker, imported before the clock of any exercise starts
        import torch._dynamo  # noqa: F401
    events.write(json.dumps({"event": Event.READY}) + "\n")
    for line in tasks:
        task = json.loads(line)
        cpu = time.process_time()
        try:
            result = _run_probes(task) if task["task"] == "probes" else _run_tests(task)
        except BaseException:  # noqa: BLE001 - the grader's own failure: said in the log, the child ends
            import traceback

            traceback.print_exc()
            sys.stderr.flush()
            os._exit(3)
        _flush()
        events.write(json.dumps({"event": Event.DONE, "cpu_s": round(time.process_time() - cpu, 3), **result}) + "\n")
    return 0


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:  # noqa: BLE001 - a replaced stream is the student's loss, not the check's
            pass


def _run_probes(task: dict) -> dict:
    from grader.worker.runner import load_probe_code, run_probes

    job = task["job"]
    group = task["group"]
    steps = ([protocol.IMPORT_PROBE] if group == 0 else []) + list(job["groups"][group])
    code = [(module, Path(job["probe_code_dir"], name).read_bytes()) for module, name in job["probe_code"]]
    from grader.models.handles import attach

    attach(job)   # the exercise's model process, a plain child of this one (nothing to hide here)
    log = os.open(task["ack"], os.O_WRONLY | os.O_CREAT | os.O_APPEND | protocol.BINARY, 0o600)
    try:
        run_probes(job, _PlainChannel(job, steps, log), load_probe_code(code), write_import=group == 0)
    finally:
        # The hooks keep this descriptor: the public tests run next in this child, and what they call goes nowhere.
        nothing = os.open(os.devnull, os.O_WRONLY)
        os.dup2(nothing, log)
        os.close(nothing)
    return {"groups": len(job["groups"])}


class _PlainChannel:
    """The runner's channel (grader/worker/runner.py's `Channel`) on the plain route, in the child itself: it hands
    out the steps in order with their seeds and writes each answer's observation files as the sandbox's worker
    does. What the forbidden-API hooks see goes to `results`, the task's log of the child's progress, as it goes on
    the worker's result pipe; the parent reads it from there."""

    def __init__(self, job: dict, steps: list[str], log_fd: int):
        self.results = log_fd
        self.steps, self.seeds, self.folder = list(steps), job["seeds"], job["obs_dir"]

    def started(self) -> None:
        os.write(self.results, protocol.STARTED + b"\n")

    def next_step(self) -> tuple[str, str, int] | None:
        if not self.steps:
            return None
        name = self.steps.pop(0)
        return name, name, int(self.seeds.get(name, 0))

    def answer(self, token: str, observation: tuple[bytes, bytes | None]) -> None:
        text, tensors = observation
        if tensors:
            protocol.write_new(os.path.join(self.folder, token + protocol.TENSOR_SUFFIX), tensors)
        protocol.write_new(os.path.join(self.folder, token + protocol.JSON_SUFFIX), text)   # last: the probe finished


def _run_tests(task: dict) -> dict:
    import pytest

    folder = task["folder"]
    sys.modules.pop(task["module"], None)   # the tests import the student's file afresh, as pytest alone would
    os.chdir(folder)
    collector = _Collector()
    args = [folder, "--rootdir", folder, "-c", os.path.join(folder, TESTS_INI),
            *[arg for plugin in UNUSED_PLUGINS for arg in ("-p", f"no:{plugin}")]]
    pytest.main(args, plugins=[collector])
    return {"counts": collector.counts, "failures": collector.failures}


class _Collector:
    """pytest's outcomes as its closing line counts them, and each failure's one-line reason (as `-rf` says it)."""

    def __init__(self):
        self.counts: dict[str, int] = {}
        self.failures: list[list[str]] = []

    def _count(self, outcome: str, report=None) -> None:
        self.counts[outcome] = self.counts.get(outcome, 0) + 1
        if report is not None and outcome in ("failed", "error"):
            name = report.nodeid.split("::", 1)[-1] if "::" in report.nodeid else (report.nodeid or "?")
            self.failures.append([name, one_line_reason(report.longrepr)])

    def pytest_collectreport(self, report) -> None:
        if report.failed:
            self._count("error", report)

    def pytest_runtest_logreport(self, report) -> None:
        if report.when == "call":
            if hasattr(report, "wasxfail"):
                self._count("xfailed" if report.skipped else "xpassed")
            else:
                self._count(report.outcome, report)
        elif report.failed:
            self._count("error", report)
        elif report.skipped:
            self._count("skipped")


def one_line_reason(longrepr) -> str:
    """pytest's one-line reason for a failure: its crash message's first line (`AssertionError: expected ...`), or,
    for an error pytest reports as text (a test module that cannot be imported), the last line it marks `E`."""
    crash = getattr(longrepr, "reprcrash", None)
    text = getattr(crash, "message", None)
    if not text:
        lines = str(longrepr).splitlines()
        marked = [line[1:].strip() for line in lines if line.startswith("E ")]
        text = marked[-1] if marked else next((line.strip() for line in reversed(lines) if line.strip()), "")
    first = text.strip().splitlines()[0] if text.strip() else ""
    return first if len(first) <= REASON_CHARS else first[:REASON_CHARS - 1] + "…"


if __name__ == "__main__":
    sys.exit(main())
