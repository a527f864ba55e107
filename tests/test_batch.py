"""`grader batch`: a class of mixed submissions, graded in parallel into the gradebook; killed with
SIGKILL halfway and started again, it ends with the same CSV as an uninterrupted run. Links are never
followed, crafted archives and odd names each get their row, and a grader-side failure is graded again."""

import csv
import io
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
import zipfile

import pytest

from conftest import ROOT, course_copy
from grader.batch.gradebook import said
from grader.review.selftest import catalog_mutants
from grader.batch.warm import GradingTimeout, WarmGraderDied

# end to end: every test here grades in a sandbox (`pytest -m "not slow"` leaves them out)
pytestmark = pytest.mark.slow

EXERCISES = ["decoder_block", "heads"]   # light exercises: the behaviour under test is the batch's, not theirs
GRADER_FAULT = "grader_error"            # an exercise the grader itself failed on
# decoder_block, where the hostile code loops: the correct and buggy ones must still finish inside it, and take 0.11 s
# of wall time at a load average of 13 on 2 cores (0.05 s of CPU): ~90 times that (tests/test_sandbox_statuses.py)
HANG_TIMEOUT_S = 10
HOSTILE = {
    "loops": "while True:\n    pass\n",
    "exits": "import sys\nsys.exit(0)\n",
    "dies": "import os\nos._exit(3)\n",
}


@pytest.fixture(scope="module")
def course_dir(tmp_path_factory):
    return course_copy(tmp_path_factory.mktemp("course"), EXERCISES, timeout_s={"decoder_block": HANG_TIMEOUT_S})


@pytest.fixture(scope="module")
def classroom(tmp_path_factory):
    """30 submissions: correct, buggy (mutants), hostile, empty, and some delivered as zip files."""
    from grader.course import load_course

    course = load_course(ROOT)
    root = tmp_path_factory.mktemp("class")
    mutants = list(catalog_mutants(course, course.solutions, "decoder_block").values())   # file contents
    assert mutants, "the decoder_block mutant catalog is needed"
    kinds = []
    for i in range(30):
        student = root / f"student{i:02d}"
        files = {}
        if i % 5 == 0:
            kind = "correct"
            files = {ex: course.solution(course.exercise(ex)) for ex in EXERCISES}
        elif i % 5 in (1, 2):
            kind = "buggy"
            files = {"decoder_block": mutants[i % len(mutants)], "heads": course.solution(course.exercise("heads"))}
        elif i % 5 == 3:
            kind = "hostile"
            files = {"decoder_block": list(HOSTILE.values())[i % len(HOSTILE)]}
        else:
            kind = "empty"
        for ex, source in files.items():
            target = student / ex / course.exercise(ex).file
            target.parent.mkdir(parents=True, exist_ok=True)
            if isinstance(source, str):
                target.write_text(source)
            else:
                shutil.copyfile(source, target)
        student.mkdir(exist_ok=True)
        if i % 7 == 6:  # delivered as a zip of the student's folder
            with zipfile.ZipFile(root / f"student{i:02d}.zip", "w") as zf:
                for f in student.rglob("*"):
                    if f.is_file():
                        zf.write(f, f.relative_to(root).as_posix())
            shutil.rmtree(student)
        kinds.append(kind)
    return root


def batch_command(course_dir, classroom, out, *extra):
    return [sys.executable, "-m", "grader", "--course", str(course_dir), "batch", str(classroom), "--out", str(out),
            "--jobs", "2", *extra]


def criteria_count(course_dir):
    from grader.course import load_course

    return sum(len(e.points) for e in load_course(course_dir).exercises)


@pytest.fixture(scope="module")
def uninterrupted(course_dir, classroom, tmp_path_factory):
    out = tmp_path_factory.mktemp("uninterrupted")
    done = subprocess.run(batch_command(course_dir, classroom, out), capture_output=True, text=True, timeout=1800)
    assert done.returncode == 0, done.stderr[-2000:]
    return out


def test_every_submission_has_every_row(uninterrupted, course_dir):
    db = sqlite3.connect(uninterrupted / "gradebook.sqlite")
    assert db.execute("SELECT COUNT(*) FROM submissions").fetchone()[0] == 30
    assert db.execute("SELECT COUNT(*) FROM results").fetchone()[0] == 30 * criteria_count(course_dir)
    rows = list(csv.DictReader(io.StringIO((uninterrupted / "grades.csv").read_text())))
    assert len(rows) == 30
    assert (uninterrupted / "class.html").stat().st_size > 0
    assert all((uninterrupted / "students" / r["submission"] / "report.json").is_file() for r in rows)


def test_scores_follow_the_kind_of_submission(uninterrupted):
    rows = {r["submission"]: r for r in csv.DictReader(io.StringIO((uninterrupted / "grades.csv").read_text()))}
    assert rows["student00"]["percent"] == "100"
    # empty: no verdict on the work, so no grade (blank, which an importer leaves alone) and the reason
    assert rows["student04"]["percent"] == cell(rows["student04"], "total") == "" and rows["student04"]["reason"]
    assert points(rows["student03"], "decoder_block") == 0  # hostile
    assert 0 < float(rows["student01"]["percent"]) < 100  # a mutant
    assert [rows[name]["status"] for name in ("student00", "student01", "student04")] == ["complete", "partial",
                                                                                          "empty"]


def test_second_run_grades_nothing(uninterrupted, course_dir, classroom):
    done = subprocess.run(batch_command(course_dir, classroom, uninterrupted), capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0
    assert "0 graded, 30 already in the gradebook" in done.stdout


def test_killed_halfway_and_restarted_gives_the_same_csv(uninterrupted, course_dir, classroom, tmp_path):
    out = tmp_path / "interrupted"
    proc = subprocess.Popen(batch_command(course_dir, classroom, out), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 900
    while time.monotonic() < deadline:
        try:
            graded = sqlite3.connect(out / "gradebook.sqlite").execute("SELECT COUNT(*) FROM submissions").fetchone()[0]
        except sqlite3.Error:
            graded = 0
        if graded >= 12:
            break
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert 12 <= graded < 30, "the batch must be killed halfway"
    done = subprocess.run(batch_command(course_dir, classroom, out), capture_output=True, text=True, timeout=1800)
    assert done.returncode == 0, done.stderr[-2000:]
    assert f"{30 - graded} graded" in done.stdout or "graded" in done.stdout
    assert (out / "grades.csv").read_text() == (uninterrupted / "grades.csv").read_text()
    db = sqlite3.connect(out / "gradebook.sqlite")
    assert db.execute("SELECT COUNT(*) FROM results").fetchone()[0] == 30 * criteria_count(course_dir)


def test_zip_with_a_path_escape_is_refused(tmp_path):
    from grader.batch.run import UnsafeArchive, unpack

    archive = tmp_path / "evil.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("../../escaped.py", "print('hi')")
    with pytest.raises(UnsafeArchive, match="outside the archive"):
        unpack(archive, tmp_path / "target", set())
    assert not (tmp_path.parent / "escaped.py").exists()


def test_zip_with_a_symlink_is_refused(tmp_path):
    from grader.batch.run import UnsafeArchive, unpack

    archive = tmp_path / "link.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        info = zipfile.ZipInfo("decoder_block/block.py")
        info.external_attr = (0o120777 << 16)
        zf.writestr(info, "/etc/shadow")
    with pytest.raises(UnsafeArchive, match="symbolic link"):
        unpack(archive, tmp_path / "target", set())


def test_zip_bomb_is_refused(tmp_path):
    from grader.batch.run import MAX_ZIP_TOTAL_BYTES, UnsafeArchive, unpack

    archive = tmp_path / "bomb.zip"
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as zf:
        for i in range(5):
            zf.writestr(f"f{i}.bin", b"\0" * (MAX_ZIP_TOTAL_BYTES // 4))
    with pytest.raises(UnsafeArchive, match="uncompressed"):
        unpack(archive, tmp_path / "target", set())


# --- Isolation: links, crafted archives, odd names, grader-side failures -------------------------------------

def zip_bytes(entries: dict[str, bytes], method: int = zipfile.ZIP_STORED) -> bytearray:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", method) as zf:
        for name, data in entries.items():
            zf.writestr(name, data)
    return bytearray(buf.getvalue())


def patched_headers(archive: bytearray, local_offset: int, central_offset: int, value: int) -> bytes:
    """Set a 2-byte field of the first local header and of the first central directory header."""
    for signature, offset in ((b"PK\x03\x04", local_offset), (b"PK\x01\x02", central_offset)):
        at = archive.find(signature) + offset
        archive[at:at + 2] = value.to_bytes(2, "little")
    return bytes(archive)


def crafted_archives(solution: bytes) -> dict[str, bytes]:
    """Zips that make zipfile raise: each must become its own row, never stop the batch."""
    entry = "heads/heads.py"
    corrupt = zip_bytes({entry: solution}, zipfile.ZIP_DEFLATED)
    data_at = corrupt.find(b"PK\x03\x04") + 30 + len(entry)
    corrupt[data_at:data_at + 40] = b"\xff" * 40          # deflate block type 3 does not exist
    bad_name = bytearray(patched_headers(zip_bytes({entry: solution}), 6, 8, 0x800))  # "names are UTF-8"...
    bad_name[:] = bad_name.replace(entry.encode(), b"heads/\xffeads.py")               # ...but one is not
    return {
        "broken.zip": b"PK\x03\x04 this is not a zip",
        "encrypted.zip": patched_headers(zip_bytes({entry: solution}), 6, 8, 0x1),     # flag bit 0: encrypted
        "method99.zip": patched_headers(zip_bytes({entry: solution}), 8, 10, 99),       # AES: not supported
        "corrupt.zip": bytes(corrupt),
        "badname.zip": bytes(bad_name),
    }


CRAFTED_REASONS = {"broken.zip": "BadZipFile", "encrypted.zip": "encrypted", "method99.zip": "NotImplementedError",
                   "corrupt.zip": "zlib.error", "badname.zip": "UnicodeDecodeError"}
ODD_NAME = os.fsdecode(b"odd\xff\nname.zip")   # not UTF-8, and a newline: must not break the CSV or the gradebook
ODD_ROW = "odd\\xff\\u000aname.zip"


@pytest.fixture(scope="module")
def hostile_class(tmp_path_factory, course_dir):
    """A class where bob's correct heads is the target of every link, next to crafted archives."""
    from grader.course import load_course

    solution = load_course(ROOT).solution(load_course(ROOT).exercise("heads")).read_bytes()
    root = tmp_path_factory.mktemp("hostile-class")
    (root / "bob" / "heads").mkdir(parents=True)
    (root / "bob" / "heads" / "heads.py").write_bytes(solution)
    (root / "frank" / "heads").mkdir(parents=True)
    (root / "frank" / "heads" / "heads.py").write_bytes(solution)
    (root / "frank.zip").write_bytes(zip_bytes({"heads/heads.py": b"def split_heads(x, n):\n    return x\n"}))
    (root / "alice").symlink_to(root / "bob")                                   # absolute, to a classmate
    (root / "carol").symlink_to("bob")                                          # relative, to a classmate
    (root / "dave").mkdir()
    (root / "dave" / "heads").symlink_to("../bob/heads")                         # one exercise, to a classmate
    (root / "erin").mkdir()
    (root / "erin" / "heads").symlink_to("/proc/self/cwd/solutions/heads")       # the grader's own solutions
    (root / "zed.zip").symlink_to(root / "frank.zip")
    for name, data in crafted_archives(solution).items():
        (root / name).write_bytes(data)
    (root / ODD_NAME).write_bytes(zip_bytes({"heads/heads.py": solution, "heads/odd\nentry.py": b"x = 1\n"}))
    return root


@pytest.fixture(scope="module")
def hostile_runs(hostile_class, course_dir, tmp_path_factory):
    """Two batch runs over the hostile class, from the course folder (so /proc/self/cwd/solutions exists)."""
    out = tmp_path_factory.mktemp("hostile-out")
    runs = []
    for _ in range(2):
        done = subprocess.run(batch_command(course_dir, hostile_class, out), capture_output=True, text=True,
                              timeout=600, cwd=course_dir)
        assert done.returncode == 0, done.stderr[-2000:]
        runs.append((done, (out / "grades.csv").read_text()))
    return out, runs


def csv_rows(text: str) -> dict[str, dict]:
    return {r["submission"]: r for r in csv.DictReader(io.StringIO(text))}


def cell(row: dict, column: str) -> str:
    """A grades.csv row's cell in the column headed `column (maximum)`."""
    return next(value for header, value in row.items() if header.partition(" (")[0] == column)


def points(row: dict, column: str) -> float:
    return float(cell(row, column))


def test_linked_student_folders_get_their_own_row_and_no_points(hostile_runs):
    out, [(_, first), _] = hostile_runs
    rows = csv_rows(first)
    assert points(rows["bob"], "heads") == 10, "the link target must be worth stealing"
    db = sqlite3.connect(out / "gradebook.sqlite")
    for name in ("alice", "carol", "zed.zip"):
        assert rows[name]["status"] == "unreadable" and cell(rows[name], "total") == ""   # no grade: blank
        assert rows[name]["reason"] == f"{name} is a symbolic link: submit plain files"
        message = said(db.execute("SELECT message FROM submissions WHERE submission=?", (name,)).fetchone()[0])
        assert message == {"en": f"{name} is a symbolic link: submit plain files",
                           "zh": f"{name} 是符号链接：请提交普通文件"}


def test_a_linked_exercise_folder_scores_nothing(hostile_runs):
    out, [(_, first), _] = hostile_runs
    rows = csv_rows(first)
    for name in ("dave", "erin"):
        assert points(rows[name], "heads") == 0
        report = json.loads((out / "students" / name / "report.json").read_text())
        heads = next(e for e in report["exercises"] if e["id"] == "heads")
        assert heads["status"] == "error" and "symbolic link" in heads["message"]["en"]
        assert "符号链接" in heads["message"]["zh"]


def test_crafted_archives_each_get_a_row_with_the_reason(hostile_runs):
    out, [(_, first), _] = hostile_runs
    rows = csv_rows(first)
    db = sqlite3.connect(out / "gradebook.sqlite")
    for name, reason in CRAFTED_REASONS.items():
        assert rows[name]["status"] == "unreadable" and cell(rows[name], "total") == ""   # no grade: blank
        assert rows[name]["reason"].startswith(f"{name} could not be unpacked") and reason in rows[name]["reason"]
        message = said(db.execute("SELECT message FROM submissions WHERE submission=?", (name,)).fetchone()[0])["en"]
        assert message.startswith(f"{name} could not be unpacked") and reason in message


def test_an_oddly_named_zip_is_graded_under_an_escaped_name(hostile_runs):
    _, [(_, first), _] = hostile_runs
    rows = csv_rows(first)
    assert points(rows[ODD_ROW], "heads") == 10
    assert len(first.splitlines()) == 1 + len(rows), "a name must not break a CSV line"


def test_folder_and_zip_of_the_same_stem_are_two_stable_rows(hostile_runs):
    _, [(first_run, first), (second_run, second)] = hostile_runs
    rows = csv_rows(first)
    assert points(rows["frank"], "heads") == 10 and points(rows["frank.zip"], "heads") < 10
    assert second == first
    assert "0 graded, 14 already in the gradebook" in second_run.stdout


def fake_grade(outcomes: list, monkeypatch):
    """A stand-in for the warm grading process: each grading takes the next outcome, a report's exercise status
    (a str), a reply (a dict) or an exception to raise; every grading is recorded."""
    from grader.batch import pool
    from grader.judge.session import criteria_of

    calls = []

    class FakeWarmGrader:
        def __init__(self, course_root, sandbox, slots=1):
            pass

        def grade(self, submission, exercise_ids, lang, timeout_s, more=True, keep=None):
            calls.append(submission)
            outcome = outcomes[len(calls) - 1]
            if isinstance(outcome, BaseException):
                raise outcome
            if isinstance(outcome, dict):
                return outcome
            exercises = [{"id": ex, "status": outcome, "message": {"en": f"{ex} {outcome}", "zh": f"{ex} {outcome}"},
                          "criteria": [{"id": m.id, "kind": m.kind, "status": outcome, "points": 0.0, "max_points": 1.0,
                                        "message": {"en": outcome, "zh": outcome}} for m in criteria_of(ex)]}
                         for ex in EXERCISES]
            report = {"score": 0.0, "max_score": 1.0, "percent": 0.0, "sandbox": {"level": "strict"},
                      "exercises": exercises}
            return {"files": {"report.json": json.dumps(report)}}

        def close(self):
            pass

    monkeypatch.setattr(pool, "WarmGrader", FakeWarmGrader)
    return calls


def batch_in_process(course_dir, classroom, out):
    from grader.batch.run import run_batch
    from grader.course import load_course

    return run_batch(load_course(course_dir), classroom, out, 1, False, "strict", "en")


def stored_status(out, name):
    """(status, message in each language) of a submission in the gradebook."""
    db = sqlite3.connect(out / "gradebook.sqlite")
    status, message = db.execute("SELECT status, message FROM submissions WHERE submission=?", (name,)).fetchone()
    return status, said(message)


@pytest.mark.parametrize("fault",
                         [GRADER_FAULT, {"error": "ValueError: a bug of ours"}, {"files": {"report.json": "{"}},
                                   WarmGraderDied("the grading process ended (exit -9)"),
                                   GradingTimeout("no answer within 1 s")],
                         ids=["exercise-grader-error", "error-reply", "broken-report", "process-died", "timeout"])
def test_a_grader_side_failure_is_stored_and_graded_again(fault, course_dir, tmp_path, monkeypatch):
    (tmp_path / "class" / "gina").mkdir(parents=True)
    calls = fake_grade([fault, "failed"], monkeypatch)
    batch_in_process(course_dir, tmp_path / "class", tmp_path / "out")
    status, message = stored_status(tmp_path / "out", "gina")
    assert status == "grader_error" and "graded again on the next run" in message["en"]
    assert "下次运行时会重新评分" in message["zh"]
    outcome = batch_in_process(course_dir, tmp_path / "class", tmp_path / "out")
    assert len(calls) == 2 and outcome["graded"] == 1
    assert stored_status(tmp_path / "out", "gina")[0] == "graded"


def test_an_unreadable_submission_is_final(course_dir, tmp_path, monkeypatch):
    (tmp_path / "class").mkdir()
    (tmp_path / "class" / "broken.zip").write_bytes(b"not a zip")
    calls = fake_grade([], monkeypatch)
    batch_in_process(course_dir, tmp_path / "class", tmp_path / "out")
    outcome = batch_in_process(course_dir, tmp_path / "class", tmp_path / "out")
    assert calls == [] and outcome["skipped"] == 1
    assert stored_status(tmp_path / "out", "broken.zip")[0] == "unreadable"
    (tmp_path / "class" / "broken.zip").write_bytes(b"still not a zip, but another one")
    assert batch_in_process(course_dir, tmp_path / "class", tmp_path / "out")["graded"] == 1


def test_a_stale_report_is_not_taken_for_this_run(course_dir, tmp_path, monkeypatch):
    (tmp_path / "class" / "hank").mkdir(parents=True)
    stale = tmp_path / "out" / "students" / "hank" / "report.json"
    stale.parent.mkdir(parents=True)
    stale.write_text(json.dumps({"score": 21, "max_score": 21, "percent": 100, "exercises": []}))
    fake_grade([{}], monkeypatch)
    batch_in_process(course_dir, tmp_path / "class", tmp_path / "out")
    assert stored_status(tmp_path / "out", "hank")[0] == "grader_error"
    assert not stale.exists()


def test_what_a_killed_run_left_unpacked_is_removed(course_dir, tmp_path, monkeypatch):
    (tmp_path / "class").mkdir()
    leftover = tmp_path / "out" / "unpacked" / "gone.zip" / "heads"
    leftover.mkdir(parents=True)
    (leftover / "heads.py").write_text("half written")
    fake_grade([], monkeypatch)
    batch_in_process(course_dir, tmp_path / "class", tmp_path / "out")
    assert not (tmp_path / "out" / "unpacked").exists()


def test_a_second_batch_on_the_same_folder_is_refused(course_dir, tmp_path):
    import fcntl

    from grader.batch.run import LOCK_FILE, BatchBusy

    (tmp_path / "class").mkdir()
    (tmp_path / "out").mkdir()
    with open(tmp_path / "out" / LOCK_FILE, "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        with pytest.raises(BatchBusy):
            batch_in_process(course_dir, tmp_path / "class", tmp_path / "out")


def test_row_names_are_distinct_for_distinct_entries():
    from grader.batch.run import row_name

    names = ["frank", "frank.zip", "a\\xff", os.fsdecode(b"a\xff"), "a\u00ff", "a\x85", os.fsdecode(b"a\x85"), "a\n",
             "a\\u000a", "学生"]
    rows = [row_name(n) for n in names]
    assert len(set(rows)) == len(names)
    assert rows[0] == "frank" and rows[-1] == "学生" and all(r.isprintable() for r in rows)


def test_batch_lang_zh_writes_each_students_reports_in_chinese(course_dir, tmp_path):
    """`grader batch --lang zh` reaches the warm grading processes: each student's scorecard is Chinese."""
    (tmp_path / "class" / "ivy").mkdir(parents=True)   # nothing written yet: every exercise not attempted
    done = subprocess.run([sys.executable, "-m", "grader", "--course", str(course_dir), "batch",
                           str(tmp_path / "class"),
                           "--out", str(tmp_path / "out"), "--jobs", "1", "--sandbox", "basic", "--lang", "zh"],
                          capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert done.returncode == 0, done.stderr
    card = (tmp_path / "out" / "students" / "ivy" / "scorecard.md").read_text(encoding="utf-8")
    assert card.startswith("### 评分报告：ivy") and "⬜ 未作答" in card and "提交中没有" in card
    assert "not attempted" not in card


def test_a_dead_grading_process_is_explained_in_each_language(course_dir, tmp_path, monkeypatch):
    from grader.i18n import t, verbatim

    (tmp_path / "class" / "jack").mkdir(parents=True)
    died = WarmGraderDied(t("the grading process ended (exit {code}): {output}", code=-9, output=verbatim("Killed")))
    fake_grade([died], monkeypatch)
    batch_in_process(course_dir, tmp_path / "class", tmp_path / "out")
    status, message = stored_status(tmp_path / "out", "jack")
    assert status == "grader_error"
    assert message == {"en": "grading failed: the grading process ended (exit -9): Killed; "
                             "graded again on the next run",
                       "zh": "评分失败：评分进程已退出（退出状态 -9）：Killed；下次运行时会重新评分"}
