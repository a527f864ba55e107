"""The gradebook's SQLite schema, versioned: `PRAGMA user_version` says which of `MIGRATIONS` a gradebook has had.

Opening a gradebook brings it to `SCHEMA_VERSION` in one transaction (every step and the new version, or nothing:
a step that fails leaves the file as it was), and refuses one that a newer grader wrote, file untouched. A gradebook
written before the schema carried its version (user_version 0) is recognised by its tables.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from pathlib import Path

# A step from one version to the next: an SQL script (statements ended by ';', run in order), or a function of the
# connection for what SQL alone cannot say (rewriting values, say). It runs inside the transaction: it neither
# commits nor begins one.
Step = str | Callable[[sqlite3.Connection], None]

# MIGRATIONS[n] brings a gradebook at version n to version n + 1; version 0 is an empty file. To change the schema,
# append one step here, and nothing else: SCHEMA_VERSION follows, every gradebook is brought up to it when opened,
# and tests/test_gradebook_schema.py builds each earlier version and opens it. Never edit a step once released:
# gradebooks at every version exist.
MIGRATIONS: Sequence[Step] = (
    # 1: one row per submission and one per criterion (the first batch gradebook).
    """
    CREATE TABLE IF NOT EXISTS submissions (
        submission TEXT NOT NULL, content_hash TEXT NOT NULL, grader_key TEXT NOT NULL,
        score REAL NOT NULL, max_score REAL NOT NULL, percent REAL NOT NULL, status TEXT NOT NULL,
        message TEXT NOT NULL, report_dir TEXT, graded_at TEXT NOT NULL,
        PRIMARY KEY (submission, grader_key)
    );
    CREATE TABLE IF NOT EXISTS results (
        submission TEXT NOT NULL, content_hash TEXT NOT NULL, grader_key TEXT NOT NULL,
        exercise TEXT NOT NULL, criterion TEXT NOT NULL, kind TEXT NOT NULL, status TEXT NOT NULL,
        points REAL NOT NULL, max_points REAL NOT NULL, message TEXT NOT NULL,
        PRIMARY KEY (submission, grader_key, exercise, criterion)
    );
    """,
    # 2: the sandbox level each submission was graded with (workers elsewhere state their own).
    "ALTER TABLE submissions ADD COLUMN sandbox TEXT;",
    # 3: what instructors add to the grading.
    """
    -- The instructor's corrections, applied after grading (grader.batch.grades): no grader key, so that they outlive
    -- every regrade and re-judging. exercise '' corrects the whole grade, criterion '' the whole exercise.
    CREATE TABLE IF NOT EXISTS overrides (
        student TEXT NOT NULL, exercise TEXT NOT NULL, criterion TEXT NOT NULL, points REAL NOT NULL,
        comment TEXT NOT NULL, author TEXT NOT NULL, at TEXT NOT NULL,
        PRIMARY KEY (student, exercise, criterion)
    );
    -- When each submission was handed in, and how that is known (grader.policy's FROM_* words).
    CREATE TABLE IF NOT EXISTS submitted (
        submission TEXT PRIMARY KEY, at TEXT NOT NULL, how TEXT NOT NULL
    );
    -- The exercise files each submission was graded on, for comparing submissions with one another.
    CREATE TABLE IF NOT EXISTS sources (
        submission TEXT NOT NULL, exercise TEXT NOT NULL, content_hash TEXT NOT NULL, code TEXT NOT NULL,
        PRIMARY KEY (submission, exercise)
    );
    -- Pairs of near-identical exercise files (grader.review.similarity): replaced whole by every comparison.
    CREATE TABLE IF NOT EXISTS similar (
        exercise TEXT NOT NULL, first TEXT NOT NULL, second TEXT NOT NULL, similarity REAL NOT NULL,
        first_share REAL NOT NULL, second_share REAL NOT NULL, first_html TEXT NOT NULL, second_html TEXT NOT NULL,
        PRIMARY KEY (exercise, first, second)
    );
    -- What the last `grader batch` wrote its class files with (roster, language...), so that a command changing one
    -- grade writes them again the same way; and what was last sent to a learning management system.
    CREATE TABLE IF NOT EXISTS settings (key TEXT PRIMARY KEY, value TEXT NOT NULL);
    CREATE TABLE IF NOT EXISTS sent (
        target TEXT NOT NULL, submission TEXT NOT NULL, digest TEXT NOT NULL, at TEXT NOT NULL,
        PRIMARY KEY (target, submission)
    );
    """,
    # 4: what each grading's probes observed (grader.grading.rejudge's record; the files are in the observation
    # store): what a re-judging judges again without running the submission.
    """
    CREATE TABLE IF NOT EXISTS observed (
        submission TEXT NOT NULL, content_hash TEXT NOT NULL, grader_key TEXT NOT NULL, record TEXT NOT NULL,
        PRIMARY KEY (submission, grader_key)
    );
    """,
    # 5: written answers graded by hand (grader.batch.manual, `grader review`): keyed by student, no grader key, so
    # that they outlive every regrade and re-judging, as overrides do.
    """
    -- Each question's rubric: seeded from course.toml's items ("1".."N") on first use, then edited here; an item
    -- removed stays (reviews name it) and counts for nothing.
    CREATE TABLE IF NOT EXISTS rubric (
        exercise TEXT NOT NULL, question TEXT NOT NULL, item TEXT NOT NULL, position INTEGER NOT NULL,
        points REAL NOT NULL, text_en TEXT NOT NULL, text_zh TEXT NOT NULL, removed INTEGER NOT NULL DEFAULT 0,
        PRIMARY KEY (exercise, question, item)
    );
    -- A reviewer's grade of one answer: the rubric items applied (a JSON list of ids), a point adjustment and a
    -- comment; `version` counts its saves, so that a save made on an older one is refused, never lost.
    CREATE TABLE IF NOT EXISTS reviews (
        student TEXT NOT NULL, exercise TEXT NOT NULL, question TEXT NOT NULL, items TEXT NOT NULL,
        adjustment REAL NOT NULL, comment TEXT NOT NULL, author TEXT NOT NULL, at TEXT NOT NULL,
        version INTEGER NOT NULL, answer_digest TEXT NOT NULL,
        PRIMARY KEY (student, exercise, question)
    );
    -- Every change to the two, with who and when, and what it was before and after (detail, JSON).
    CREATE TABLE IF NOT EXISTS review_log (
        seq INTEGER PRIMARY KEY AUTOINCREMENT, at TEXT NOT NULL, author TEXT NOT NULL, action TEXT NOT NULL,
        student TEXT NOT NULL, exercise TEXT NOT NULL, question TEXT NOT NULL, detail TEXT NOT NULL
    );
    """,
)
SCHEMA_VERSION = len(MIGRATIONS)


class SchemaRefused(Exception):
    """A gradebook this grader must not write: written by a newer grader, or not a gradebook. One sentence."""


def open_schema(db: sqlite3.Connection, path: Path) -> None:
    """Bring the gradebook `db` (opened from `path`, in autocommit mode) to SCHEMA_VERSION, or refuse it."""
    if _stated(db) == SCHEMA_VERSION:   # brought up to date already: the common case
        return
    _version(db, path)   # a refusal takes no lock and writes nothing
    db.execute("BEGIN IMMEDIATE")
    try:
        found = _version(db, path)   # again, under the lock: another process may have brought it up meanwhile
        for step in MIGRATIONS[found:]:
            if isinstance(step, str):
                for statement in _statements(step):
                    db.execute(statement)
            else:
                step(db)
        db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
    except BaseException:
        if db.in_transaction:   # SQLite may have rolled back already (a full disk): the first error is the one to say
            db.execute("ROLLBACK")
        raise
    db.execute("COMMIT")


def _version(db: sqlite3.Connection, path: Path) -> int:
    """The gradebook's schema version; SchemaRefused when it is not one this grader can bring up to date."""
    stated = _stated(db)
    if stated > SCHEMA_VERSION:
        raise SchemaRefused(f"{path} was written by a newer grader (schema {stated}; this one reads up to "
                            f"{SCHEMA_VERSION}): use that grader or move it aside")
    found = stated or _unversioned(db)
    if found < 0:
        raise SchemaRefused(f"{path} is not a gradebook (schema {stated}, tables "
                            f"{', '.join(_tables(db))}): move it aside")
    return found


def _stated(db: sqlite3.Connection) -> int:
    return db.execute("PRAGMA user_version").fetchone()[0]


def _unversioned(db: sqlite3.Connection) -> int:
    """The version of a gradebook written before gradebooks carried one, told by its tables (each version added
    what it checks); -1 when the file holds tables and is no gradebook. Fixed: every later gradebook states its
    version."""
    tables = set(_tables(db))
    if not tables:
        return 0
    if "submissions" not in tables:
        return -1
    if "observed" in tables:
        return 4
    if "overrides" in tables:
        return 3
    columns = {row[1] for row in db.execute("PRAGMA table_info(submissions)")}
    return 2 if "sandbox" in columns else 1


def _tables(db: sqlite3.Connection) -> list[str]:
    return [name for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table' "
                                           "AND name NOT LIKE 'sqlite_%' ORDER BY name")]


def _statements(script: str) -> list[str]:
    """A script's statements, one by one: executescript would commit the transaction the steps run in."""
    statements, pending = [], ""
    for line in script.splitlines(keepends=True):
        pending += line
        if sqlite3.complete_statement(pending):
            statements.append(pending.strip())
            pending = ""
    leftover = [line for line in pending.splitlines() if line.strip() and not line.strip().startswith("--")]
    if leftover:
        raise ValueError(f"a migration ends with an unfinished statement: {pending.strip()!r}")
    return statements
