"""What a `grader batch` has done and is doing: counts, the submissions in flight, and an estimate of the time
left from the rate measured so far.

The batch reports events (`begin`, `started`, `finished`); `line(lang)` says where it stands in one line, in the
batch's language. Grading threads report `started`, so every event takes a lock. The clock is injected so the
estimate can be tested.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from grader.i18n import Text, join, t, verbatim

SHOWN_IN_FLIGHT = 3   # names listed in the line; the rest are counted


def duration(seconds: float, lang: str = "en") -> str:
    """`45s`, `3m05s`, `1h02m` (`45秒`, `3分05秒`, `1小时02分`): short enough for a progress line."""
    return _duration(seconds).render(lang)


def _duration(seconds: float) -> Text:
    seconds = max(0, round(seconds))
    if seconds < 60:
        return t("{seconds}s", seconds=seconds)
    if seconds < 3600:
        return t("{minutes}m{seconds:02d}s", minutes=seconds // 60, seconds=seconds % 60)
    return t("{hours}h{minutes:02d}m", hours=seconds // 3600, minutes=seconds % 3600 // 60)


class BatchProgress:
    """Counts and timing of one batch run. `on_change(event, name, summary)` is called after each event
    ("begin", "started" or "finished"), with this object's lock released so it may call `line()`."""

    def __init__(self, on_change: Callable[[str, str | None, dict | None], None] | None = None,
                 clock: Callable[[], float] = time.monotonic):
        self._on_change = on_change
        self._clock = clock
        self._lock = threading.Lock()
        self._reporting = threading.Lock()   # one on_change at a time: grading threads report starts
        self.total = 0            # entries of the class folder
        self.done = 0             # of them, in the gradebook for this run (skipped ones included)
        self.to_grade = 0         # entries this run sends to a grading process
        self.graded = 0           # of them, finished
        self.in_flight: list[str] = []
        self._first_start: float | None = None

    def begin(self, total: int, skipped: int, to_grade: int) -> None:
        with self._lock:
            self.total, self.done, self.to_grade = total, skipped, to_grade
        self._changed("begin", None, None)

    def started(self, name: str) -> None:
        """A grading process took the submission `name`."""
        with self._lock:
            if self._first_start is None:
                self._first_start = self._clock()
            self.in_flight.append(name)
        self._changed("started", name, None)

    def finished(self, name: str, summary: dict, graded: bool = True) -> None:
        """The submission `name` is in the gradebook; `graded` False for an entry with nothing to grade (a link,
        an unreadable archive), which says nothing about the grading rate."""
        with self._lock:
            self.done += 1
            if graded:
                self.graded += 1
            if name in self.in_flight:
                self.in_flight.remove(name)
        self._changed("finished", name, summary)

    def eta_s(self) -> float | None:
        """Seconds until every submission is graded, at the rate measured since the first grading started; None
        before the first one ends."""
        with self._lock:
            if not self.graded or self._first_start is None:
                return None
            elapsed = self._clock() - self._first_start
            return elapsed / self.graded * (self.to_grade - self.graded)

    def line(self, lang: str = "en", width: int = 30) -> str:
        """`[12/30] ########...  40%  ETA 3m05s  grading: alice, bob, carol +2`, in `lang`."""
        eta = self.eta_s()
        with self._lock:
            filled = int(width * self.done / self.total) if self.total else width
            percent = 100 * self.done // self.total if self.total else 100
            count = f"[{self.done:>{len(str(self.total))}}/{self.total}]"
            text = f"{count} {'#' * filled}{'.' * (width - filled)} {percent:>3}%"
            if self.graded < self.to_grade:
                said = t("ETA {left}", left=_duration(eta)) if eta is not None else t("ETA measuring")
                text += "  " + said.render(lang)
            if self.in_flight:
                shown = self.in_flight[:SHOWN_IN_FLIGHT]
                more = len(self.in_flight) - len(shown)
                names = join((verbatim(name) for name in shown), t(", "))
                text += "  " + t("grading: {names}", names=names).render(lang) + (f" +{more}" if more else "")
            return text

    def _changed(self, event: str, name: str | None, summary: dict | None) -> None:
        if self._on_change is not None:
            with self._reporting:
                self._on_change(event, name, summary)
