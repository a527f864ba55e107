"""`grader batch` on this machine without Dask: one warm grading process that runs `jobs` sandboxes at a time (its
slots), fed by PIPELINE threads a slot so that it judges one submission while the next ones' probes run. One process
for all the slots pays its fixed costs once (grader/batch/warm.py): the fork server's and the judge's imports."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, as_completed
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
        with ThreadPoolExecutor(max_workers=self.jobs * PIPELINE) as pool:
            futures = {pool.submit(self._grade, folder, partial(started, tag)): tag for tag, folder in submissions}
            for future in as_completed(futures):
                yield futures[future], future.result()

    def close(self) -> None:
        for grader in self._graders:
            grader.close()

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
