"""The class gradebook: an embedded SQLite database, one row per submission × criterion.

Rows are keyed by the submission's name, the hash of the files the grader reads, and the grader key
(grader version and a digest of course.toml), so a changed submission or a changed course is regraded
and an unchanged one is not. Each submission's rows are written in one transaction: a batch killed at
any moment leaves whole submissions or none.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import sqlite3
from dataclasses import dataclass
from pathlib import Path

import grader
from grader.course import COURSE_FILE, Course
from grader.nolinks import LINK, REGULAR, read_without_links
from grader.render.safe_text import csv_cell

SCHEMA = """
CREATE TABLE IF NOT EXISTS submissions (
    submission TEXT NOT NULL, content_hash TEXT NOT NULL, grader_key TEXT NOT NULL,
    score REAL NOT NULL, max_score REAL NOT NULL, percent REAL NOT NULL, status TEXT NOT NULL,
    message TEXT NOT NULL, report_dir TEXT, graded_at TEXT NOT NULL, sandbox TEXT,
    PRIMARY KEY (submission, grader_key)
);
CREATE TABLE IF NOT EXISTS results (
    submission TEXT NOT NULL, content_hash TEXT NOT NULL, grader_key TEXT NOT NULL,
    exercise TEXT NOT NULL, criterion TEXT NOT NULL, kind TEXT NOT NULL, status TEXT NOT NULL,
    points REAL NOT NULL, max_points REAL NOT NULL, message TEXT NOT NULL,
    PRIMARY KEY (submission, grader_key, exercise, criterion)
);
"""


# A submission's status when the grader, not the submission, failed: no verdict, graded again next run.
GRADER_ERROR = "grader_error"
# A submission whose grading killed the Dask worker running it, twice: final (never retried forever) until it
# changes or --regrade asks again.
KILLED_WORKERS = "killed_workers"


def grader_key(course: Course) -> str:
    digest = hashlib.sha256((course.root / COURSE_FILE).read_bytes()).hexdigest()[:10]
    return f"{grader.__version__}+{digest}"


def content_hash(course: Course, submission: Path) -> str:
    """A hash of exactly what the grader reads: each exercise's contract file, or what stands in its place (a
    link is hashed as a link, never as its target's content)."""
    h = hashlib.sha256()
    for ex in course.exercises:
        h.update(f"{ex.id}/{ex.file}\0".encode())
        try:
            found = read_without_links(submission, (ex.id, ex.file), 2 << 20)
        except OSError:
            h.update(b"<unreadable>")
            continue
        if found.kind == REGULAR:
            h.update(found.data)
        else:
            h.update(f"<link {found.link}>".encode() if found.kind == LINK else b"<absent>")
    return h.hexdigest()[:20]


def said(stored: str) -> dict[str, str]:
    """A stored message in each language (a gradebook written before messages were bilingual holds English)."""
    try:
        value = json.loads(stored)
    except ValueError:
        value = None
    return value if isinstance(value, dict) and {"en", "zh"} <= set(value) else {"en": stored, "zh": stored}


class Gradebook:
    def __init__(self, path: Path):
        path.parent.mkdir(parents=True, exist_ok=True)
        self.db = sqlite3.connect(path, isolation_level=None)  # explicit transactions below
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.executescript(SCHEMA)
        columns = {row[1] for row in self.db.execute("PRAGMA table_info(submissions)")}
        if "sandbox" not in columns:   # a gradebook written before workers stated their sandbox level
            self.db.execute("ALTER TABLE submissions ADD COLUMN sandbox TEXT")

    def close(self) -> None:
        self.db.close()

    def is_graded(self, submission: str, chash: str, key: str) -> bool:
        """Stored for this content and grader, by a grading that reached a verdict: a grader-side failure is kept
        for the instructor to see but graded again by the next run."""
        row = self.db.execute("SELECT 1 FROM submissions WHERE submission=? AND content_hash=? AND grader_key=? "
                              "AND status != ?", (submission, chash, key, GRADER_ERROR)).fetchone()
        return row is not None

    def store(self, submission: str, chash: str, key: str, summary: dict, rows: list[dict]) -> None:
        """Replace a submission's rows in one transaction."""
        with self._transaction():
            self.db.execute("DELETE FROM results WHERE submission=? AND grader_key=?", (submission, key))
            self.db.execute("INSERT OR REPLACE INTO submissions (submission, content_hash, grader_key, score, max_score, "
                            "percent, status, message, report_dir, graded_at, sandbox) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                            (submission, chash, key, summary["score"], summary["max_score"], summary["percent"],
                             summary["status"], json.dumps(summary["message"], ensure_ascii=False),
                             summary.get("report_dir"), summary["graded_at"],
                             summary.get("sandbox")))
            self.db.executemany("INSERT INTO results VALUES (?,?,?,?,?,?,?,?,?,?)",
                                [(submission, chash, key, r["exercise"], r["criterion"], r["kind"], r["status"],
                                  r["points"], r["max_points"], json.dumps(r["message"], ensure_ascii=False))
                                 for r in rows])

    def _transaction(self):
        db = self.db

        class Tx:
            def __enter__(self):
                db.execute("BEGIN IMMEDIATE")

            def __exit__(self, exc_type, *_):
                db.execute("ROLLBACK" if exc_type else "COMMIT")

        return Tx()

    def submissions(self, key: str) -> list[sqlite3.Row]:
        self.db.row_factory = sqlite3.Row
        return self.db.execute("SELECT * FROM submissions WHERE grader_key=? ORDER BY submission", (key,)).fetchall()

    def results(self, key: str) -> list[sqlite3.Row]:
        self.db.row_factory = sqlite3.Row
        return self.db.execute("SELECT * FROM results WHERE grader_key=? ORDER BY submission, rowid", (key,)).fetchall()


def grades_csv(course: Course, book: Gradebook, key: str) -> str:
    """One line per submission: total, status, each exercise's score."""
    per_exercise: dict[tuple[str, str], float] = {}
    for r in book.results(key):
        per_exercise[(r["submission"], r["exercise"])] = per_exercise.get((r["submission"], r["exercise"]), 0.0) + r["points"]
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["submission", "score", "max_score", "percent", "status", *[e.id for e in course.exercises],
                     "content_hash"])
    for s in book.submissions(key):
        writer.writerow([csv_cell(s["submission"]), f"{s['score']:g}", f"{s['max_score']:g}", f"{s['percent']:g}", s["status"],
                         *[f"{per_exercise.get((s['submission'], e.id), 0.0):g}" for e in course.exercises],
                         s["content_hash"]])
    return out.getvalue()


@dataclass
class CriterionRate:
    exercise: str
    criterion: str
    passed: int
    total: int

    @property
    def rate(self) -> float:
        return self.passed / self.total if self.total else 0.0


@dataclass
class ClassSummary:
    """What the class report draws: how many passed each criterion, and how the totals spread."""

    submissions: int
    mean_percent: float
    median_percent: float
    histogram: list[int]          # counts of totals in [0,10), [10,20), ..., [90,100]
    rates: list[CriterionRate]


def class_summary(course: Course, book: Gradebook, key: str) -> ClassSummary:
    """Over the submissions graded: one the grader failed on has no verdict to count."""
    subs = [s for s in book.submissions(key) if s["status"] != GRADER_ERROR]
    counted = {s["submission"] for s in subs}
    percents = sorted(s["percent"] for s in subs)
    histogram = [0] * 10
    for p in percents:
        histogram[min(9, int(p // 10))] += 1
    counts: dict[tuple[str, str], list[int]] = {}
    for r in book.results(key):
        if r["submission"] not in counted:
            continue
        c = counts.setdefault((r["exercise"], r["criterion"]), [0, 0])
        c[0] += r["status"] == "passed"
        c[1] += 1
    order = [(ex.id, cid) for ex in course.exercises for cid in ex.points]
    rates = [CriterionRate(e, c, *counts[(e, c)]) for e, c in order if (e, c) in counts]
    n = len(percents)
    median = (percents[n // 2] if n % 2 else (percents[n // 2 - 1] + percents[n // 2]) / 2) if n else 0.0
    return ClassSummary(n, round(sum(percents) / n, 2) if n else 0.0, round(median, 2), histogram, rates)
