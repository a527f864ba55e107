"""`grader batch` on this machine without Dask: one warm grading process that runs `jobs` sandboxes at a time (its
slots), fed by PIPELINE threads a slot so that it judges one submission while the next ones' probes run. One process
for all the slots pays its fixed costs once (grader/batch/warm.py): the fork server's and the judge's imports."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor, as_completed
from contextlib import suppress
from functools import partial
from pathlib import Path

from grader.course import Course
from grader.batch.warm import GradingTimeout, WarmGrader, WarmGraderDied


def time_limit(course: Course) -> float:
    """How long one submission may take before its warm process is presumed stuck: every exercise's limit twice,
    plus the reference observations a fresh cache computes first."""
    return sum(ex.limits.timeout_s for ex in course.exercises) * 2 + 300


PIPELINE = 2   # submissions in flight per sandbox slot: one judged while the next one's probes run


class WarmPool:
    """One warm grading process with `jobs` sandbox slots, fed by PIPELINE threads a slot."""

    def __init__(self, course: Course, jobs: int, sandbox: str, lang: str, keep: Path | None = None):
        # keep: where observations are kept (grader.grading.rejudge)
        self.course, self.lang, self.keep = course, lang, keep
        self.jobs = max(1, jobs)
        self._graders = [WarmGrader(course.root, sandbox, slots=self.jobs)]
        self._local = threading.local()
        self._threads = itertools.count()
        self._unstarted = 0               # submissions no warm process has taken yet
        self._unstarted_lock = threading.Lock()

    def replies(self, submissions: list[tuple[object, Path]], started: Callable[[object], None] = lambda tag: None):
        """(tag, reply) for each (tag, submission folder), in the order they finish; `started(tag)` is called (from
        a grading thread) when a warm process takes the submission."""
        self._unstarted = len(submissions)
        pool = ThreadPoolExecutor(max_workers=self.jobs * PIPELINE)
        try:
            futures = {pool.submit(self._grade, folder, partial(started, tag)): tag for tag, folder in submissions}
            for future in as_completed(futures):
                yield futures[future], future.result()
        finally:
            # Left early (a signal, a full disk): the submissions not taken are dropped, and those taken end as
            # soon as `abort` ends their warm process; all of them are graded by the next run.
            pool.shutdown(wait=False, cancel_futures=True)

    def close(self) -> None:
        for grader in self._graders:
            grader.close()

    def abort(self) -> None:
        """End every warm process now, and with it what it started (its sandboxes, fork server and judging
        server): the batch stops. What was in flight is lost, as if never started."""
        for grader in self._graders:
            grader.abort()

    def _grade(self, folder: Path, started: Callable[[], None]) -> dict:
        if not hasattr(self._local, "grader"):   # this thread's warm process, for good
            self._local.grader = self._graders[next(self._threads) % len(self._graders)]
        started()
        with self._unstarted_lock:
            self._unstarted -= 1
            more = self._unstarted > 0
        ids = [ex.id for ex in self.course.exercises]
        try:
            return self._local.grader.grade(folder, ids, self.lang, time_limit(self.course), more, self.keep)
        except (GradingTimeout, WarmGraderDied) as exc:
            return {"error": exc.said.texts()}


RESUBMITS = 2   # times a report is asked again of a fresh pool after the process rendering it died


class ReportPool:
    """`jobs` processes that build and render reports off this process's interpreter lock, started from a fork
    server that has imported `preload` once (this process has threads, so it never forks itself). A process that
    dies (killed, out of memory) breaks the pool and every report it held: the pool is made anew and each of them
    asked again, up to RESUBMITS times, so that a death costs those reports' rendering, never the batch."""

    def __init__(self, jobs: int, preload: list[str]):
        self.jobs, self.preload = max(1, jobs), preload
        self._lock = threading.Lock()
        self._pool = self._new()

    def submit(self, fn: Callable, *args) -> Report:
        return Report(self, fn, args, self._submitted(fn, args))

    def shutdown(self) -> None:
        self._pool.shutdown(cancel_futures=True)

    def abort(self) -> None:
        """End every report process now: the batch stops, and what they were rendering is rendered by the next run."""
        pool = self._pool
        pool.shutdown(wait=False, cancel_futures=True)
        # ProcessPoolExecutor kills its processes itself only from Python 3.14 (kill_workers)
        for process in list((getattr(pool, "_processes", None) or {}).values()):
            with suppress(OSError, ValueError):
                process.kill()

    def _new(self):
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload(self.preload)
        return ProcessPoolExecutor(max_workers=self.jobs, mp_context=context, initializer=_report_process)

    def _submitted(self, fn: Callable, args: tuple) -> Future:
        from concurrent.futures.process import BrokenProcessPool

        pool = self._pool
        try:
            return pool.submit(fn, *args)
        except BrokenProcessPool:   # a process died since the last submission: this one goes to a fresh pool
            return self._renewed(pool).submit(fn, *args)

    def _renewed(self, broken):
        """The pool that replaces `broken` (made once, whichever report finds it broken first)."""
        with self._lock:
            if self._pool is broken:
                broken.shutdown(wait=False, cancel_futures=True)
                self._pool = self._new()
            return self._pool


class Report:
    """A report asked of a ReportPool: `done()` and `result()` as a future's, the report asked again of a fresh
    pool when the process rendering it died."""

    def __init__(self, pool: ReportPool, fn: Callable, args: tuple, future: Future):
        self.pool, self.fn, self.args, self.future = pool, fn, args, future
        self.resubmitted = 0

    def done(self) -> bool:
        return self.future.done()

    def result(self):
        from concurrent.futures.process import BrokenProcessPool

        while True:
            try:
                return self.future.result()
            except BrokenProcessPool:
                if self.resubmitted >= RESUBMITS:
                    raise
                self.resubmitted += 1
                self.future = self.pool._submitted(self.fn, self.args)


def _report_process() -> None:
    """A report process leaves a terminal's Ctrl-C and hang-up to the batch (which ends it), and dies with it."""
    import signal

    from grader.subprocesses import die_with_parent

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    die_with_parent()
