"""A warm grading process: starts its judging server (grader/judge/server.py, which imports torch, pytest and the
criteria once and judges each submission in a child process of its own, under the judge's limits), then grades
submission after submission, each in a fresh sandboxed process tree (`grading.pipeline.probe_submission` stages and
supervises every one anew, with its own namespaces and uid), so nothing passes from one student to the next.

`python -m grader.batch.warm --course DIR --sandbox LEVEL [--slots K]` first says which sandbox it grades with, then
answers one JSON line per request line on stdin: {"id": N, "submission": path, "exercises": [...], "lang": "en"} ->
{"id": N, "files": {"report.json": ..., "report.html": ..., "scorecard.md": ...}} or {"id": N, "error": "..."}.
Replies come in the order the submissions' probes end (each names its request). K probe threads (slots) and the
judge pipeline the work: while the judge judges one submission, up to K others' probes run, each in its own sandbox.
One process for K sandboxes at a time pays its fixed costs once (the fork server's import of torch, the judging
server's import of torch, pytest and the criteria: several seconds of CPU each), where K processes of one slot
would pay them K times. Nothing of a submission's data is computed with in this process: whatever a submission's
observations cost the judge, this process and the next submission in its queue never see it. Each slot's next
submission's sandbox is started before its request comes (while the one before it is probed): it waits with torch
and the probe modules imported, and is used for that submission alone.

`WarmGrader` is the other end: it starts the process, feeds it from any number of threads (2K in flight keep
the pipeline full) and starts a fresh one after a death.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import queue
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from grader.subprocesses import end_by_closing_input
from grader.i18n import Text, rendered, t, verbatim

if TYPE_CHECKING:
    from grader.sandbox.session import SandboxSession

STARTUP_SECONDS = 300.0   # importing torch and pytest on a loaded machine
REPORT_FILES = ("json", "html", "md")
PARENT_POLL_SECONDS = 0.5
CLOSE_SECONDS = 30.0      # for a warm process told to end to end its sandboxes and judge
ABORT_SECONDS = 1.0       # for a killed warm process's reader to tell its requests (a stop is said within 2 s)
HELLO = "hello"


class _Said(Exception):
    """An exception whose words reach the gradebook: a sentence in every language (plain words stay as they are)."""

    def __init__(self, said: Text | dict | str):
        self.said = rendered(said)
        super().__init__(str(self.said))


class GradingTimeout(_Said):
    """The warm process gave no answer in time; it was killed."""


class WarmGraderDied(_Said):
    """The warm process ended without answering; the message holds its last output."""


@dataclass
class _Pending:
    done: threading.Event = field(default_factory=threading.Event)
    reply: dict | None = None
    error: Text | None = None


class WarmGrader:
    """One warm grading process for one course and sandbox level, started on first use and again after a death.
    Thread-safe: concurrent `grade` calls share the process and are answered in turn."""

    def __init__(self, course_root: Path, sandbox: str, slots: int = 1):
        """`slots`: sandboxes the process runs at a time (its probe threads)."""
        self.course_root = course_root
        self.sandbox = sandbox
        self.slots = max(1, slots)
        self._lock = threading.Lock()
        self._ids = itertools.count()
        self._proc: subprocess.Popen | None = None
        self._pending: dict = {}  # this process's requests not yet answered, by id
        self._aborted = False     # `abort` ended it for good: no process is started again
        self._reader: threading.Thread | None = None   # the current process's reader

    def grade(self, submission: Path, exercise_ids: list[str], lang: str, timeout_s: float,
              more: bool = True, keep: Path | None = None) -> dict:
        """The reply to one submission; `more` says whether another is expected after it (when none is, no sandbox
        is pre-started for it); `keep`, a store its observations are kept in (grader.grading.rejudge), the reply's
        `kept` then their record."""
        with self._lock:
            if self._aborted:
                raise WarmGraderDied("the batch is stopping")   # never stored: the batch drops it
            self._ensure_started()
            proc, request_id, pending = self._proc, next(self._ids), _Pending()
            self._pending[request_id] = pending
            request = {"id": request_id, "submission": str(submission), "exercises": exercise_ids, "lang": lang,
                       "more": more, "keep": str(keep) if keep is not None else None}
            try:
                proc.stdin.write((json.dumps(request) + "\n").encode())
                proc.stdin.flush()
            except (OSError, ValueError):
                pass   # it died: its reader tells every request of this process so
        return self._wait(proc, pending, timeout_s)

    def close(self) -> None:
        """End the process: told by the end of its input, it ends its sandboxes and judge and exits, waited for (so
        that its time and theirs is counted where the batch's is); killed when it does not within CLOSE_SECONDS."""
        if self._aborted:
            return   # killed already
        with self._lock:
            proc, self._proc = self._proc, None
        if proc is None:
            return
        end_by_closing_input(proc, CLOSE_SECONDS)

    def abort(self, seconds: float = ABORT_SECONDS) -> None:
        """End the process now, for good (killed: its judging server, fork server and sandboxes die with it), and
        wait up to `seconds` for its reader to tell every request waiting on it (and, at the basic level, to sweep
        its grading uids)."""
        # Not under the lock: a thread starting the process holds it while the process imports (seconds), and the
        # kill is what ends that wait. A process started after this look is ended by its starter (_ensure_started).
        self._aborted = True
        proc, reader = self._proc, self._reader
        if proc is None:
            return
        proc.kill()
        if reader is not None:
            reader.join(seconds)

    def _wait(self, proc: subprocess.Popen, pending: _Pending, timeout_s: float) -> dict:
        if not pending.done.wait(timeout_s):
            with self._lock:
                if self._proc is proc:
                    self._stop()
            raise GradingTimeout(t("no answer within {seconds:g} s", seconds=timeout_s))
        if pending.error:
            raise WarmGraderDied(pending.error)
        return pending.reply

    def _stop(self) -> None:
        if self._proc is not None:
            self._proc.kill()
            self._proc = None

    def _ensure_started(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            return
        log = tempfile.TemporaryFile(prefix="grader-warm-")
        proc = subprocess.Popen(
            [sys.executable, "-m", "grader.batch.warm", "--course", str(self.course_root), "--sandbox", self.sandbox,
             "--slots", str(self.slots), "--parent", str(os.getpid())],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, env={**os.environ, "GITHUB_STEP_SUMMARY": ""},
            # Its own process group: a terminal's Ctrl-C or hang-up reaches the batch alone, which ends this
            # process (and it what it started) itself; it dies with the batch however the batch ends.
            process_group=0)
        hello = _Pending()
        self._proc, self._pending = proc, {HELLO: hello}
        self._reader = threading.Thread(target=self._read_replies, args=(proc, self._pending, log), daemon=True,
                                        name=f"warm-{proc.pid}")
        self._reader.start()
        if self._aborted:   # stopped while this one was being started
            self._stop()
        if not hello.done.wait(STARTUP_SECONDS):
            self._stop()
            raise GradingTimeout(t("the grading process did not start within {seconds:g} s", seconds=STARTUP_SECONDS))
        if hello.error or "error" in hello.reply:   # e.g. the sandbox level it was asked for is not here
            self._stop()
            raise WarmGraderDied(hello.error or hello.reply["error"])

    def _read_replies(self, proc: subprocess.Popen, pending: dict, log) -> None:
        """Deliver each reply to its request; when the process ends, tell every request still waiting why."""
        for line in proc.stdout:
            try:
                reply = json.loads(line)
            except ValueError:   # a reply cut short: the process was killed as it wrote it; it ends here
                proc.kill()
                break
            waiting = pending.pop(reply.pop("id"), None)
            if waiting is not None:
                waiting.reply = reply
                waiting.done.set()
        proc.wait()
        self._sweep_uids()
        log.seek(0)
        tail = log.read().decode("utf-8", "replace").strip().splitlines()[-1:] or ["no output"]
        log.close()
        why = t("the grading process ended (exit {code}): {output}", code=proc.returncode, output=verbatim(tail[0]))
        hello = pending.pop(HELLO, None)
        if hello is not None:   # its starter waits holding the lock
            hello.error = why
            hello.done.set()
        # Under the lock: a request is either registered before this (and told here) or sent to a new process.
        with self._lock:
            for waiting in pending.values():
                waiting.error = why
                waiting.done.set()
            pending.clear()

    def _sweep_uids(self) -> None:
        """Without a pid namespace (basic level) what a student's code started outlives a killed warm process:
        its grading uids are swept once it is gone."""
        if os.geteuid() != 0:
            return   # no uids of its own were used
        from grader.course import CourseError, load_course
        from grader.sandbox.uids import sweep

        try:
            sweep(*load_course(self.course_root).uids)
        except (CourseError, OSError):
            pass   # the course changed under a running batch: its next grading's claim sweeps its own uid


def warm_up(judge) -> None:
    """Import what every grading needs here, once (the renderers), while the judging server imports torch, pytest
    and the criteria; then wait until it has: a server that cannot start is said at start."""
    import grader.render.templated  # noqa: F401
    import grader.report.build  # noqa: F401

    judge.criteria()


def probe_phase(course, sandbox, request: dict, session=None, server=None):
    """The submission's probes run in its sandbox (`session`'s, when one waits for it; a sandbox started for it is
    forked from `server` when given): a Probed, or the reply when the grader failed."""
    from grader.grading.pipeline import probe_submission

    try:
        return probe_submission(course, Path(request["submission"]), request["exercises"], sandbox, session, server)
    except Exception as exc:  # noqa: BLE001 - the grader's own failure is this submission's grader_error
        return {"error": f"{type(exc).__name__}: {exc}"}


def judge_phase(course, probed, request: dict, judge=None) -> dict:
    """The reply: the judged report's files, or why there are none."""
    from grader.grading.pipeline import judged
    from grader.grading.rejudge import stamped
    from grader.render.files import FORMATS

    if isinstance(probed, dict):
        return probed
    try:
        kept: dict = {}
        report = judged(probed, judge, partial(keep_observations, Path(request["keep"]), kept)
                        if request.get("keep") else None)
        files = {}
        for fmt in REPORT_FILES:
            name, render = FORMATS[fmt]
            files[name] = render(report, course.templates, request["lang"])
        if kept:
            kept["duration_s"] = report.duration_s
        # stamped, so that a re-judging that comes to the same report finds these files current
        return {"files": stamped(files, request["lang"], course.templates), "kept": kept or None}
    except Exception as exc:  # noqa: BLE001
        return {"error": f"{type(exc).__name__}: {exc}"}


def keep_observations(store: Path, kept: dict, probed) -> None:
    """Fill `kept` with the record of the probed submission's observations, put in `store`; left empty when they
    cannot be kept (the submission is then graded afresh by a later re-judging, never judged on less)."""
    from grader.grading.rejudge import NotKept, keep

    try:
        kept.update(keep(probed, store))
    except NotKept:
        pass


def _exit_with_parent(parent: int) -> None:
    """Whoever started this process (`parent`) is its only client: when it dies (kill -9 included, and before this
    process began), so does this."""
    while os.getppid() == parent:
        time.sleep(PARENT_POLL_SECONDS)
    os._exit(1)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m grader.batch.warm")
    parser.add_argument("--course", type=Path, required=True)
    parser.add_argument("--sandbox", required=True)
    parser.add_argument("--slots", type=int, default=1, help="sandboxes run at a time")
    parser.add_argument("--parent", type=int, default=None, help="the process this one serves (default: its parent)")
    args = parser.parse_args()
    # Watched from the first moment: a batch killed while this process imports leaves it no longer than a poll.
    threading.Thread(target=_exit_with_parent, args=(args.parent or os.getppid(),), daemon=True).start()
    from grader.course import load_course
    from grader.grading.pipeline import fork_server, judge_for, prestart, said_failure
    from grader.sandbox.levels import SandboxUnavailable, choose

    slots = max(1, args.slots)
    # Replies own stdout; anything an imported module prints goes to stderr, never into a reply.
    replies = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)

    def reply(message: dict) -> None:
        replies.write(json.dumps(message) + "\n")
        replies.flush()

    course = load_course(args.course)
    try:
        sandbox = choose(args.sandbox)
    except SandboxUnavailable as exc:
        reply({"id": HELLO, "error": str(exc)})
        return
    # One submission probed ahead of the one being judged per slot: the pipeline never holds more.
    probed_queue: queue.Queue = queue.Queue(maxsize=slots)
    requests = iter(sys.stdin)
    requests_lock = threading.Lock()
    server_ready = threading.Event()
    servers: list = []

    def run_probes(slot: int) -> None:
        # A sandbox waits, warm, for this slot's next submission: started when the one before it is taken (if
        # another is expected), it imports torch and the probe modules while that one is probed and judged. Started
        # in this thread, which outlives them: each dies with it (and so with this process, however it ends).
        # With a fork server (the course's choice, strict level) each worker is forked from it instead of started
        # afresh: torch is imported once for this process, not once per submission. The first slot's thread starts
        # it (it dies with that thread, which ends last); the others fork from it too.
        if slot == 0:
            try:
                servers.append(fork_server(course, sandbox))
            finally:
                server_ready.set()
        server_ready.wait()
        server = servers[0] if servers else None

        def started() -> SandboxSession:
            session = prestart(course, sandbox, server=server)
            said = said_failure(session)
            if said is not None:   # into this process's log: the head start was missed, and why
                print(f"grader: {said}", file=sys.stderr, flush=True)
            return session

        waiting: SandboxSession | None = started()
        while True:
            with requests_lock:
                line = next(requests, None)
            if line is None:
                break
            request = json.loads(line)
            # a sandbox for the next submission only when one is expected: a batch's last ones need none
            taken, waiting = waiting, (started() if request.get("more", True) else None)
            probed_queue.put((request, probe_phase(course, sandbox, request, taken, server)))
        if waiting is not None:
            waiting.discard()
        probed_queue.put(None)
        if slot == 0:
            for _ in range(slots - 1):   # the other slots' last submissions are probed before the server goes
                done_slots.acquire()
            if server is not None:
                server.close()
        else:
            done_slots.release()

    done_slots = threading.Semaphore(0)
    judge = judge_for(course)
    judge.start()   # it imports and collects the criteria while the first sandbox warms
    for slot in range(slots):
        threading.Thread(target=run_probes, args=(slot,), daemon=True, name=f"probes-{slot}").start()
    try:
        warm_up(judge)
    except Exception as exc:  # noqa: BLE001 - a judge that cannot start: said to whoever started this process
        reply({"id": HELLO, "error": f"{type(exc).__name__}: {exc}"})
        return
    reply({"id": HELLO, "sandbox": sandbox.level})
    ended = 0
    while ended < slots:
        item = probed_queue.get()
        if item is None:
            ended += 1
            continue
        request, probed = item
        reply({"id": request["id"], **judge_phase(course, probed, request, judge)})
    judge.close()


if __name__ == "__main__":
    main()
