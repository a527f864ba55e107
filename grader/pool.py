"""`grader batch` on this machine without Dask: `jobs` threads, each feeding its own warm grading process."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

from grader.course import Course
from grader.warm import GradingTimeout, WarmGrader, WarmGraderDied


def time_limit(course: Course) -> float:
    """How long one submission may take before its warm process is presumed stuck: every exercise's limit twice,
    plus the reference observations a fresh cache computes first."""
    return sum(ex.timeout_s for ex in course.exercises) * 2 + 300


class WarmPool:
    def __init__(self, course: Course, jobs: int, sandbox: str, lang: str):
        self.course, self.jobs, self.sandbox, self.lang = course, max(1, jobs), sandbox, lang
        self._local = threading.local()
        self._graders: list[WarmGrader] = []
        self._lock = threading.Lock()

    def replies(self, submissions: list[tuple[object, Path]]):
        """(tag, reply) for each (tag, submission folder), in the order they finish."""
        with ThreadPoolExecutor(max_workers=self.jobs) as pool:
            futures = {pool.submit(self._grade, folder): tag for tag, folder in submissions}
            for future in as_completed(futures):
                yield futures[future], future.result()

    def close(self) -> None:
        for grader in self._graders:
            grader.close()

    def _grade(self, folder: Path) -> dict:
        grader = getattr(self._local, "grader", None)
        if grader is None:
            grader = self._local.grader = WarmGrader(self.course.root, self.sandbox)
            with self._lock:
                self._graders.append(grader)
        ids = [ex.id for ex in self.course.exercises]
        try:
            return grader.grade(folder, ids, self.lang, time_limit(self.course))
        except (GradingTimeout, WarmGraderDied) as exc:
            return {"error": str(exc)}
