"""How many known-broken implementations a class's own checks caught, for class.html.

An exercise whose students write checks (acceptance tests of a model, say) is graded by running each check on
correct and on broken implementations. Such a criterion records in its evidence how many broken implementations the
student's check rejected, of how many, and the keys of those it missed:

    {"caught": 5, "total": 7, "missed": ["<exercise>/mutants/<mutant>", ...]}

The gradebook keeps no evidence, so the counts are read from each graded submission's report.json, which the batch
wrote beside its report.html. Nothing of a report that is unreadable, too large or malformed is counted: its student
is left out of that criterion's tally, and the other students' counts stand.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

CAUGHT, TOTAL, MISSED = "caught", "total", "missed"   # the evidence keys (one source: criteria write these names)
MAX_REPORT_BYTES = 64 << 20   # a report.json larger than this is not read (the judge caps its results at 32 MB)
MAX_KEY_CHARS = 200           # a key longer than this is cut: keys are the course's, short names
MISSED_SHOWN = 8              # the broken implementations class.html names as missed most often


@dataclass(frozen=True)
class Catches:
    """One student's check on one criterion: `caught` of `total` broken implementations, the keys of those missed."""

    caught: int
    total: int
    missed: tuple[str, ...] = ()


def catches_of(evidence: object) -> Catches | None:
    """The counts a criterion's evidence holds, or None when it holds none or holds them malformed (a count that is
    not a whole number, more caught than there are, more missed than were not caught)."""
    if not isinstance(evidence, dict):
        return None
    caught, total, missed = evidence.get(CAUGHT), evidence.get(TOTAL), evidence.get(MISSED, [])
    if not (isinstance(caught, int) and isinstance(total, int)) or isinstance(caught, bool) or isinstance(total, bool):
        return None
    if not 0 <= caught <= total or total == 0 or not isinstance(missed, list):
        return None
    keys = tuple(str(key)[:MAX_KEY_CHARS] for key in missed if isinstance(key, str))
    if len(keys) > total - caught:
        return None
    return Catches(caught, total, keys)


def report_catches(report_dir: str | Path | None) -> dict[tuple[str, str], Catches]:
    """(exercise, criterion) -> Catches of every criterion with such evidence in the report.json of `report_dir`;
    empty when there is none, or it cannot be read whole."""
    if not report_dir:
        return {}
    path = Path(report_dir) / "report.json"
    try:
        with path.open("rb") as f:
            data = f.read(MAX_REPORT_BYTES + 1)
        report = json.loads(data) if len(data) <= MAX_REPORT_BYTES else None
        found = {}
        for ex in report["exercises"] if isinstance(report, dict) else ():
            for c in ex["criteria"]:
                counts = catches_of(c.get("evidence"))
                if counts is not None:
                    found[str(ex["id"]), str(c["id"])] = counts
        return found
    except (OSError, ValueError, KeyError, TypeError, AttributeError, RecursionError):
        return {}


@dataclass
class CatchTally:
    """One criterion over the class: what the students' checks caught together."""

    exercise: str
    criterion: str
    title: dict[str, str]
    students: int                      # counted submissions whose report holds this criterion's counts
    caught: int                        # broken implementations caught, summed over those students
    total: int                         # ... of this many
    caught_all: int                    # students whose check caught every one
    missed: list[tuple[str, int]] = field(default_factory=list)   # (key, students who missed it), most first

    @property
    def share(self) -> float:
        return self.caught / self.total if self.total else 0.0


def tally(order: list[tuple[str, str, dict[str, str]]], students: list[dict[tuple[str, str], Catches]]
          ) -> list[CatchTally]:
    """Each criterion of `order` ((exercise, criterion, title), in course order) that some student's report counts
    catches for, summed over `students` (one dict of report_catches per counted submission)."""
    tallies = []
    for exercise, criterion, title in order:
        counts = [s[exercise, criterion] for s in students if (exercise, criterion) in s]
        if not counts:
            continue
        missed = Counter(key for c in counts for key in set(c.missed))
        # most missed first; at the same count the key that sorts first, so the same gradebook draws the same page
        ranked = sorted(missed.items(), key=lambda item: (-item[1], item[0]))[:MISSED_SHOWN]
        tallies.append(CatchTally(exercise, criterion, dict(title), len(counts), sum(c.caught for c in counts),
                                  sum(c.total for c in counts), sum(c.caught == c.total for c in counts), ranked))
    return tallies
