"""Faults no submission caused end `grader batch` in one line and an exit status of their own, and lose nothing: a full
disk (a small tmpfs), a read-only --out, a gradebook another process holds or that is damaged, SIGINT, SIGTERM and
SIGHUP. A dead report process or judging server costs only what it held, done again. And a real batch of 8,
interrupted at random points (signals, SIGKILL of it and of each helper process) and resumed each time, ends with an
uninterrupted run's grades.csv (bench/fault_soak.py, whose longer soak the README's figure comes from).

The machine's faults are injected under a stand-in for the warm grading process (no student code runs): what is
tested is what the batch does around a grading."""

from __future__ import annotations

import contextlib
import csv
import fcntl
import io
import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import ROOT, course_copy
from grader.exits import EXIT_BUSY, EXIT_CORRUPT, EXIT_DISK_FULL, EXIT_NOT_WRITABLE, EXIT_OK

EXERCISES = ["heads"]
STUDENTS = [f"s{i}" for i in range(6)]
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="mounting a file system needs root (CI runs as root)")


@pytest.fixture(scope="module")
def course_dir(tmp_path_factory):
    return course_copy(tmp_path_factory.mktemp("course"), EXERCISES)


def make_class(folder: Path, names: list[str]) -> Path:
    for name in names:
        (folder / name / "heads").mkdir(parents=True, exist_ok=True)
        (folder / name / "heads" / "heads.py").write_text(f"# {name}\n")
    return folder


def report_of(name: str) -> dict:
    """A report whose points follow from the name: each submission's grade is its own, and the same every time."""
    from grader.judge.session import criteria_of

    criteria = [{"id": m.id, "kind": m.kind, "status": "passed" if (sum(map(ord, name)) + k) % 3 else "failed",
                 "points": 1.0 if (sum(map(ord, name)) + k) % 3 else 0.0, "max_points": 1.0,
                 "message": {"en": "said", "zh": "said"}} for k, m in enumerate(criteria_of("heads"))]
    score = sum(c["points"] for c in criteria)
    return {"score": score, "max_score": float(len(criteria)), "percent": round(100 * score / len(criteria), 2),
            "sandbox": {"level": "strict"},
            "exercises": [{"id": "heads", "status": "passed", "message": {"en": "", "zh": ""}, "criteria": criteria}]}


class Grading:
    """A stand-in for the warm grading process: each grading calls `before(call number)` first (where a test injects
    its fault), then answers the submission's report; the names it graded, in `graded`."""

    def __init__(self, monkeypatch, before=lambda n: None):
        from grader.batch import pool

        self.graded: list[str] = []
        self.before = before
        grading = self

        class WarmGrader:
            def __init__(self, course_root, sandbox, slots=1):
                pass

            def grade(self, submission, exercise_ids, lang, timeout_s, more=True, keep=None):
                grading.graded.append(submission.name)
                grading.before(len(grading.graded))
                return {"files": {"report.json": json.dumps(report_of(submission.name))}}

            def close(self):
                pass

            def abort(self):
                pass

        monkeypatch.setattr(pool, "WarmGrader", WarmGrader)
        monkeypatch.setattr("grader.sandbox.levels.strict_missing", lambda: "")


def batch(course_dir: Path, classroom: Path, out: Path, capsys) -> tuple[int, str]:
    """`grader batch` in this process: (exit status, what it wrote to stderr)."""
    from grader.cli import main

    code = main(["--course", str(course_dir), "batch", str(classroom), "--out", str(out), "--jobs", "1"])
    return code, capsys.readouterr().err


def said_once(err: str) -> str:
    """The line a fault ended the batch with: the last, alone of its kind, with no traceback before it."""
    assert "Traceback" not in err, err
    last = err.strip().splitlines()[-1]
    assert last.startswith("grader: ") and sum(line.startswith("grader: ") for line in err.splitlines()) == 1, err
    return last


def stored(out: Path) -> set[str]:
    db = sqlite3.connect(out / "gradebook.sqlite")
    try:
        return {name for (name,) in db.execute("SELECT submission FROM submissions WHERE status != 'grader_error'")}
    finally:
        db.close()


def once_one_is_stored(out: Path, seconds: float = 30.0) -> None:
    """Wait (in a grading) until the batch has stored a submission, and its count has moved on: the batch stores
    while the next submissions are graded, so on a busy machine grading can run ahead of storing, and a fault meant
    to fall after a stored submission would fall before any."""
    until = time.monotonic() + seconds
    while time.monotonic() < until:
        with contextlib.suppress(sqlite3.Error):
            if stored(out):
                time.sleep(0.5)
                return
        time.sleep(0.05)


@pytest.fixture(scope="module")
def uninterrupted(course_dir, tmp_path_factory):
    """grades.csv of the class graded without a fault."""
    from _pytest.monkeypatch import MonkeyPatch

    folder = tmp_path_factory.mktemp("uninterrupted")
    classroom = make_class(folder / "class", STUDENTS)
    with MonkeyPatch.context() as mp:
        Grading(mp)
        from grader.cli import main

        assert main(["--course", str(course_dir), "batch", str(classroom), "--out", str(folder / "out"),
                     "--jobs", "1"]) == EXIT_OK
    return (folder / "out" / "grades.csv").read_text()


def rows(text: str) -> list[dict]:
    return list(csv.DictReader(io.StringIO(text)))


def test_the_uninterrupted_grades_differ_by_student(uninterrupted):
    """The positive control of every comparison below: grades.csv tells the students apart."""
    percents = {r["submission"]: r["percent"] for r in rows(uninterrupted)}
    assert set(percents) == set(STUDENTS) and len(set(percents.values())) > 1


@contextlib.contextmanager
def tmpfs(where: Path, size: str):
    where.mkdir(parents=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(where)], check=True)
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def fill(disk: Path) -> Path:
    """Fill the file system holding `disk` to its last byte."""
    filler = disk / "filler"
    with open(filler, "wb", buffering=0) as fh:
        for size in (64 << 10, 1):
            with contextlib.suppress(OSError):
                while True:
                    fh.write(b"\0" * size)
    return filler


@needs_root
def test_a_full_disk_ends_in_a_line_and_the_resumed_batch_loses_nothing(course_dir, uninterrupted, tmp_path,
                                                                        monkeypatch, capsys):
    classroom = make_class(tmp_path / "class", STUDENTS)
    with tmpfs(tmp_path / "disk", "4m") as disk:
        out = disk / "out"
        filled: list[Path] = []
        grading = Grading(monkeypatch, lambda n: (once_one_is_stored(out), filled.append(fill(disk)))
                          if n == 4 and not filled else None)
        code, err = batch(course_dir, classroom, out, capsys)
        assert filled, f"the disk was not filled while the class was graded: {code} {err}"
        assert code == EXIT_DISK_FULL, err
        line = said_once(err)
        assert f"the disk holding {out} is full" in line and "free some space and run the same command" in line
        kept = stored(out)
        assert 1 <= len(kept) < len(STUDENTS)
        filled[0].unlink()
        grading.graded.clear()
        code, err = batch(course_dir, classroom, out, capsys)
        assert code == EXIT_OK, err
        assert set(grading.graded) == set(STUDENTS) - kept   # what was stored was kept, and not graded again
        assert (out / "grades.csv").read_text() == uninterrupted


@needs_root
def test_a_read_only_out_ends_in_a_line_and_loses_nothing(course_dir, uninterrupted, tmp_path, monkeypatch, capsys):
    classroom = make_class(tmp_path / "class", STUDENTS[:3])
    grading = Grading(monkeypatch)
    with tmpfs(tmp_path / "disk", "16m") as disk:
        out = disk / "out"
        assert batch(course_dir, classroom, out, capsys)[0] == EXIT_OK
        make_class(classroom, STUDENTS[3:])
        subprocess.run(["mount", "-o", "remount,ro", str(disk)], check=True)
        try:
            code, err = batch(course_dir, classroom, out, capsys)
        finally:
            subprocess.run(["mount", "-o", "remount,rw", str(disk)], check=True)
        assert code == EXIT_NOT_WRITABLE, err
        line = said_once(err)
        assert "cannot be written (Read-only file system" in line and "run the same command" in line
        assert stored(out) == set(STUDENTS[:3])
        grading.graded.clear()
        assert batch(course_dir, classroom, out, capsys)[0] == EXIT_OK
        assert sorted(grading.graded) == STUDENTS[3:]
        assert (out / "grades.csv").read_text() == uninterrupted
        code, err = batch(course_dir, classroom, disk / "elsewhere", capsys)   # a fresh --out on a read-only disk
        assert code == EXIT_OK, err   # the positive control: writable, it is graded
        subprocess.run(["mount", "-o", "remount,ro", str(disk)], check=True)
        try:
            code, err = batch(course_dir, classroom, disk / "new", capsys)
        finally:
            subprocess.run(["mount", "-o", "remount,rw", str(disk)], check=True)
        assert code == EXIT_NOT_WRITABLE and "Read-only file system" in said_once(err)


def test_a_gradebook_held_by_another_process_ends_in_a_line(course_dir, uninterrupted, tmp_path, monkeypatch,
                                                           capsys):
    classroom = make_class(tmp_path / "class", STUDENTS[:3])
    out = tmp_path / "out"
    grading = Grading(monkeypatch)
    assert batch(course_dir, classroom, out, capsys)[0] == EXIT_OK
    make_class(classroom, STUDENTS[3:])
    holder = sqlite3.connect(out / "gradebook.sqlite", isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")   # a database tool in the middle of a change, say
    try:
        code, err = batch(course_dir, classroom, out, capsys)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert code == EXIT_BUSY, err
    line = said_once(err)
    assert "another process holds" in line and "gradebook.sqlite (database is locked)" in line
    with open(out / ".batch.lock", "w") as lock:   # another grader batch writing the same folder
        fcntl.flock(lock, fcntl.LOCK_EX)
        code, err = batch(course_dir, classroom, out, capsys)
    assert code == EXIT_BUSY and "another grader batch is writing" in said_once(err)
    grading.graded.clear()
    assert batch(course_dir, classroom, out, capsys)[0] == EXIT_OK
    assert sorted(grading.graded) == STUDENTS[3:]
    assert (out / "grades.csv").read_text() == uninterrupted


@pytest.mark.parametrize("damage", ["header", "truncated"])
def test_a_damaged_gradebook_ends_in_a_line_and_is_left_as_it_is(damage, course_dir, tmp_path, monkeypatch, capsys):
    classroom = make_class(tmp_path / "class", STUDENTS[:2])
    out = tmp_path / "out"
    Grading(monkeypatch)
    assert batch(course_dir, classroom, out, capsys)[0] == EXIT_OK
    book = out / "gradebook.sqlite"
    data = book.read_bytes()
    assert len(data) > 4096
    book.write_bytes(b"this is not SQLite" + data[18:] if damage == "header" else data[:len(data) // 2 + 100])
    damaged = book.read_bytes()
    code, err = batch(course_dir, classroom, out, capsys)
    assert code == EXIT_CORRUPT, err
    line = said_once(err)
    assert f"{book} is damaged" in line and "restore it from a copy" in line
    assert book.read_bytes() == damaged   # nothing of it overwritten: whatever can be recovered still can


CUT_SHORT = "import sys; sys.stdout.write('{\"id\": 0, \"record\": \"' + 'x' * 70000); sys.stdout.flush()"


def test_a_reply_cut_short_by_a_kill_tells_every_waiting_request_at_once(tmp_path):
    """A helper killed while it writes a long reply leaves half a line in the pipe: its reader takes that as the
    helper's end and tells every request waiting on it, at once and without a traceback, as it does when the helper
    ends between lines (the control: the same reader on a whole reply delivers it)."""
    import tempfile

    from grader.batch.warm import WarmGrader, _Pending
    from grader.judge.client import JudgeClient, _Hello, _Request
    from grader.judge.limits import JudgeLimits

    def helper(code: str) -> subprocess.Popen:
        return subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)

    whole = {0: _Pending()}
    WarmGrader(ROOT, "basic")._read_replies(helper("print('{\"id\": 0, \"score\": 1}')"), whole,
                                            tempfile.TemporaryFile())
    assert whole == {}, "a whole reply is delivered and its request no longer waits"
    waiting = _Pending()
    WarmGrader(ROOT, "basic")._read_replies(helper(CUT_SHORT), {0: waiting}, tempfile.TemporaryFile())
    assert waiting.done.is_set() and waiting.reply is None and "the grading process ended" in str(waiting.error)
    request, hello = _Request(), _Hello()
    JudgeClient(["heads"], JudgeLimits())._read_replies(helper(CUT_SHORT), hello, {0: request},
                                                        tempfile.TemporaryFile())
    assert request.ended.is_set() and "the judging server ended" in str(request.error)
    assert hello.ended.is_set() and hello.error


def test_the_other_commands_on_a_held_or_damaged_gradebook_end_in_the_same_line(course_dir, tmp_path, monkeypatch,
                                                                                capsys):
    """`grader override` (and every command given a gradebook folder) meets the same faults as the batch: a held
    gradebook and a damaged one end in one line and their status, never a traceback; the same command on the
    healthy gradebook works (the positive control)."""
    from grader.cli import main

    classroom = make_class(tmp_path / "class", STUDENTS[:2])
    out = tmp_path / "out"
    Grading(monkeypatch)
    assert batch(course_dir, classroom, out, capsys)[0] == EXIT_OK
    listing = ["--course", str(course_dir), "override", str(out), "--list"]
    correcting = ["--course", str(course_dir), "override", str(out), STUDENTS[0], "--points", "1", "--comment", "c"]
    assert main(correcting) == EXIT_OK, capsys.readouterr().err
    capsys.readouterr()
    holder = sqlite3.connect(out / "gradebook.sqlite", isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")   # a reader still reads (the gradebook's journal is WAL); a writer waits
    try:
        code = main(correcting)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    err = capsys.readouterr().err
    assert code == EXIT_BUSY, err
    assert "another process holds" in said_once(err)
    book = out / "gradebook.sqlite"
    book.write_bytes(b"this is not SQLite" + book.read_bytes()[18:])
    code = main(listing)
    err = capsys.readouterr().err
    assert code == EXIT_CORRUPT, err
    assert f"{book} is damaged" in said_once(err)


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP], ids=lambda s: s.name)
def test_a_signal_stops_the_batch_in_a_line_and_the_resume_loses_nothing(signum, course_dir, uninterrupted,
                                                                         tmp_path, monkeypatch, capsys):
    """The signal to the batch's process alone (a SIGINT to it was ignored once, and the batch graded on)."""
    classroom = make_class(tmp_path / "class", STUDENTS)
    out = tmp_path / "out"
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    signal.signal(signal.SIGHUP, signal.SIG_DFL)   # as a terminal's session has it (not nohup's)
    try:
        sent: list[int] = []   # once: the resumed run's gradings go on
        grading = Grading(monkeypatch, lambda n: (once_one_is_stored(out), sent.append(os.kill(os.getpid(), signum)
                                                                                  or n))
                          if n == 4 and not sent else None)
        started = time.monotonic()
        code, err = batch(course_dir, classroom, out, capsys)
        took = time.monotonic() - started
        assert code == 128 + signum, err
        line = said_once(err)
        kept = stored(out)
        assert line == f"grader: stopped after {len(kept)} of {len(STUDENTS)}; the same command resumes"
        assert len(kept) < len(STUDENTS) and took < 30
        assert signal.getsignal(signal.SIGINT) is before[signal.SIGINT]   # the batch's handlers are gone
        grading.graded.clear()
        assert batch(course_dir, classroom, out, capsys)[0] == EXIT_OK
        assert set(grading.graded) == set(STUDENTS) - kept
        assert (out / "grades.csv").read_text() == uninterrupted
    finally:
        for s, handler in before.items():
            signal.signal(s, handler)


# --- a dead report process, a dead judging server ---------------------------------------------------------------

def rendered_in(marker: str, value: int) -> int:
    """A report process's work: the first time `marker` is not there, the process dies (SIGKILL) rendering it."""
    if value == 0 and not os.path.exists(marker):
        Path(marker).touch()
        os.kill(os.getpid(), signal.SIGKILL)
    return value * 10


def test_a_dead_report_process_costs_only_what_it_held_asked_again(tmp_path):
    from grader.batch.pool import ReportPool

    pool = ReportPool(2, [])
    try:
        reports = [pool.submit(rendered_in, str(tmp_path / "died"), i) for i in range(6)]
        assert [r.result() for r in reports] == [i * 10 for i in range(6)]
        assert (tmp_path / "died").exists() and any(r.resubmitted for r in reports)   # it did die, and came back
        assert pool.submit(rendered_in, str(tmp_path / "died"), 7).result() == 70   # the pool serves on
    finally:
        pool.shutdown()


@pytest.mark.slow
def test_a_killed_judging_server_is_started_again_and_the_submission_judged_anew(monkeypatch):
    """The server is killed as the submission's judging is sent to it: the submission is judged anyway, each
    criterion as on a server that lived. The positive control: with no restart allowed, the same kill is the
    grader's error."""
    from grader.course import load_course
    from grader.grading.pipeline import probe_order, reference_folders
    from grader.judge import client as judge_client
    from grader.judge.client import JudgeClient, JudgeUnavailable

    course = load_course(ROOT)
    ex = course.exercise("heads")
    reference = reference_folders(course, [ex])[ex.id]
    request = [{"id": ex.id, "file": ex.file, "probes": probe_order(ex), "obs": str(reference), "run": {},
                "staged": None, "reference": str(reference)}]

    def judged_with_a_kill(restarts: int) -> tuple[dict, list[int]]:
        monkeypatch.setattr(judge_client, "RESTARTS", restarts)
        judge = JudgeClient([ex.id], course.judge_limits)
        killed: list[int] = []
        send = judge._send

        def send_then_kill(message: dict) -> None:
            send(message)
            if message.get("exercises") and not message.get("prepare") and not killed and judge.pid:
                killed.append(judge.pid)
                os.kill(judge.pid, signal.SIGKILL)

        monkeypatch.setattr(judge, "_send", send_then_kill)
        try:
            return {o.meta.id: o.status for o in judge.judge(request)[ex.id]}, killed
        finally:
            judge.close()

    outcomes, killed = judged_with_a_kill(1)
    assert killed and outcomes and set(outcomes.values()) == {"passed"}, outcomes
    with pytest.raises(JudgeUnavailable):
        judged_with_a_kill(0)


# --- a real batch, interrupted at random points -------------------------------------------------------------------

@pytest.mark.slow
def test_a_batch_interrupted_at_random_points_ends_with_the_uninterrupted_grades(tmp_path):
    """A batch of 8 (two exercises, so that a grading lasts long enough to be interrupted), stopped 6 times at
    random points: a Ctrl-C to its group, SIGTERM, SIGKILL, and SIGKILL of each helper process (the warm grading
    process, its judging server, its fork server) before it is stopped; resumed each time. Each stop within 2 s,
    in its line, with its status and nothing left running; in the end the uninterrupted run's grades.csv."""
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        import fault_soak
    finally:
        sys.path.remove(str(ROOT / "bench"))
    seed = int(os.environ.get("GRADER_FAULT_SEED") or random.randrange(1 << 30))   # the failure message names it
    rng = random.Random(seed)
    actions = ["Ctrl-C", "SIGTERM", "SIGKILL", "kill grading process", "kill judging server", "kill fork server"]
    rng.shuffle(actions)
    exercises = ["heads", "decoder_block"]
    course = course_copy(tmp_path / "course", exercises)
    classroom = fault_soak.make_class(tmp_path / "class", 8, exercises)
    said: list[str] = []
    rounds, problems = fault_soak.soak(course, classroom, tmp_path, 8, actions, rng.randrange(1 << 30),
                                       say=said.append)
    assert not problems, f"seed {seed}:\n" + "\n".join(said + problems)
    assert len(rounds) == len(actions)
    assert sum(r.seconds_to_stop is not None for r in rounds) >= 3, said   # most stops came while it graded
