"""A warm grading process: imports torch, pytest, the judge and the criteria once, then grades submission after
submission, each in a fresh sandboxed process tree (`grading.grade` stages and supervises every one anew, with
its own namespaces and uid), so nothing passes from one student to the next.

`python -m grader.warm --course DIR --sandbox LEVEL` says on its first line which sandbox it grades with, then
answers one JSON line per request line on stdin: {"submission": path, "exercises": [...], "lang": "en"} ->
{"files": {"report.json": ..., "report.html": ..., "scorecard.md": ...}} or {"error": "..."}.
`WarmGrader` is the other end: it starts the process, feeds it and restarts it when it dies.
"""

from __future__ import annotations

import argparse
import json
import os
import select
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

STARTUP_SECONDS = 300.0   # importing torch and pytest on a loaded machine
REPORT_FILES = ("json", "html", "md")
PARENT_POLL_SECONDS = 0.5


class GradingTimeout(Exception):
    """The warm process gave no answer in time; it was killed."""


class WarmGraderDied(Exception):
    """The warm process ended without answering; the message holds its last output."""


class WarmGrader:
    """One warm grading process for one course and sandbox level, started on first use and again after a death.
    Not thread-safe: one per grading slot."""

    def __init__(self, course_root: Path, sandbox: str):
        self.course_root = course_root
        self.sandbox = sandbox
        self.sandbox_level = ""   # what the process said it grades with
        self._proc: subprocess.Popen | None = None
        self._log = None
        self._buffer = b""

    def grade(self, submission: Path, exercise_ids: list[str], lang: str, timeout_s: float) -> dict:
        self._ensure_started()
        request = {"submission": str(submission), "exercises": exercise_ids, "lang": lang}
        try:
            self._proc.stdin.write((json.dumps(request) + "\n").encode())
            self._proc.stdin.flush()
        except BrokenPipeError:
            raise self._died() from None
        return self._reply(timeout_s)

    def close(self) -> None:
        if self._proc is not None:
            self._proc.kill()
            self._proc.wait()
            self._proc.stdin.close()
            self._proc.stdout.close()
            self._log.close()
            self._proc = None

    def _ensure_started(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            return
        self.close()
        self._log = tempfile.TemporaryFile(prefix="grader-warm-")
        self._buffer = b""
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "grader.warm", "--course", str(self.course_root), "--sandbox", self.sandbox],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log,
            env={**os.environ, "GITHUB_STEP_SUMMARY": ""})
        hello = self._reply(STARTUP_SECONDS)
        if "error" in hello:
            self.close()
            raise WarmGraderDied(hello["error"])
        self.sandbox_level = hello["sandbox"]

    def _reply(self, timeout_s: float) -> dict:
        deadline = time.monotonic() + timeout_s
        out = self._proc.stdout.fileno()
        while b"\n" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                self.close()
                raise GradingTimeout(f"no answer within {timeout_s:g} s")
            ready, _, _ = select.select([out], [], [], left)
            if ready:
                chunk = os.read(out, 1 << 20)
                if not chunk:
                    raise self._died()
                self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        return json.loads(line)

    def _died(self) -> WarmGraderDied:
        self._proc.wait()
        self._log.seek(0)
        tail = self._log.read().decode("utf-8", "replace").strip().splitlines()[-1:] or ["no output"]
        code = self._proc.returncode
        self.close()
        return WarmGraderDied(f"the grading process ended (exit {code}): {tail[0]}")


def warm_up(exercise_ids: list[str]) -> None:
    """Import what every grading needs, once: torch, pytest, the judge, the criteria, the renderers."""
    import torch  # noqa: F401

    import grader.judge.observations  # noqa: F401
    import grader.render.templated  # noqa: F401
    import grader.report.build  # noqa: F401
    from grader.judge.session import criteria_of

    for ex in exercise_ids:
        criteria_of(ex)


def serve(course, sandbox, request: dict) -> dict:
    from grader.grading import grade
    from grader.reporting import FORMATS

    try:
        report = grade(course, Path(request["submission"]), request["exercises"], sandbox)
        files = {}
        for fmt in REPORT_FILES:
            name, render = FORMATS[fmt]
            files[name] = render(report, course.root / "templates", request["lang"])
        return {"files": files}
    except Exception as exc:  # noqa: BLE001 - the grader's own failure is this submission's grader_error
        return {"error": f"{type(exc).__name__}: {exc}"}


def _exit_with_parent() -> None:
    """Whoever started this process is its only client: when it dies (kill -9 included), so does this."""
    parent = os.getppid()
    while os.getppid() == parent:
        time.sleep(PARENT_POLL_SECONDS)
    os._exit(1)


def main() -> None:
    from grader.course import load_course
    from grader.sandbox.levels import SandboxUnavailable, choose

    parser = argparse.ArgumentParser(prog="python -m grader.warm")
    parser.add_argument("--course", type=Path, required=True)
    parser.add_argument("--sandbox", required=True)
    args = parser.parse_args()
    # Replies own stdout; anything an imported module prints goes to stderr, never into a reply.
    replies = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)
    threading.Thread(target=_exit_with_parent, daemon=True).start()

    def reply(message: dict) -> None:
        replies.write(json.dumps(message) + "\n")
        replies.flush()

    course = load_course(args.course)
    try:
        sandbox = choose(args.sandbox)
    except SandboxUnavailable as exc:
        reply({"error": str(exc)})
        return
    warm_up([ex.id for ex in course.exercises])
    reply({"sandbox": sandbox.level})
    for line in sys.stdin:
        reply(serve(course, sandbox, json.loads(line)))


if __name__ == "__main__":
    main()
