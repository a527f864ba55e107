"""The judging server: `python -m grader.judge.server --exercises ID,ID,... --limits JSON`.

Theory of operation. One server runs beside each grading process (a warm process of `grader batch`, a lone `grader
grade`). It imports torch, pytest, the judge and every criterion, and collects them into one pytest session, once:
pytest's set-up is paid per server, not per submission. It never runs student code and never reads a student's
observations itself. Its session's run-test loop (`pytest_runtestloop`, taken over by this plugin) waits for
requests; for each submission it forks a child, from this process while it has one thread only (forking a process
with threads is unsafe). The child limits itself (`grader/judge/limits.py`: memory by what is used, CPU per
criterion and in all), reads that submission's observations, runs the collected criteria of its exercises (one that
takes the judge's fixtures alone as pytest's per-test protocol would, with none of its hooks and reports:
`plugin.run_lean`; any other through the protocol itself), writes each outcome to the request's result file as it
comes, and exits without tearing anything down. The server reaps it and says how it ended. A submission whose data
takes more than the limits costs only its own criteria (`error`, the limit in words); the server, the grading
process and the next submission never see it. The reference observations are read once, by the server, and reach
every child through the fork. Messages: `grader/judge/channel.py`.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import select
import signal
import tempfile
import threading
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import IO

import pytest

from grader.judge import channel, limits as judge_limits
from grader.judge.criterion import CriterionMeta
from grader.judge.limits import JudgeLimits
from grader.judge.observations import Observations, observations_of, references_of
from grader.subprocesses import die_with_parent
from grader.judge.plugin import JUDGING, JudgePlugin, Judging, criterion_of, exercise_of, run_lean, runs_lean
from grader.judge.session import criteria_of, pytest_args


Items = dict[str, list[tuple[pytest.Function, CriterionMeta]]]   # exercise -> its criteria, collected once


class Server:
    """The serving half of the session: run-test loop, fork per request, reaping."""

    def __init__(self, replies, limits: JudgeLimits, metas: dict[str, list[CriterionMeta]], missing: dict[str, str]):
        self.replies, self.limits, self.metas, self.missing = replies, limits, metas, missing
        self.references: dict[tuple[str, str], Observations] = {}   # (exercise, folder) -> pinned references
        self.children: dict[int, tuple[object, IO[bytes]]] = {}     # pid -> request id, its result file
        self.warm: set[str] = set()     # exercises whose criteria this process has run once (on the references)
        self.limited = False            # a child, under the judge's limits

    def reply(self, message: dict) -> None:
        self.replies.write(json.dumps(message) + "\n")
        self.replies.flush()

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item):
        """Each criterion of a child within its CPU budget."""
        if not self.limited:
            return (yield)
        with judge_limits.criterion_timer(self.limits):
            return (yield)

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtestloop(self, session: pytest.Session) -> bool:
        items: Items = {}
        for item in session.items:
            meta = criterion_of(item)
            if meta is not None and isinstance(item, pytest.Function) and exercise_of(item) in self.metas:
                items.setdefault(exercise_of(item), []).append((item, meta))
        self.reply({channel.ID: channel.HELLO, channel.MISSING: self.missing,
                    channel.CRITERIA: {ex: [channel.meta_to_json(m) for m in ms] for ex, ms in self.metas.items()}})
        self.serve(items)
        # Nothing is left to write or release: tearing pytest, torch and the criteria down would only cost time.
        os._exit(0)

    def serve(self, items: Items) -> None:
        wake_r, wake_w = os.pipe()
        os.set_blocking(wake_r, False)
        os.set_blocking(wake_w, False)
        signal.set_wakeup_fd(wake_w)
        signal.signal(signal.SIGCHLD, lambda *_: None)   # a Python handler, so that SIGCHLD wakes the select
        pending = b""
        while True:
            ready = select.select([0, wake_r], [], [])[0]
            if wake_r in ready:
                while True:
                    try:
                        if not os.read(wake_r, 512):
                            break
                    except BlockingIOError:
                        break
            self.reap()
            if 0 in ready:
                chunk = os.read(0, 1 << 16)
                if not chunk:
                    break   # the grading process is gone: so is this server, and its children with it
                pending += chunk
                while b"\n" in pending:
                    line, pending = pending.split(b"\n", 1)
                    message = json.loads(line)
                    if message.get(channel.KILL):
                        for pid, (request_id, _) in list(self.children.items()):
                            if request_id == message[channel.ID]:
                                os.kill(pid, signal.SIGKILL)
                    elif message.get(channel.PREPARE):
                        try:
                            self.prepare(items, message[channel.EXERCISES])
                        except Exception:  # noqa: BLE001 - a head start missed: the request does it, and says why
                            traceback.print_exc()
                    else:
                        try:
                            self.start(items, message)
                        except Exception:  # noqa: BLE001 - that request's failure, said to it; the server goes on
                            fault = json.dumps({channel.FAULT: traceback.format_exc()[-3000:]})
                            self.reply({channel.ID: message[channel.ID], channel.EXIT: 1, channel.CPU_S: 0.0,
                                        channel.RESULT: fault + "\n"})
        for pid in self.children:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)

    def reap(self) -> None:
        while self.children:
            try:
                pid, status, usage = os.wait4(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            request_id, result = self.children.pop(pid)
            with result:
                result.seek(0)
                written = result.read(channel.MAX_RESULT_BYTES).decode("utf-8", "replace")
            self.reply({channel.ID: request_id, channel.EXIT: os.waitstatus_to_exitcode(status),
                        channel.CPU_S: round(usage.ru_utime + usage.ru_stime, 3), channel.RESULT: written})

    def prepare(self, items: Items, entries: list[dict]) -> None:
        """Read the references of these exercises (once, then shared by every child) and run their criteria once,
        here, on the references (trusted data, no limit needed): what is done on first use (imports inside torch,
        caches, Python's specialised bytecode) is then done before the fork, not again in every child, which
        judges in a third of the time. A grading asks for this while its probes run, or its first request does."""
        for entry in entries:
            key = (entry["id"], entry["reference"])
            if key not in self.references:
                self.references[key] = references_of(entry).pin()
        cold = [entry for entry in entries if entry["id"] not in self.warm]
        if cold:
            self.judge(items, {channel.EXERCISES: [{**e, "obs": e["reference"], "run": {}, "staged": None}
                                                   for e in cold]}, lambda message: None)
            self.warm.update(e["id"] for e in cold)

    def start(self, items: Items, request: dict) -> None:
        self.prepare(items, request[channel.EXERCISES])
        if _threads() != 1:
            raise RuntimeError(f"the judging server must fork from a single thread, not {_threads()}")
        gc.freeze()   # what the server holds stays out of every child's collections: no page of it is copied for them
        result = tempfile.TemporaryFile(prefix="grader-judged-")   # unlinked: nothing of it outlives this server
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                code = self.child(items, request, result)
            finally:
                os._exit(code)
        self.children[pid] = (request[channel.ID], result)
        self.reply({channel.ID: request[channel.ID], channel.PID: pid})

    # --- in the child ----------------------------------------------------------------------------
    def child(self, items: Items, request: dict, result: IO[bytes]) -> int:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        os.close(0)
        die_with_parent()   # no judging outlives its server
        with open(result.fileno(), "w", encoding="utf-8", closefd=False) as out:
            def write(message: dict) -> None:
                out.write(_message_text(message) + "\n")
                out.flush()   # what was judged before a kill is kept

            try:
                judge_limits.apply(self.limits)
                self.limited = True
                self.judge(items, request, write)
            except BaseException:  # noqa: BLE001 - the judge's own failure, said to the grading
                write({channel.FAULT: traceback.format_exc()[-3000:]})
                return 1
            write({channel.DONE: True})
        return 0

    def judge(self, items: Items, request: dict, write: Callable[[dict], None]) -> None:
        entries = request[channel.EXERCISES]
        observations = {entry["id"]: observations_of(entry) for entry in entries}
        references = {entry["id"]: self.references[(entry["id"], entry["reference"])] for entry in entries}

        def on_outcome(exercise: str, outcome) -> None:
            line = channel.outcome_to_json(exercise, outcome, judging.blocked_by.get((exercise, outcome.meta.id)))
            text = json.dumps(line)   # encoded once: its size decides, and it is what is written
            if len(text) > channel.MAX_OUTCOME_BYTES:
                line["evidence"] = {"evidence_dropped_bytes": len(text)}
                text = json.dumps(line)
            write({channel.OUTCOME: _Encoded(text)})

        judging = Judging(observations, references, self.limits, on_outcome)
        metas = {(ex, m.id): m for ex, ms in self.metas.items() for m in ms}
        for known in request.get(channel.KNOWN, []):   # judged by a child that died before this one
            key = (known["exercise"], known["criterion"])
            judging.outcomes[key] = channel.outcome_from_json(known, metas[key])
            if known.get("blocked_by"):
                judging.blocked_by[key] = known["blocked_by"]
        todo = [(entry["id"], item, meta) for entry in request[channel.EXERCISES]
                for item, meta in items.get(entry["id"], []) if (entry["id"], meta.id) not in judging.outcomes]
        if not todo:
            return
        todo[0][1].config.stash[JUDGING] = judging
        protocol = [item for _, item, _ in todo if not runs_lean(item)]   # a criterion with fixtures of its own
        after = {item: protocol[i + 1] if i + 1 < len(protocol) else None for i, item in enumerate(protocol)}

        def timer() -> contextlib.AbstractContextManager:
            return judge_limits.criterion_timer(self.limits) if self.limited else contextlib.nullcontext()

        for exercise, item, meta in todo:
            write({channel.BEGIN: [exercise, meta.id]})
            if item in after:
                item.config.hook.pytest_runtest_protocol(item=item, nextitem=after[item])
            else:
                run_lean(item, judging, timer)


class _Encoded(str):
    """A message's value already encoded as JSON (an outcome, encoded once to be measured)."""


def _message_text(message: dict) -> str:
    """json.dumps(message), with an _Encoded value written as it is."""
    return "{" + ", ".join(f"{json.dumps(k)}: {v if isinstance(v, _Encoded) else json.dumps(v)}"
                           for k, v in message.items()) + "}"


def _threads() -> int:
    """This process's threads, as the kernel counts them (a library's own threads included)."""
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return threading.active_count()


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m grader.judge.server")
    parser.add_argument("--exercises", required=True, help="the course's exercise ids, comma-separated")
    parser.add_argument("--limits", required=True, help="the judge's limits, as JSON")
    parser.add_argument("--solutions", type=Path, default=None,
                        help="the course's solutions folder, where each exercise's criteria are (default: the bundled "
                             "course's)")
    args = parser.parse_args()
    die_with_parent()   # with the grading process, even before it reads its stdin
    # Replies own stdout; anything else printed (pytest's terminal included) goes to stderr, never into a reply.
    replies = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)
    import torch

    torch.set_num_threads(1)   # one thread: the server forks, and a criterion's CPU is its own
    metas, missing = {}, {}
    for ex in args.exercises.split(","):
        try:
            metas[ex] = criteria_of(ex, args.solutions)
        except Exception as exc:  # noqa: BLE001 - said to every grading that asks for this exercise
            missing[ex] = f"{type(exc).__name__}: {exc}"
    server = Server(replies, JudgeLimits(**json.loads(args.limits)), metas, missing)
    pytest.main(pytest_args(list(metas), args.solutions), plugins=[JudgePlugin(), server])


if __name__ == "__main__":
    main()
