"""The basic level hides the class (as root, as CI runs): with no box, student code runs on the host as a grading uid
of its own, and reads nothing of the grader's (the reference cache, the gradebook folder) nor of a classmate graded
at the same time (the scratch folder, the staged file); `--cluster` refuses the level (any client of a Dask scheduler
runs code in its workers, and student code could reach it); a class folder every user can enter is refused.
Each attack runs next to a positive control that shows the same look finds what it seeks where it may."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import threading
import time
import tomllib
from pathlib import Path

import pytest

from grader.course import load_course
from grader.review.selftest import mutant_text

from conftest import ROOT, course_copy

# end to end: every test here grades in a sandbox (`pytest -m "not slow"` leaves them out)
pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(os.geteuid() != 0, reason="the grading uids of the basic level need root")]

SOLUTION = ROOT / "solutions" / "heads" / "heads.py"
COURSE = load_course(ROOT)
MUTANT = ROOT / "solutions" / "heads" / "mutants" / "merge_no_transpose"
UIDS = (61000, 61999)   # course.toml's [sandbox] uids

# The two gradings meet through this folder, which every user may write (the test's, not the grader's), and not
# through the clock: Carol's import says it started and waits until Mallory has looked; Mallory looks once Carol's
# import has started. However slow the machine, Mallory looks while Carol's staged file lies in her scratch folder.
# The waits end after WAIT_S (a grading that never came: the test then fails on what Mallory tried).
CAROL_IMPORTING, MALLORY_LOOKED = "carol-importing", "mallory-looked"
WAIT_S = 240
MEET = '''
import os, time

def _wait_for(name):
    _until = time.monotonic() + @WAIT_S@
    while not os.path.exists(os.path.join(@SIGNALS@, name)) and time.monotonic() < _until:
        time.sleep(0.1)

def _say(name):
    open(os.path.join(@SIGNALS@, name), "w").close()
'''

# Mallory's heads.py: the known-bug mutant, preceded by code that, once Carol's import has started, looks for a
# better heads.py in ten passes: any copy of a solution in the reference cache, and the staged file of any classmate
# whose grading holds its scratch folder meanwhile (the scratch folders are under /tmp; a lent one has a grading uid
# for its group). Whatever it reads replaces the mutant's functions. It prints what it tried and what it could read.
ATTACK = MEET + '''
import glob

_CACHE, _CONTROL = @CACHE@, @CONTROL@
_OWN = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _read(path):
    try:
        with open(path, encoding="utf-8") as fh:
            return fh.read()
    except (OSError, UnicodeError):
        return None


print("CONTROL", "READ" if _read(_CONTROL) else "DENIED", flush=True)
try:
    os.listdir(_CACHE)
    print("CACHE LISTED", flush=True)
except OSError:
    print("CACHE DENIED", flush=True)
_wait_for(@CAROL_IMPORTING@)
_stolen, _tried, _passes = None, {}, 0
while _stolen is None and _passes < 10:
    _passes += 1
    for _path in glob.glob(os.path.join(_CACHE, "**", "*"), recursive=True):
        _text = _read(_path)
        if _text is not None:
            print("STOLE", _path, flush=True)
            _stolen = _text if _path.endswith(".py") else _stolen
    for _name in os.listdir("/tmp"):
        _folder = os.path.join("/tmp", _name)
        if not _name.startswith("grader-") or _folder == _OWN:
            continue
        try:
            _lent = @FIRST@ <= os.stat(_folder).st_gid <= @LAST@
        except OSError:
            continue
        if _lent:
            _tried[_name] = _tried.get(_name, 0) + 1
        for _path in glob.glob(os.path.join(_folder, "*", "*.py")) + [os.path.join(_folder, "heads", "heads.py")]:
            _text = _read(_path)
            if _text:
                _stolen = _text
                print("STOLE", _path, flush=True)
    time.sleep(0.2)
print("TRIED", " ".join(sorted(_tried)), flush=True)
_say(@MALLORY_LOOKED@)
'''
# ... and after the mutant's functions: what it stole, if anything, replaces them.
STEAL = '''
if _stolen:
    exec(compile(_stolen, "stolen", "exec"), globals())
'''

# Carol's heads.py: the solution, whose import waits until Mallory has looked, so that her staged file lies in her
# scratch folder meanwhile.
CAROL = "# carol's own heads.py"
SLOW_SOLUTION = f"{CAROL}\n" + MEET + "_say(@CAROL_IMPORTING@)\n_wait_for(@MALLORY_LOOKED@)\n" + SOLUTION.read_text()


def met(source: str, signals: Path) -> str:
    """`source` with the meeting folder and its names filled in."""
    return (source.replace("@SIGNALS@", repr(str(signals))).replace("@WAIT_S@", str(WAIT_S))
            .replace("@CAROL_IMPORTING@", repr(CAROL_IMPORTING)).replace("@MALLORY_LOOKED@", repr(MALLORY_LOOKED)))


@pytest.fixture
def shared_base():
    """A folder every user can pass through, as a home or /srv is: what the grader keeps under it is hidden only by
    the grader's own modes."""
    base = Path(tempfile.mkdtemp(prefix="basic-level-test-"))
    os.chmod(base, 0o755)
    yield base
    shutil.rmtree(base, ignore_errors=True)


def _report(out: Path, student: str) -> dict:
    return json.loads((out / "students" / student / "report.json").read_text())


def _heads(report: dict) -> dict:
    return next(e for e in report["exercises"] if e["id"] == "heads")


@pytest.mark.slow
def test_basic_batch_code_reads_neither_the_cache_nor_a_concurrent_classmate(shared_base):
    """`grader batch --sandbox basic --jobs 2`: Mallory's code, graded while Carol's is, reads nothing of the
    reference cache nor of Carol's scratch, and scores exactly what the mutant it falls back on scores."""
    # the timeout is not what is tested: Carol's import waits on Mallory's grading, which may start late on a busy
    # machine
    course = course_copy(shared_base / "course", ["heads"], timeout_s={"heads": 2 * WAIT_S})
    cache, control = shared_base / "cache", shared_base / "readable.txt"
    control.write_text("anyone may read this")
    os.chmod(control, 0o644)
    signals = shared_base / "signals"
    signals.mkdir()
    os.chmod(signals, 0o1777)
    room = shared_base / "private" / "class"   # the class folder itself is the instructor's alone
    attack = (ATTACK.replace("@CACHE@", repr(str(cache))).replace("@CONTROL@", repr(str(control)))
              .replace("@FIRST@", str(UIDS[0])).replace("@LAST@", str(UIDS[1])))
    for name, source in (("a-carol", SLOW_SOLUTION),
                         ("b-mallory", attack + mutant_text(COURSE, "heads", MUTANT) + STEAL)):
        (room / name / "heads").mkdir(parents=True)
        (room / name / "heads" / "heads.py").write_text(met(source, signals))
    os.chmod(shared_base / "private", 0o700)
    out = shared_base / "out"

    carol_folders: set[str] = set()   # where Carol's staged file lay while the batch ran, seen as root
    done = threading.Event()

    def watch():
        while not done.is_set():
            for staged in Path("/tmp").glob("grader-*/heads/heads.py"):
                try:
                    if CAROL in staged.read_text():
                        carol_folders.add(staged.parent.parent.name)
                except OSError:
                    pass
            time.sleep(0.1)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    env = {**{k: v for k, v in os.environ.items() if k != "GITHUB_STEP_SUMMARY"}, "GRADER_CACHE": str(cache)}
    try:
        graded = subprocess.run([sys.executable, "-m", "grader", "--course", str(course), "batch", str(room), "--out",
                                 str(out), "--jobs", "2", "--sandbox", "basic"], capture_output=True, text=True,
                                timeout=1200, cwd=ROOT, env=env)
    finally:
        done.set()
        watcher.join()
    assert graded.returncode == 0, graded.stderr

    carol = _heads(_report(out, "a-carol"))
    assert carol["status"] == "passed" and carol["score"] == carol["max_score"]
    mallory = _heads(_report(out, "b-mallory"))
    tail = mallory["run"]["output_tail"]
    assert "CONTROL READ" in tail, tail           # what every user may read, it reads
    assert "CACHE DENIED" in tail and "STOLE" not in tail, tail
    tried = tail.split("TRIED", 1)[1].split()
    assert carol_folders and carol_folders <= set(tried), (carol_folders, tail)   # it looked while Carol's was there
    assert sorted(os.listdir(signals)) == sorted([CAROL_IMPORTING, MALLORY_LOOKED])   # and they met
    # the secret it looked for was there: the reference observations, in the cache it could not enter
    assert list(cache.glob("references/heads-*/obs/*.json"))
    for folder in (cache, cache / "references", out):
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700, folder

    fails = tomllib.loads((MUTANT / "manifest.toml").read_text())["fails"]
    points = {c["id"]: c["max_points"] for c in mallory["criteria"]}
    assert mallory["score"] == sum(points.values()) - sum(points[c] for c in fails)
    assert sorted(c["id"] for c in mallory["criteria"] if c["status"] != "passed") == sorted(fails)


@pytest.mark.parametrize("where", ["local", "tcp://127.0.0.1:9"])
def test_cluster_refuses_the_basic_level(where, tmp_path):
    """A Dask worker runs what any client of its scheduler sends: at the basic level student code could be that
    client. The command says so and grades nothing, reaching no scheduler."""
    (tmp_path / "class" / "ivy").mkdir(parents=True)
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, "-m", "grader", "batch", str(tmp_path / "class"), "--out", str(out),
                           "--cluster", where, "--sandbox", "basic"], capture_output=True, text=True, cwd=ROOT,
                          timeout=120)
    assert done.returncode == 2, done.stderr
    assert "--cluster grades only with --sandbox strict" in done.stderr and "Dask scheduler" in done.stderr
    assert "Traceback" not in done.stderr and not out.exists()


def test_cluster_refusal_holds_for_the_batch_function_too(tmp_path):
    from grader.batch.run import run_batch
    from grader.batch.cluster import ClusterError
    from grader.course import load_course

    (tmp_path / "class").mkdir()
    with pytest.raises(ClusterError, match="只能与 --sandbox strict"):
        run_batch(load_course(ROOT), tmp_path / "class", tmp_path / "out", 1, False, "basic", "zh", cluster="local")


def test_basic_batch_refuses_a_class_folder_every_user_can_enter(shared_base):
    room = shared_base / "class"
    (room / "ivy" / "heads").mkdir(parents=True)
    shutil.copyfile(SOLUTION, room / "ivy" / "heads" / "heads.py")
    os.chmod(room, 0o755)
    out = shared_base / "out"
    command = [sys.executable, "-m", "grader", "batch", str(room), "--out", str(out), "--sandbox", "basic"]
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 2, done.stderr
    assert f"every user can enter {room}" in done.stderr and f"chmod o-rwx {room}" in done.stderr
    assert not out.exists()


def test_staged_files_and_folders_are_the_graders_alone_whatever_the_umask(tmp_path):
    from grader.sandbox.staging import stage

    (tmp_path / "sub" / "heads").mkdir(parents=True)
    shutil.copyfile(SOLUTION, tmp_path / "sub" / "heads" / "heads.py")
    old = os.umask(0)
    try:
        staged = stage(tmp_path / "sub", "heads", "heads.py", ROOT / "exercises" / "heads" / "heads.py",
                       tmp_path / "scratch" / "heads")
    finally:
        os.umask(old)
    assert stat.S_IMODE(staged.path.stat().st_mode) == 0o600
    assert stat.S_IMODE(staged.path.parent.stat().st_mode) == 0o700


def test_an_open_cache_left_by_an_older_grader_is_closed(tmp_path, monkeypatch):
    from grader.grading.pipeline import private_cache

    old = tmp_path / "cache" / "references" / "heads-0123"
    old.mkdir(parents=True)
    for folder in (tmp_path / "cache", old.parent, old):
        os.chmod(folder, 0o755)
    monkeypatch.setenv("GRADER_CACHE", str(tmp_path / "cache"))
    assert private_cache("references") == old.parent
    assert stat.S_IMODE((tmp_path / "cache").stat().st_mode) == 0o700
    assert stat.S_IMODE(old.parent.stat().st_mode) == 0o700


# heads.py that writes a file in Python's temporary folder as it is imported, as audits and notebooks commonly do
USES_TEMPFILE = '''
import os as _os
import tempfile as _tempfile

with _tempfile.TemporaryDirectory() as _folder:
    with open(_os.path.join(_folder, "scratch.txt"), "w") as _fh:
        _fh.write("a file of the student's own")
'''


@pytest.mark.slow
def test_student_code_can_use_pythons_temporary_folder_in_a_basic_batch(shared_base):
    """The worker chose Python's temporary folder as root (or its fork server did): the student's uid must choose
    its own, one it can write, or `tempfile` raises PermissionError in correct code. The solution itself is the
    control: graded the same way without the temporary file, it has full marks."""
    room = shared_base / "class"
    for student, text in (("uses_tempfile", USES_TEMPFILE + SOLUTION.read_text()), ("plain", SOLUTION.read_text())):
        (room / student / "heads").mkdir(parents=True)
        (room / student / "heads" / "heads.py").write_text(text)
    os.chmod(room, 0o700)
    out = shared_base / "out"
    command = [sys.executable, "-m", "grader", "batch", str(room), "--out", str(out), "--sandbox", "basic",
               "--jobs", "2"]
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    for student in ("plain", "uses_tempfile"):
        heads = _heads(_report(out, student))
        assert heads["score"] == heads["max_score"] > 0, (student, heads["message"])
