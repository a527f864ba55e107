"""`grader batch`: a class of mixed submissions, graded in parallel into the gradebook; killed with
SIGKILL halfway and started again, it ends with the same CSV as an uninterrupted run."""

import csv
import io
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

EXERCISES = ["decoder_block", "heads"]   # light exercises: the behaviour under test is the batch's, not theirs
HOSTILE = {
    "loops": "while True:\n    pass\n",
    "exits": "import sys\nsys.exit(0)\n",
    "dies": "import os\nos._exit(3)\n",
}


@pytest.fixture(scope="module")
def course_dir(tmp_path_factory):
    return course_copy(tmp_path_factory.mktemp("course"), EXERCISES, timeout_s=5)


@pytest.fixture(scope="module")
def classroom(tmp_path_factory):
    """30 submissions: correct, buggy (mutants), hostile, empty, and some delivered as zip files."""
    from grader.course import load_course

    course = load_course(ROOT)
    root = tmp_path_factory.mktemp("class")
    mutants = sorted((ROOT / "tests" / "mutants" / "decoder_block").glob("*/block.py"))
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
    assert rows["student04"]["percent"] == "0"          # empty
    assert float(rows["student03"]["decoder_block"]) == 0  # hostile
    assert 0 < float(rows["student01"]["percent"]) < 100  # a mutant


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
    from grader.batch import UnsafeArchive, unpack

    archive = tmp_path / "evil.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("../../escaped.py", "print('hi')")
    with pytest.raises(UnsafeArchive, match="outside the archive"):
        unpack(archive, tmp_path / "target", set())
    assert not (tmp_path.parent / "escaped.py").exists()


def test_zip_with_a_symlink_is_refused(tmp_path):
    from grader.batch import UnsafeArchive, unpack

    archive = tmp_path / "link.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        info = zipfile.ZipInfo("decoder_block/block.py")
        info.external_attr = (0o120777 << 16)
        zf.writestr(info, "/etc/shadow")
    with pytest.raises(UnsafeArchive, match="symbolic link"):
        unpack(archive, tmp_path / "target", set())


def test_zip_bomb_is_refused(tmp_path):
    from grader.batch import MAX_ZIP_TOTAL_BYTES, UnsafeArchive, unpack

    archive = tmp_path / "bomb.zip"
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as zf:
        for i in range(5):
            zf.writestr(f"f{i}.bin", b"\0" * (MAX_ZIP_TOTAL_BYTES // 4))
    with pytest.raises(UnsafeArchive, match="uncompressed"):
        unpack(archive, tmp_path / "target", set())
