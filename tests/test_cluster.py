"""`grader batch --cluster`: a Dask scheduler and two workers on 127.0.0.1, each in its own folder with its own
cache (no shared files); one worker is killed with SIGKILL mid-batch, and the gradebook still ends as a local
run's. A submission whose grading kills workers is recorded, not retried forever."""

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import ROOT, course_copy
from grader.course import load_course
from grader.review.selftest import catalog_mutants

# end to end: every test here grades in a sandbox (`pytest -m "not slow"` leaves them out)
pytestmark = pytest.mark.slow

EXERCISES = ["heads"]   # light: the behaviour under test is the cluster's
SUBMISSIONS = 12


@pytest.fixture(scope="module")
def course_dir(tmp_path_factory):
    return course_copy(tmp_path_factory.mktemp("course"), EXERCISES)


@pytest.fixture(scope="module")
def classroom(tmp_path_factory):
    """Correct submissions (each a distinct file), mutants, an empty one and one that exits at import."""
    root = tmp_path_factory.mktemp("class")
    mutants = list(catalog_mutants(load_course(ROOT), ROOT / "solutions", "heads").values())   # file contents
    for i in range(SUBMISSIONS):
        student = root / f"student{i:02d}"
        student.mkdir()
        source = (ROOT / "solutions" / "heads" / "heads.py").read_text() + f"\n# student {i}\n"
        if i % 3 == 1:
            source = mutants[i % len(mutants)]
        elif i == 11:
            source = "import sys\nsys.exit(0)\n"
        if i != 10:   # student10 is empty
            (student / "heads").mkdir()
            (student / "heads" / "heads.py").write_text(source)
    return root


def batch(course_dir, classroom, out, *extra) -> list[str]:
    return [sys.executable, "-m", "grader", "--course", str(course_dir), "batch", str(classroom), "--out", str(out),
            *extra]


def own_folder(base: Path, name: str) -> tuple[Path, dict]:
    """A folder and environment for one Dask process: its own cache and temporary files, the grader (and this
    module's stand-in tasks) importable."""
    folder = base / name
    (folder / "tmp").mkdir(parents=True)
    env = {**os.environ, "GRADER_CACHE": str(folder / "cache"), "TMPDIR": str(folder / "tmp"),
           "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests")]),
           "DASK_DISTRIBUTED__SCHEDULER__ALLOWED_FAILURES": "1"}
    return folder, env


@pytest.fixture
def dask_processes(tmp_path):
    """start(name, module, *args) -> (process, its folder): a Dask process of its own, killed at the end."""
    procs = []

    def start(name: str, *args: str) -> tuple[subprocess.Popen, Path]:
        folder, env = own_folder(tmp_path, name)
        proc = subprocess.Popen([sys.executable, "-m", *args], cwd=folder, env=env, stdout=subprocess.DEVNULL,
                                stderr=open(folder / "log", "w"), start_new_session=True)
        procs.append(proc)
        return proc, folder

    yield start
    for proc in procs:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()


def start_cluster(start, tmp_path: Path, name: str, workers: int, nanny: bool = False):
    """A scheduler and `workers` workers on 127.0.0.1: (scheduler process, address, [(worker, its folder)]). With
    a nanny, a worker that dies is started again."""
    scheduler_file = tmp_path / f"{name}.json"
    scheduler, _ = start(name, "distributed.cli.dask_scheduler", "--host", "127.0.0.1", "--port", "0",
                         "--no-dashboard", "--scheduler-file", str(scheduler_file))
    deadline = time.monotonic() + 60
    address = None
    while address is None and time.monotonic() < deadline:   # the scheduler writes the file after creating it
        try:
            address = json.loads(scheduler_file.read_text())["address"]
        except (OSError, ValueError, KeyError):
            time.sleep(0.2)
    assert address, f"the scheduler wrote no address to {scheduler_file} in 60 s"
    started = [start(f"{name}-worker{i}", "distributed.cli.dask_worker", address, "--nthreads", "1",
                     "--nanny" if nanny else "--no-nanny",
                     "--no-dashboard", "--host", "127.0.0.1", "--local-directory", str(tmp_path / f"{name}-worker{i}"))
               for i in range(workers)]
    return scheduler, address, started


@pytest.fixture(scope="module")
def local_csv(course_dir, classroom, tmp_path_factory) -> str:
    """The grades of the same class graded on this machine, without Dask."""
    out = tmp_path_factory.mktemp("local")
    local = subprocess.run(batch(course_dir, classroom, out, "--jobs", "2"),
                           capture_output=True, text=True, timeout=300)
    assert local.returncode == 0, local.stderr[-2000:]
    return (out / "grades.csv").read_text()


def graded_count(out: Path) -> int:
    try:
        return sqlite3.connect(out / "gradebook.sqlite").execute("SELECT COUNT(*) FROM submissions").fetchone()[0]
    except sqlite3.Error:
        return 0


def test_a_worker_killed_mid_batch_loses_nothing(course_dir, classroom, local_csv, dask_processes, tmp_path):
    _, address, [(victim, victim_folder), _] = start_cluster(dask_processes, tmp_path, "scheduler", workers=2)
    out = tmp_path / "cluster"
    client = subprocess.Popen(batch(course_dir, classroom, out, "--cluster", address), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:   # the victim holds a submission, and some are already in the gradebook
        busy = list((victim_folder / "tmp").glob("grader-task-*"))
        if busy and graded_count(out) >= 2:
            break
        time.sleep(0.1)
    assert busy, "the victim must be killed mid-task"
    os.killpg(victim.pid, signal.SIGKILL)
    stdout, stderr = client.communicate(timeout=300)
    assert client.returncode == 0, stderr[-2000:]
    assert f"{SUBMISSIONS} graded" in stdout
    assert (out / "grades.csv").read_text() == local_csv
    assert list((victim_folder / "tmp").glob("grader-task-*")), "the victim died holding a task"


def test_a_scheduler_killed_mid_batch_loses_nothing(course_dir, classroom, local_csv, dask_processes, tmp_path):
    scheduler, address, _ = start_cluster(dask_processes, tmp_path, "first", workers=1)
    out = tmp_path / "cluster"
    client = subprocess.Popen(batch(course_dir, classroom, out, "--cluster", address), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 240
    while graded_count(out) < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    os.killpg(scheduler.pid, signal.SIGKILL)
    _, stderr = client.communicate(timeout=120)
    assert client.returncode == 2 and "run the same command again" in stderr
    assert 2 <= graded_count(out) < SUBMISSIONS
    _, address, _ = start_cluster(dask_processes, tmp_path, "second", workers=1)
    rerun = subprocess.run(batch(course_dir, classroom, out, "--cluster", address), capture_output=True, text=True,
                           timeout=300)
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    assert (out / "grades.csv").read_text() == local_csv


@pytest.mark.parametrize("level", ["strict", "basic"])
def test_each_submission_records_the_sandbox_it_was_graded_in(level, course_dir, tmp_path):
    from grader.batch.run import run_batch
    from grader.course import load_course

    student = tmp_path / "class" / "ivy" / "heads"
    student.mkdir(parents=True)
    shutil.copyfile(ROOT / "solutions" / "heads" / "heads.py", student / "heads.py")
    run_batch(load_course(course_dir), tmp_path / "class", tmp_path / "out", 1, False, level, "en")
    db = sqlite3.connect(tmp_path / "out" / "gradebook.sqlite")
    stored = db.execute("SELECT sandbox FROM submissions").fetchall()
    assert stored == [(level,)]


def kills_its_worker(*_):
    """A Dask task standing in for a grading that takes its worker down."""
    os._exit(1)


def test_a_submission_that_kills_two_workers_is_recorded_once(course_dir, dask_processes, tmp_path, monkeypatch):
    from grader.batch import cluster
    from grader.batch.run import run_batch
    from grader.course import load_course

    _, address, _ = start_cluster(dask_processes, tmp_path, "scheduler", workers=1, nanny=True)
    monkeypatch.setattr(cluster, "grade_on_worker", kills_its_worker)
    (tmp_path / "class" / "mallory").mkdir(parents=True)
    course = load_course(course_dir)
    first = run_batch(course, tmp_path / "class", tmp_path / "out", 1, False, "strict", "en",
                      cluster=address)
    status, message = sqlite3.connect(tmp_path / "out" / "gradebook.sqlite").execute(
        "SELECT status, message FROM submissions WHERE submission='mallory'").fetchone()
    from grader.batch.gradebook import said

    assert first["graded"] == 1 and status == "killed_workers" and "worker that graded it died" in said(message)["en"]
    assert "Dask worker 都在评分途中退出" in said(message)["zh"]
    again = run_batch(course, tmp_path / "class", tmp_path / "out", 1, False, "strict", "en",
                      cluster=address)
    assert again["skipped"] == 1
