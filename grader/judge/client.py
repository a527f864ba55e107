"""The grading's end of a judging server (`grader/judge/server.py`): `JudgeClient(exercise_ids, limits).judge(...)`.

It starts the server (again after a death), sends each submission's observations and returns one Outcome per
criterion, whatever the child judging them did. A child that a limit (or anything else) killed loses only the
criterion it was judging: that criterion gets the submission's `error` with the limit in words, and a fresh
child judges the ones after it, up to MAX_CHILDREN children per submission. A server that cannot start or
dies is the grader's failure (`JudgeUnavailable`): the grading is then a grader error, graded again later.
This module imports neither torch nor pytest, so the grading process need not either.
"""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path

from grader.subprocesses import end_by_closing_input
from grader.i18n import Text, t, verbatim
from grader.judge import channel
from grader.judge.criterion import CriterionMeta, Outcome
from grader.judge.limits import JudgeLimit, JudgeLimits, exceeded_message
from grader.worker.protocol import Status

STARTUP_SECONDS = 300.0   # importing torch and pytest and collecting every criterion, on a loaded machine
RESTARTS = 1              # per submission: a server that died while judging it is started again, and it judged anew
MAX_CHILDREN = 3          # per submission: after a child is killed, a fresh one judges the criteria left
ANSWER_SECONDS = 60.0     # for the server to say how a child it was told to kill ended
CLOSE_SECONDS = 10.0      # for a server told to end to do so
ONE_THREAD = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
# `python -m grader.judge.server`, whose first act (before its imports: seconds) is to die with this process, at once
# when it is gone already: a grading process killed while its server starts leaves none behind.
SERVE = ("import sys; from grader.subprocesses import die_with_parent; die_with_parent(int(sys.argv.pop(1))); "
         "from grader.judge.server import main; main()")


class JudgeUnavailable(Exception):
    """The judging server could not start or died: the grader's failure, not the submission's."""


class _ServerDied(JudgeUnavailable):
    """The server ended while it judged the request, neither closed nor stopped by this client (killed, say)."""


@dataclass
class _Request:
    pid: int | None = None
    exit: int | None = None
    cpu_s: float = 0.0
    result: str = ""           # the lines the child wrote
    ended: threading.Event = field(default_factory=threading.Event)
    error: str | None = None   # the server ended before this child did
    overtime: bool = False     # killed for running past the limits' wall time


@dataclass
class _Hello:
    criteria: dict[str, list[CriterionMeta]] = field(default_factory=dict)
    missing: dict[str, str] = field(default_factory=dict)
    ended: threading.Event = field(default_factory=threading.Event)
    error: str | None = None


class JudgeClient:
    """One judging server for one course's exercises and limits. Thread-safe: requests from any number of threads
    are judged each in a child of its own."""

    def __init__(self, exercise_ids: list[str], limits: JudgeLimits, solutions: Path | None = None):
        self.exercise_ids, self.limits = list(exercise_ids), limits
        self.solutions = solutions   # the course's solutions folder, its criteria's (None: the bundled course's)
        self._lock = threading.Lock()
        self._ids = itertools.count()
        self._proc: subprocess.Popen | None = None
        self._hello = _Hello()
        self._pending: dict[int, _Request] = {}

    def start(self) -> None:
        """Start the server now (it imports and collects while the caller does something else)."""
        with self._lock:
            self._ensure_started()

    def prepare(self, exercises: list[dict]) -> None:
        """Have the server read these exercises' references and run their criteria once on them now, while the
        caller does something else (a grading's probes run), rather than at its first request."""
        with self._lock:
            self._ensure_started()
            self._send({channel.ID: channel.PREPARE, channel.PREPARE: True, channel.EXERCISES: exercises})

    @property
    def pid(self) -> int | None:
        """The server's process id, while it runs."""
        proc = self._proc
        return proc.pid if proc is not None and proc.poll() is None else None

    def criteria(self) -> dict[str, list[CriterionMeta]]:
        """The criteria of every exercise, as the server collected them."""
        return self._ready().criteria

    def judge(self, exercises: list[dict]) -> dict[str, list[Outcome]]:
        """One Outcome per criterion of each requested exercise (`channel` says what an exercise holds). A server
        that dies while it judges (killed from outside: it never reads a submission's data itself) is started again
        and the submission judged anew, RESTARTS times; then it is JudgeUnavailable."""
        restarts = 0
        while True:
            try:
                return self._judged(exercises)
            except _ServerDied:
                if restarts >= RESTARTS:
                    raise
                restarts += 1

    def _judged(self, exercises: list[dict]) -> dict[str, list[Outcome]]:
        hello = self._ready()
        for entry in exercises:
            if entry["id"] in hello.missing:
                raise JudgeUnavailable(f"no criteria for {entry['id']}: {hello.missing[entry['id']]}")
        metas = {(entry["id"], m.id): m for entry in exercises for m in hello.criteria[entry["id"]]}
        known: dict[tuple[str, str], dict] = {}
        rest: Text | None = None   # what the criteria left unjudged say
        rest_status = Status.ERROR
        for child in itertools.count(1):
            request, lines = self._child(exercises, list(known.values()))
            begun, done, fault = None, False, None
            for line in lines:
                if channel.BEGIN in line:
                    begun = tuple(line[channel.BEGIN])
                elif channel.OUTCOME in line:
                    got = line[channel.OUTCOME]
                    known[(got["exercise"], got["criterion"])] = got
                elif channel.DONE in line:
                    done = True
                elif channel.FAULT in line:
                    fault = line[channel.FAULT]
            if done:
                break
            if fault is not None or begun is None or begun in known or begun not in metas:
                # the judge's own code failed, outside any criterion: the grader's fault
                rest_status = Status.GRADER_ERROR
                rest = t("the grader could not judge this criterion ({error}); this is the grader's fault, no point "
                         "is taken for it: please report it",
                         error=verbatim((fault or f"the judging process ended with {request.exit}").strip()
                                        .splitlines()[-1][:300]))
                break
            status, said = self._death(request)
            known[begun] = {"exercise": begun[0], "criterion": begun[1], "status": status, "message": said.texts(),
                            "evidence": {"judge_exit": request.exit, "judge_cpu_s": request.cpu_s}}
            if child >= MAX_CHILDREN:
                rest = t("not judged: judging your observations was stopped {count} times by the judge's limits",
                         count=child)
                break
        results: dict[str, list[Outcome]] = {}
        fallback = rest or t("the grader could not run this criterion; this is a grader fault: please report it")
        for entry in exercises:
            ex = entry["id"]
            results[ex] = [channel.outcome_from_json(known[(ex, m.id)], m) if (ex, m.id) in known
                           else Outcome(m, rest_status if rest else Status.GRADER_ERROR, fallback.texts(), {})
                           for m in hello.criteria[ex]]
        return results

    def close(self) -> None:
        """End the server: told by the end of its input, it ends its children and exits (waited for, so that its
        time is counted where its grading process's is)."""
        with self._lock:
            proc, self._proc = self._proc, None
        if proc is None:
            return
        end_by_closing_input(proc, CLOSE_SECONDS)

    # --- internals ------------------------------------------------------------------------------
    def _death(self, request: _Request) -> tuple[Status, Text]:
        """How a child that ended before its criterion did is said: that criterion's status and message."""
        code = request.exit if request.exit is not None else 0
        if request.overtime:
            return Status.ERROR, exceeded_message(JudgeLimit.WALL, self.limits)
        if code < 0 and -code in (signal.SIGKILL, signal.SIGXCPU) and request.cpu_s >= self.limits.cpu_s - 1:
            return Status.ERROR, exceeded_message(JudgeLimit.CPU, self.limits)
        if code < 0:
            try:
                name = signal.Signals(-code).name
            except ValueError:
                name = str(-code)
            return Status.ERROR, t("judging your observations ended the judge's process with {signal}: your code "
                                   "returned something the judge could not read", signal=name)
        return Status.GRADER_ERROR, t("the judge's process ended (exit status {code}) while judging this criterion: "
                                      "this is the grader's fault, no point is taken for it", code=code)

    def _ready(self) -> _Hello:
        with self._lock:
            self._ensure_started()
            hello = self._hello
        if not hello.ended.wait(STARTUP_SECONDS):
            with self._lock:
                if self._hello is hello:
                    self._stop()
            raise JudgeUnavailable(f"the judging server did not start within {STARTUP_SECONDS:g} s")
        if hello.error:
            raise JudgeUnavailable(hello.error)
        return hello

    def _child(self, exercises: list[dict], known: list[dict]) -> tuple[_Request, list[dict]]:
        """Have a child judge the request; how it ended and the lines it wrote."""
        with self._lock:
            self._ensure_started()
            request_id, request = next(self._ids), _Request()
            self._pending[request_id] = request
            self._send({channel.ID: request_id, channel.EXERCISES: exercises, channel.KNOWN: known})
        if not request.ended.wait(self.limits.wall_s):
            with self._lock:
                self._send({channel.ID: request_id, channel.KILL: True})
            if not request.ended.wait(ANSWER_SECONDS):
                raise JudgeUnavailable("the judging server did not end a judging past its time")
            request.overtime = True
        if request.error is not None:
            with self._lock:
                closed = self._proc is None   # closed or stopped here: not to be started again for this request
            raise (JudgeUnavailable if closed else _ServerDied)(request.error)
        return request, _lines(request.result)

    def _send(self, message: dict) -> None:
        stdin = self._proc.stdin if self._proc is not None else None
        if stdin is None:
            return
        try:
            stdin.write((json.dumps(message) + "\n").encode())
            stdin.flush()
        except (OSError, ValueError):
            pass   # it died: its reader tells every request of this server so

    def _ensure_started(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            return
        log = tempfile.TemporaryFile(prefix="grader-judge-")
        # No installed pytest plugin, and no thread pool started at import (numpy's OpenBLAS starts one): the
        # server forks, and forks only while it runs one thread.
        env = {**os.environ, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", **{name: "1" for name in ONE_THREAD}}
        proc = subprocess.Popen(
            [sys.executable, "-c", SERVE, str(os.getpid()), "--exercises", ",".join(self.exercise_ids),
             "--limits", json.dumps(self.limits.to_dict()),
             *(["--solutions", str(self.solutions)] if self.solutions is not None else [])],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, env=env,
            # Its own process group: a terminal's Ctrl-C reaches its grading process alone, which ends it (it dies
            # with that process however it ends).
            process_group=0)
        self._proc, self._hello, self._pending = proc, _Hello(), {}
        threading.Thread(target=self._read_replies, args=(proc, self._hello, self._pending, log), daemon=True,
                         name=f"judge-{proc.pid}").start()

    def _stop(self) -> None:
        if self._proc is not None:
            self._proc.kill()
            self._proc = None

    def _read_replies(self, proc: subprocess.Popen, hello: _Hello, pending: dict[int, _Request], log) -> None:
        for line in proc.stdout or ():
            try:
                reply = json.loads(line)
            except ValueError:   # a reply cut short: the server was killed as it wrote it; it ends here
                proc.kill()
                break
            if reply[channel.ID] == channel.HELLO:
                hello.criteria = {ex: [channel.meta_from_json(m) for m in ms]
                                  for ex, ms in reply[channel.CRITERIA].items()}
                hello.missing = reply[channel.MISSING]
                hello.ended.set()
                continue
            with self._lock:
                request = pending.get(reply[channel.ID])
            if request is None:
                continue
            if channel.PID in reply:
                request.pid = reply[channel.PID]
            elif channel.EXIT in reply:
                request.exit, request.cpu_s, request.result = (reply[channel.EXIT], reply[channel.CPU_S],
                                                               reply[channel.RESULT])
                with self._lock:
                    pending.pop(reply[channel.ID], None)
                request.ended.set()
        proc.wait()
        log.seek(0)
        tail = log.read().decode("utf-8", "replace").strip().splitlines()[-1:] or ["no output"]
        log.close()
        why = f"the judging server ended (exit {proc.returncode}): {tail[0][:300]}"
        if not hello.ended.is_set():
            hello.error = why
            hello.ended.set()
        with self._lock:
            for request in pending.values():
                request.error = why
                request.ended.set()
            pending.clear()


def _lines(written: str) -> list[dict]:
    """The lines a child wrote (the server passes on at most MAX_RESULT_BYTES of them)."""
    lines = []
    for raw in written.splitlines():
        try:
            lines.append(json.loads(raw))
        except ValueError:
            break   # a line cut short by a kill: everything before it stands
    return lines
