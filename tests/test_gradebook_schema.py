"""The gradebook's schema version: a gradebook an earlier grader wrote opens, brought up to date with its rows kept;
one a newer grader wrote is refused in a sentence, the file untouched; a migration that fails changes nothing."""

import hashlib
import sqlite3
from pathlib import Path

import pytest

from conftest import course_copy
from grader.batch import schema
from grader.batch.gradebook import Gradebook, content_hash, grader_key
from grader.batch.schema import SCHEMA_VERSION, SchemaRefused

# The gradebooks earlier graders wrote, each as its commit created it (git log -p -- grader/batch/gradebook.py),
# written out here rather than taken from grader.batch.schema: they are what exists on instructors' disks.
SUBMISSIONS_BEFORE_SANDBOX = """
CREATE TABLE IF NOT EXISTS submissions (
    submission TEXT NOT NULL, content_hash TEXT NOT NULL, grader_key TEXT NOT NULL,
    score REAL NOT NULL, max_score REAL NOT NULL, percent REAL NOT NULL, status TEXT NOT NULL,
    message TEXT NOT NULL, report_dir TEXT, graded_at TEXT NOT NULL,
    PRIMARY KEY (submission, grader_key)
);"""
SUBMISSIONS_WITH_SANDBOX = SUBMISSIONS_BEFORE_SANDBOX.replace("graded_at TEXT NOT NULL,",
                                                              "graded_at TEXT NOT NULL, sandbox TEXT,")
RESULTS = """
CREATE TABLE IF NOT EXISTS results (
    submission TEXT NOT NULL, content_hash TEXT NOT NULL, grader_key TEXT NOT NULL,
    exercise TEXT NOT NULL, criterion TEXT NOT NULL, kind TEXT NOT NULL, status TEXT NOT NULL,
    points REAL NOT NULL, max_points REAL NOT NULL, message TEXT NOT NULL,
    PRIMARY KEY (submission, grader_key, exercise, criterion)
);"""
INSTRUCTORS_TABLES = """
CREATE TABLE IF NOT EXISTS overrides (
    student TEXT NOT NULL, exercise TEXT NOT NULL, criterion TEXT NOT NULL, points REAL NOT NULL,
    comment TEXT NOT NULL, author TEXT NOT NULL, at TEXT NOT NULL,
    PRIMARY KEY (student, exercise, criterion)
);
CREATE TABLE IF NOT EXISTS submitted (submission TEXT PRIMARY KEY, at TEXT NOT NULL, how TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS sources (
    submission TEXT NOT NULL, exercise TEXT NOT NULL, content_hash TEXT NOT NULL, code TEXT NOT NULL,
    PRIMARY KEY (submission, exercise)
);
CREATE TABLE IF NOT EXISTS similar (
    exercise TEXT NOT NULL, first TEXT NOT NULL, second TEXT NOT NULL, similarity REAL NOT NULL,
    first_share REAL NOT NULL, second_share REAL NOT NULL, first_html TEXT NOT NULL, second_html TEXT NOT NULL,
    PRIMARY KEY (exercise, first, second)
);
CREATE TABLE IF NOT EXISTS settings (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS sent (
    target TEXT NOT NULL, submission TEXT NOT NULL, digest TEXT NOT NULL, at TEXT NOT NULL,
    PRIMARY KEY (target, submission)
);"""
OBSERVED = """
CREATE TABLE IF NOT EXISTS observed (
    submission TEXT NOT NULL, content_hash TEXT NOT NULL, grader_key TEXT NOT NULL, record TEXT NOT NULL,
    PRIMARY KEY (submission, grader_key)
);"""
# 5: written answers graded by hand (grader.batch.manual), added to a gradebook that states version 4.
REVIEWS = """
CREATE TABLE IF NOT EXISTS rubric (
    exercise TEXT NOT NULL, question TEXT NOT NULL, item TEXT NOT NULL, position INTEGER NOT NULL,
    points REAL NOT NULL, text_en TEXT NOT NULL, text_zh TEXT NOT NULL, removed INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (exercise, question, item)
);
CREATE TABLE IF NOT EXISTS reviews (
    student TEXT NOT NULL, exercise TEXT NOT NULL, question TEXT NOT NULL, items TEXT NOT NULL,
    adjustment REAL NOT NULL, comment TEXT NOT NULL, author TEXT NOT NULL, at TEXT NOT NULL,
    version INTEGER NOT NULL, answer_digest TEXT NOT NULL,
    PRIMARY KEY (student, exercise, question)
);
CREATE TABLE IF NOT EXISTS review_log (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, at TEXT NOT NULL, author TEXT NOT NULL, action TEXT NOT NULL,
    student TEXT NOT NULL, exercise TEXT NOT NULL, question TEXT NOT NULL, detail TEXT NOT NULL
);"""
EARLIER = {   # each version before gradebooks stated theirs, and the commit that first wrote it
    "before-sandbox": SUBMISSIONS_BEFORE_SANDBOX + RESULTS,                                       # 80e2538
    "sandbox": SUBMISSIONS_WITH_SANDBOX + RESULTS,                                                # 012626b
    "overrides": SUBMISSIONS_WITH_SANDBOX + RESULTS + INSTRUCTORS_TABLES,                         # 0ee3d55
    "main-unversioned": SUBMISSIONS_WITH_SANDBOX + RESULTS + INSTRUCTORS_TABLES + OBSERVED,       # 10ae2af
}
KEY, CHASH = "0.1.0+abcdef0123", "0123456789abcdef0123"


def earlier_gradebook(path, statements: str, key: str = KEY, chash: str = CHASH, rows: int = 3):
    """A gradebook as an earlier grader left it: its tables, `rows` graded submissions with two criteria each, and
    (where the version has them) an override and a record of observations. WAL, as every grader has written it."""
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.executescript(statements)
    for i in range(rows):
        name = f"student{i}"
        db.execute("INSERT INTO submissions (submission, content_hash, grader_key, score, max_score, percent, status, "
                   "message, report_dir, graded_at) VALUES (?,?,?,?,?,?,?,?,?,?)",
                   (name, chash, key, 1.0 + i, 2.0, 50.0 * (1 + i) / 2, "graded", "graded", None,
                    "2026-12-01T10:00:00"))
        db.executemany("INSERT INTO results VALUES (?,?,?,?,?,?,?,?,?,?)",
                       [(name, chash, key, "heads", criterion, "hidden", "passed", 1.0, 1.0, "ok")
                        for criterion in ("shape", "values")])
    tables = {name for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    if "overrides" in tables:
        db.execute("INSERT INTO overrides VALUES ('student0', 'heads', '', 2, 'regraded by hand', 'ta', 'now')")
    if "observed" in tables:
        db.execute("INSERT INTO observed VALUES ('student0', ?, ?, '{}')", (chash, key))
    db.close()


def layout(path) -> dict[str, list[tuple]]:
    """Every table's columns (name, type, not null, key): what a gradebook's reader relies on."""
    db = sqlite3.connect(path)
    try:
        tables = [name for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type='table' ORDER BY name")]
        return {t: [(c[1], c[2], c[3], c[5]) for c in db.execute(f"PRAGMA table_info({t})")] for t in tables}
    finally:
        db.close()


def user_version(path) -> int:
    db = sqlite3.connect(path)
    try:
        return db.execute("PRAGMA user_version").fetchone()[0]
    finally:
        db.close()


def digest(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_new_gradebook_states_the_newest_version_and_has_mains_tables(tmp_path):
    Gradebook(tmp_path / "gradebook.sqlite").close()
    assert SCHEMA_VERSION == len(schema.MIGRATIONS) >= 5
    assert user_version(tmp_path / "gradebook.sqlite") == SCHEMA_VERSION
    earlier_gradebook(tmp_path / "main.sqlite", EARLIER["main-unversioned"] + REVIEWS, rows=0)
    assert layout(tmp_path / "gradebook.sqlite") == layout(tmp_path / "main.sqlite")


def test_a_gradebook_at_version_4_gains_the_review_tables_with_its_rows_kept(tmp_path):
    old = tmp_path / "gradebook.sqlite"
    earlier_gradebook(old, EARLIER["main-unversioned"])
    db = sqlite3.connect(old)
    db.execute("PRAGMA user_version = 4")   # as the grader that first stated versions wrote it
    db.close()
    assert "reviews" not in layout(old)
    book = Gradebook(old)
    try:
        assert [r["score"] for r in book.submissions(KEY)] == [1.0, 2.0, 3.0]
        assert [(o.student, o.points) for o in book.overrides()] == [("student0", 2)]
        assert book.observed("student0", CHASH) == {}
        assert book.db.execute("SELECT COUNT(*) FROM reviews").fetchone()[0] == 0
    finally:
        book.close()
    assert user_version(old) == SCHEMA_VERSION == 5
    Gradebook(tmp_path / "new.sqlite").close()
    assert layout(old) == layout(tmp_path / "new.sqlite")


@pytest.mark.parametrize("earlier", EARLIER)
def test_an_earlier_gradebook_is_brought_up_to_date_with_its_rows(earlier, tmp_path):
    old = tmp_path / "old" / "gradebook.sqlite"
    old.parent.mkdir()
    earlier_gradebook(old, EARLIER[earlier])
    assert user_version(old) == 0
    book = Gradebook(old)
    try:
        kept = book.submissions(KEY)
        assert [r["submission"] for r in kept] == ["student0", "student1", "student2"]
        assert [r["score"] for r in kept] == [1.0, 2.0, 3.0] and all(r["sandbox"] is None for r in kept)
        assert len(book.results(KEY)) == 6
        assert book.is_graded("student1", CHASH, KEY)
        if "overrides" in EARLIER[earlier]:
            assert [(o.student, o.points) for o in book.overrides()] == [("student0", 2)]
        if "observed" in EARLIER[earlier]:
            assert book.observed("student0", CHASH) == {}
        # and the columns added since are written like any other
        book.store("student3", CHASH, KEY, {"score": 2.0, "max_score": 2.0, "percent": 100.0, "status": "graded",
                                            "message": {"en": "ok", "zh": "ok"}, "graded_at": "now",
                                            "sandbox": "strict"}, [], kept={"x": 1})
        assert book.submissions(KEY)[-1]["sandbox"] == "strict" and book.observed("student3", CHASH) == {"x": 1}
    finally:
        book.close()
    assert user_version(old) == SCHEMA_VERSION
    Gradebook(tmp_path / "new.sqlite").close()
    assert layout(old) == layout(tmp_path / "new.sqlite")   # the same tables and columns as a gradebook made today


def test_a_gradebook_of_a_newer_grader_is_refused_and_left_as_it_was(tmp_path):
    path = tmp_path / "reports" / "x" / "gradebook.sqlite"
    path.parent.mkdir(parents=True)
    Gradebook(path).close()   # positive control: at this grader's own version it opens
    Gradebook(path).close()
    db = sqlite3.connect(path)
    db.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 2}")
    db.close()
    before = digest(path)
    with pytest.raises(SchemaRefused) as refused:
        Gradebook(path)
    assert str(refused.value) == (f"{path} was written by a newer grader (schema {SCHEMA_VERSION + 2}; this one "
                                  f"reads up to {SCHEMA_VERSION}): use that grader or move it aside")
    assert digest(path) == before and sorted(p.name for p in path.parent.iterdir()) == ["gradebook.sqlite"]


def test_a_command_on_a_newer_gradebook_ends_in_that_sentence_and_status_2(tmp_path, capsys):
    from grader.cli import EXIT_OK, EXIT_USAGE, main

    course = course_copy(tmp_path / "course", ["heads"])
    old, newer = tmp_path / "old", tmp_path / "newer"
    for out in (old, newer):
        out.mkdir()
        earlier_gradebook(out / "gradebook.sqlite", EARLIER["before-sandbox"])
    # positive control: the same command on an earlier gradebook brings it up to date and lists
    assert main(["--course", str(course), "override", "--list", str(old)]) == EXIT_OK
    assert user_version(old / "gradebook.sqlite") == SCHEMA_VERSION
    db = sqlite3.connect(newer / "gradebook.sqlite")
    db.execute("PRAGMA user_version = 7")
    db.close()
    before = digest(newer / "gradebook.sqlite")
    capsys.readouterr()
    assert main(["--course", str(course), "override", "--list", str(newer)]) == EXIT_USAGE
    said = capsys.readouterr().err.strip()
    assert said == (f"grader: {newer / 'gradebook.sqlite'} was written by a newer grader (schema 7; this one reads "
                    f"up to {SCHEMA_VERSION}): use that grader or move it aside")
    assert digest(newer / "gradebook.sqlite") == before


def test_a_database_that_is_no_gradebook_is_refused_untouched(tmp_path):
    path = tmp_path / "gradebook.sqlite"
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE photos (name TEXT)")
    db.execute("INSERT INTO photos VALUES ('cat')")
    db.commit()
    db.close()
    before = digest(path)
    with pytest.raises(SchemaRefused, match=r"is not a gradebook \(schema 0, tables photos\): move it aside"):
        Gradebook(path)
    assert digest(path) == before


def failing_function(db):
    db.execute("CREATE TABLE halfway (x TEXT)")
    raise RuntimeError("a migration's bug")


FAILING_SQL = "CREATE TABLE halfway (x TEXT);\nINSERT INTO nowhere VALUES (1);"


@pytest.mark.parametrize("failing", [failing_function, FAILING_SQL], ids=["function", "sql"])
def test_a_failed_migration_leaves_the_gradebook_as_it_was(failing, tmp_path, monkeypatch):
    path = tmp_path / "gradebook.sqlite"
    earlier_gradebook(path, EARLIER["before-sandbox"])
    before, columns = digest(path), layout(path)
    monkeypatch.setattr(schema, "MIGRATIONS", (*schema.MIGRATIONS, failing))
    monkeypatch.setattr(schema, "SCHEMA_VERSION", SCHEMA_VERSION + 1)
    with pytest.raises((RuntimeError, sqlite3.OperationalError)):
        Gradebook(path)
    # every step before the failing one ran (the sandbox column, the later tables) and none of them stayed
    assert digest(path) == before and layout(path) == columns and user_version(path) == 0
    monkeypatch.undo()
    Gradebook(path).close()   # positive control: without the failing step, the same file is brought up to date
    assert user_version(path) == SCHEMA_VERSION and "observed" in layout(path)


def test_a_migration_step_with_an_unfinished_statement_is_refused():
    assert schema._statements("-- why\nCREATE TABLE a (x);\n-- trailing remark\n") == ["-- why\nCREATE TABLE a (x);"]
    with pytest.raises(ValueError, match="unfinished statement"):
        schema._statements("CREATE TABLE a (x);\nCREATE TABLE b (y)\n")


def test_a_batch_resumes_an_earlier_gradebook_without_regrading_it(tmp_path, monkeypatch):
    from grader.course import load_course
    from test_batch import batch_in_process, fake_grade

    course_dir = course_copy(tmp_path / "course", ["decoder_block", "heads"])
    course = load_course(course_dir)
    for name in ("ann", "bob", "cy"):
        (tmp_path / "class" / name / "heads").mkdir(parents=True)
        (tmp_path / "class" / name / "heads" / "heads.py").write_text(f"# {name}'s\n")
    out = tmp_path / "out"
    out.mkdir()
    earlier_gradebook(out / "gradebook.sqlite", EARLIER["before-sandbox"], rows=0)
    db = sqlite3.connect(out / "gradebook.sqlite")   # ann and bob graded by that earlier grader; bob changed since
    db.executemany("INSERT INTO submissions (submission, content_hash, grader_key, score, max_score, percent, status, "
                   "message, report_dir, graded_at) VALUES (?,?,?,0,1,0,'graded','graded',NULL,'then')",
                   [("ann", content_hash(course, tmp_path / "class" / "ann"), grader_key(course)),
                    ("bob", "an earlier bob", grader_key(course))])
    db.commit()
    db.close()
    calls = fake_grade(["failed", "failed"], monkeypatch)
    outcome = batch_in_process(course_dir, tmp_path / "class", out)
    assert sorted(Path(c).name for c in calls) == ["bob", "cy"]
    assert outcome["graded"] == 2 and outcome["skipped"] == 1
    assert user_version(out / "gradebook.sqlite") == SCHEMA_VERSION
    db = sqlite3.connect(out / "gradebook.sqlite")
    graded = dict(db.execute("SELECT submission, graded_at FROM submissions").fetchall())
    db.close()
    assert graded["ann"] == "then" and graded["bob"] != "then" and set(graded) == {"ann", "bob", "cy"}


def test_two_commands_opening_an_earlier_gradebook_at_once_bring_it_up_once(tmp_path):
    import threading
    import time

    path = tmp_path / "gradebook.sqlite"
    earlier_gradebook(path, EARLIER["before-sandbox"])
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")   # both find version 0, then wait for the write lock
    failures: list[BaseException] = []

    def open_it():
        try:
            Gradebook(path).close()
        except BaseException as exc:
            failures.append(exc)

    threads = [threading.Thread(target=open_it) for _ in range(2)]
    for thread in threads:
        thread.start()
    time.sleep(0.5)
    holder.execute("ROLLBACK")
    holder.close()
    for thread in threads:
        thread.join()
    assert failures == [] and user_version(path) == SCHEMA_VERSION
    assert [c[0] for c in layout(path)["submissions"]].count("sandbox") == 1
