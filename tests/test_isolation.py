"""Isolation (strict sandbox, run as root as CI does): student code sees only its own file, under a uid of its
own, with capped scratch; nothing of the course, the class or the host. Each test is one attack that must
gain nothing; where a test looks for an absence, a positive control shows that the same look finds what it
seeks when it is there. The tests about a course's files (its references, probes and seed) run on the bundled
course, on a copy of it outside the checkout, and on each course folder named with `pytest --course DIR`: a
course's probe code is staged the same way wherever the course is."""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from conftest import ROOT, course_copy, course_outside
from grader.course import LIB, load_course
from grader.grading.rejudge import KEPT_FILE, STORE
from grader.sandbox import scratch, uids
from grader.sandbox.levels import strict_missing
from grader.sandbox.staging import stage

# end to end: every test here grades in a sandbox (`pytest -m "not slow"` leaves them out)
pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(bool(strict_missing()), reason=f"strict sandbox unavailable: {strict_missing()}")]

EXPLORER = Path(__file__).parent / "isolation" / "explorer.py"
SOLUTION_HEADS = ROOT / "solutions" / "heads" / "heads.py"


def _encoded(values: list[str]) -> str:
    return ",".join(base64.b64encode(v.encode()).decode() for v in values)


@dataclass(frozen=True)
class Course:
    """A course the course-parametrised tests grade (`course` fixture): where it is, the exercise whose solution
    turns hostile, and the ones graded beside it."""
    root: Path
    host: str
    neighbours: tuple[str, ...]

    def solution(self, exercise_id: str) -> Path:
        course = load_course(self.root)
        return course.solution(course.exercise(exercise_id))


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """The bundled course, a copy of it outside the checkout, and each course folder `--course DIR` names."""
    if "course" in metafunc.fixturenames:
        named = [str(folder) for folder in metafunc.config.getoption("course")]
        metafunc.parametrize("course", ["bundled", "outside", *named], indirect=True)


@pytest.fixture(scope="module")
def _outside():
    """The bundled course copied to a folder of its own under /tmp, which every uid may enter (at the basic level
    student code reads what every user can: the positive controls need the course's files to be there to find)."""
    top = Path(tempfile.mkdtemp(prefix="grader-course-", dir="/tmp"))
    os.chmod(top, 0o755)
    yield course_outside(top / "course")
    shutil.rmtree(top, ignore_errors=True)


@pytest.fixture
def course(request, _outside) -> Course:
    if request.param == "bundled":
        return Course(ROOT, "masks", ("heads", "attention"))
    if request.param == "outside":
        return Course(_outside, "masks", ("heads", "attention"))
    ids = [ex.id for ex in load_course(Path(request.param)).exercises]
    return Course(Path(request.param).resolve(), ids[0], tuple(ids[1:3]))


def _grade(submission: Path, out: Path, *extra: str, env: dict | None = None,
           course: Course | None = None) -> subprocess.CompletedProcess:
    environment = {k: v for k, v in os.environ.items() if k != "GITHUB_STEP_SUMMARY"}
    environment.update(env or {})
    chosen = ["--course", str(course.root)] if course is not None else []
    return subprocess.run([sys.executable, "-m", "grader", *chosen, "grade", str(submission), "--out", str(out),
                           *extra], capture_output=True, text=True, timeout=600, cwd=ROOT, env=environment)


def _report(out: Path) -> dict:
    return json.loads((out / "report.json").read_text())


def _exercise(report: dict, exercise_id: str) -> dict:
    return next(e for e in report["exercises"] if e["id"] == exercise_id)


@pytest.fixture
def classroom(tmp_path):
    """A class folder outside the checkout (as under /srv), with a classmate's correct file and a report folder
    beside it, all with default modes."""
    room = tmp_path / "srv-class"
    classmate = room / "bob" / "heads"
    classmate.mkdir(parents=True)
    shutil.copyfile(SOLUTION_HEADS, classmate / "heads.py")
    (room / "gradebook").mkdir()
    (room / "gradebook" / "grades.csv").write_text("bob,100\n")
    os.chmod(tmp_path, 0o755)
    return room


def _explorer(classroom: Path, out: Path, course: Course | None = None) -> Path:
    """Alice's submission: the explorer, looking for the checkout, the course, the class, the reports and Bob."""
    root, exercise = (course.root, course.neighbours[0]) if course else (ROOT, "heads")
    solution = course.solution(exercise) if course else ROOT / "solutions" / "heads" / "heads.py"
    needles = [str(ROOT), str(root), str(classroom), str(out), str(classroom / "alice"), "srv-class",
               str(Path(sys.prefix))]
    secrets = [str(solution), str(root / "course.toml"), str(solution.parent / "probes.py"),
               str(solution.parent / "criteria.py"), str(classroom / "bob" / "heads" / "heads.py"),
               str(classroom / "gradebook" / "grades.csv"), "/etc/shadow"]
    source = EXPLORER.read_text().replace("@NEEDLES@", _encoded(needles)).replace("@SECRETS@", _encoded(secrets))
    folder = classroom / "alice" / exercise
    folder.mkdir(parents=True)
    (folder / solution.name).write_text(source)
    return classroom / "alice"


def test_explorer_finds_no_host_path_course_file_or_classmate(classroom, course):
    out = classroom / "reports" / "alice"
    exercise = course.neighbours[0]
    done = _grade(_explorer(classroom, out, course), out, "--exercise", exercise, course=course)
    assert done.returncode == 0, done.stderr
    tail = _exercise(_report(out), exercise)["run"]["output_tail"]
    assert "EXPLORED" in tail, tail                      # it ran to its end
    explored_paths = int(tail.split("EXPLORED ")[1].split()[0])
    assert explored_paths > 20, tail                      # and saw a real file system
    assert "LEAK" not in tail and "READ" not in tail, tail
    assert _exercise(_report(out), exercise)["score"] == 0


def test_explorer_positive_control_finds_host_paths_without_the_box(classroom, course):
    """The same explorer, graded at the basic level (no box), does report what it can reach."""
    out = classroom / "reports" / "alice"
    exercise = course.neighbours[0]
    done = _grade(_explorer(classroom, out, course), out, "--exercise", exercise, "--sandbox", "basic",
                  course=course)
    assert done.returncode == 0, done.stderr
    tail = _exercise(_report(out), exercise)["run"]["output_tail"]
    assert "EXPLORED" in tail and "LEAK" in tail, tail


def _linked_submission(root: Path, target: Path, exercise: str = "heads") -> Path:
    root.mkdir(parents=True)
    (root / exercise).symlink_to(target, target_is_directory=True)
    return root


@pytest.mark.parametrize("how", ["absolute", "classmate", "proc_self_cwd", "file"])
def test_symlinked_exercise_is_refused_not_graded_as_its_target(tmp_path, classroom, how):
    if how == "absolute":
        submission = _linked_submission(tmp_path / "alice", ROOT / "solutions" / "heads")
    elif how == "classmate":
        submission = _linked_submission(tmp_path / "alice", classroom / "bob" / "heads")
    elif how == "proc_self_cwd":  # the grader's working folder is the checkout: /proc/self/cwd/solutions/...
        submission = _linked_submission(tmp_path / "alice", Path("/proc/self/cwd/solutions/heads"))
    else:
        (tmp_path / "alice" / "heads").mkdir(parents=True)
        (tmp_path / "alice" / "heads" / "heads.py").symlink_to(SOLUTION_HEADS)
        submission = tmp_path / "alice"
    out = tmp_path / "out"
    done = _grade(submission, out, "--exercise", "heads")
    assert done.returncode == 0, done.stderr
    heads = _exercise(_report(out), "heads")
    assert heads["score"] == 0 and heads["status"] == "error", heads["message"]
    assert "symbolic link" in heads["message"]["en"] and "submit plain files" in heads["message"]["en"]
    assert "符号链接" in heads["message"]["zh"]


def test_staging_refuses_a_link_in_any_component(tmp_path):
    """Unit level: the folder, the file, and a folder swapped for a link are all refused; a plain file is copied."""
    plain = tmp_path / "plain" / "heads"
    plain.mkdir(parents=True)
    shutil.copyfile(SOLUTION_HEADS, plain / "heads.py")
    stub = ROOT / "exercises" / "heads" / "heads.py"
    staged = stage(tmp_path / "plain", "heads", "heads.py", stub, tmp_path / "w1")
    assert staged.path is not None and staged.path.read_bytes() == SOLUTION_HEADS.read_bytes()
    linked = tmp_path / "linked"
    linked.mkdir()
    (linked / "heads").symlink_to(plain)
    refused = stage(linked, "heads", "heads.py", stub, tmp_path / "w2")
    assert refused.path is None and refused.status == "error" and "symbolic link" in refused.message.render("en")


SYSV_SOURCE = '''
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
libc.shmget.argtypes = [ctypes.c_int, ctypes.c_size_t, ctypes.c_int]
IPC_CREAT = 0o1000
shm = [libc.shmget(0x5EC0DE00 + i, 1 << 30, IPC_CREAT | 0o666) for i in range(4)]
msg = libc.msgget(0x5EC0DE10, IPC_CREAT | 0o666)
print("SYSV", shm, msg, flush=True)

def split_heads(x, n_heads):
    raise ValueError("not an implementation")

def merge_heads(x):
    raise ValueError("not an implementation")
'''


def _sysv_keys() -> set[str]:
    keys = set()
    for table in ("/proc/sysvipc/shm", "/proc/sysvipc/msg"):
        with open(table) as fh:
            keys |= {line.split()[0] for line in fh.readlines()[1:] if line.strip()}
    return keys


def test_sysv_objects_die_with_the_grading(tmp_path):
    before = _sysv_keys()
    (tmp_path / "sub" / "heads").mkdir(parents=True)
    (tmp_path / "sub" / "heads" / "heads.py").write_text(SYSV_SOURCE)
    out = tmp_path / "out"
    done = _grade(tmp_path / "sub", out, "--exercise", "heads")
    assert done.returncode == 0, done.stderr
    tail = _exercise(_report(out), "heads")["run"]["output_tail"]
    created = tail.split("SYSV ")[1].split()
    assert created[0] != "[-1," and created[-1] != "-1", tail   # it did create them (in its own namespace)
    assert _sysv_keys() - before == set()


DISK_SOURCE = '''
import os
chunk = b"x" * (1 << 20)
written = 0
try:
    for i in range(1200):            # 1.2 GB in 12 MB files, half in its folder, half in /tmp
        folder = "." if i % 2 else "/tmp"
        with open(os.path.join(folder, f"fill-{i // 12}.bin"), "ab") as fh:
            fh.write(chunk)
        written += 1
finally:
    print("WROTE_MB", written, flush=True)

def split_heads(x, n_heads):
    raise ValueError("not an implementation")

def merge_heads(x):
    raise ValueError("not an implementation")
'''


def test_disk_fill_is_stopped_by_the_capped_scratch(tmp_path):
    (tmp_path / "sub" / "heads").mkdir(parents=True)
    (tmp_path / "sub" / "heads" / "heads.py").write_text(DISK_SOURCE)
    out = tmp_path / "out"
    watched = [Path(p) for p in {"/tmp", "/", str(tmp_path)}]
    start = {p: shutil.disk_usage(p).used for p in watched}
    peak = {p: 0 for p in watched}
    stop = threading.Event()

    def watch():
        while not stop.is_set():
            for p in watched:
                peak[p] = max(peak[p], shutil.disk_usage(p).used - start[p])
            time.sleep(0.05)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        done = _grade(tmp_path / "sub", out, "--exercise", "heads")
    finally:
        stop.set()
        watcher.join()
    assert done.returncode == 0, done.stderr
    heads = _exercise(_report(out), "heads")
    assert heads["run"]["limit"] == "disk", heads["run"]
    written = int(heads["run"]["output_tail"].split("WROTE_MB ")[1].split()[0])
    assert written < 300, written                           # stopped near the 256 MB cap, not at 1.2 GB
    assert "scratch space" in json.dumps(heads), heads["message"]
    assert max(peak.values()) < 700 << 20, peak


# The top of course.toml's uid range: gradings running meanwhile (the other test worker's, another suite's) claim
# the first free uids, from the bottom, and would leave this test none of a range down there.
OWN_UIDS = (61996, 61999)


def test_each_concurrent_grading_holds_a_uid_of_its_own():
    first = uids.claim(*OWN_UIDS)
    second = uids.claim(*OWN_UIDS)
    try:
        assert first.uid != second.uid
    finally:
        first.release()
        second.release()
    again = uids.claim(*OWN_UIDS)   # released uids are free again
    try:
        assert again.uid == first.uid
    finally:
        again.release()


def test_no_free_uid_is_a_grader_error_that_costs_nothing(tmp_path):
    """Every uid of the course's range held by others: the grader's fault, exit 3, status grader_error."""
    course = tmp_path / "course"
    shutil.copytree(ROOT, course, ignore=shutil.ignore_patterns(".venv", ".git", "reports", "tests", "__pycache__"))
    text = (course / "course.toml").read_text().replace("uids = [61000, 61999]", "uids = [61990, 61991]")
    (course / "course.toml").write_text(text)
    held = [uids.claim(61990, 61991), uids.claim(61990, 61991)]
    try:
        out = tmp_path / "out"
        done = subprocess.run([sys.executable, "-m", "grader", "--course", str(course), "grade",
                               str(ROOT / "solutions"), "--exercise", "heads", "--out", str(out)],
                              capture_output=True, text=True, timeout=600, cwd=ROOT)
    finally:
        for claim in held:
            claim.release()
    assert done.returncode == 3, (done.returncode, done.stderr)
    assert "grading incomplete" in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
    heads = _exercise(_report(out), "heads")
    assert heads["status"] == "grader_error"
    assert all(c["status"] == "grader_error" for c in heads["criteria"])
    assert "grader failed" in heads["criteria"][0]["message"]["en"]
    assert "评分器" in heads["criteria"][0]["message"]["zh"]


def test_stale_scratch_of_a_killed_grading_is_swept(tmp_path):
    stale = tmp_path / "grader-abcd1234"
    stale.mkdir()
    (stale / scratch.LOCK).write_text("")
    (stale / "heads").mkdir()
    live = scratch.new_scratch()   # held by this process: never swept
    try:
        assert scratch.sweep(tmp_path) == [stale]
        assert not stale.exists()
        assert scratch.sweep(live.parent) == [] or live.exists()
        assert live.exists()
    finally:
        scratch.remove_scratch(live)


UID_SOURCE = '''
import os
print("UID", os.getuid(), os.getgid(), os.getgroups(), flush=True)

def split_heads(x, n_heads):
    raise ValueError("not an implementation")

def merge_heads(x):
    raise ValueError("not an implementation")
'''


@pytest.mark.parametrize("level", ["strict", "basic"])
def test_student_code_runs_as_a_grading_uid_with_no_groups(tmp_path, level):
    """As root, both levels run student code as a uid of the course's range, never as root or a shared user."""
    (tmp_path / "sub" / "heads").mkdir(parents=True)
    (tmp_path / "sub" / "heads" / "heads.py").write_text(UID_SOURCE)
    out = tmp_path / "out"
    done = _grade(tmp_path / "sub", out, "--exercise", "heads", "--sandbox", level)
    assert done.returncode == 0, done.stderr
    report = _report(out)
    uid, gid, groups = _exercise(report, "heads")["run"]["output_tail"].split("UID ")[1].split(maxsplit=2)
    assert 61000 <= int(uid) <= 61999 and gid == uid and groups.startswith("[]"), (uid, gid, groups)
    assert report["sandbox"]["level"] == level and report["sandbox"]["layers"]["own_uid"]


FORK_BOMB = '''
import os
while True:
    try:
        os.fork()
    except OSError:
        pass
'''


def test_fork_bombs_in_a_batch_cost_a_concurrent_correct_submission_nothing(tmp_path):
    """`grader batch --jobs 2`: two fork bombs graded beside (and concurrently with) a correct submission. The bombs
    are in `heads`, stopped by its short timeout; the correct submission is Carol's `masks`, with the course's own
    timeout: a healthy exercise next to two bombs on a busy machine takes many times its CPU time in wall time."""
    course = course_copy(tmp_path / "course", ["heads", "masks"], timeout_s={"heads": 8})
    room = tmp_path / "class"
    masks = ROOT / "solutions" / "masks" / "masks.py"
    for name, exercise, source in (("alice", "heads", FORK_BOMB), ("bob", "heads", FORK_BOMB),
                                   ("carol", "masks", masks.read_text())):
        (room / name / exercise).mkdir(parents=True)
        (room / name / exercise / f"{exercise}.py").write_text(source)
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, "-m", "grader", "--course", str(course), "batch", str(room),
                           "--out", str(out), "--jobs", "2"], capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    reports = {name: _exercise(json.loads((out / "students" / name / "report.json").read_text()), exercise)
               for name, exercise in (("alice", "heads"), ("bob", "heads"), ("carol", "masks"))}
    assert reports["carol"]["status"] == "passed" and reports["carol"]["score"] == reports["carol"]["max_score"]
    for bomb in ("alice", "bob"):
        assert reports[bomb]["score"] == 0 and reports[bomb]["status"] in ("timeout", "crashed"), reports[bomb]


def test_an_observation_fifo_is_refused_without_blocking(tmp_path):
    """A FIFO where an observation belongs (student code can mkfifo at the basic level) reads as absent at once;
    the regular file beside it is read."""
    from grader.worker.protocol import read_capped

    os.mkfifo(tmp_path / "_import.json")
    (tmp_path / "probe.json").write_bytes(b"{}")
    assert read_capped(tmp_path, "_import.json", 1 << 20) is None
    assert read_capped(tmp_path, "probe.json", 1 << 20) == b"{}"
    assert read_capped(tmp_path, "probe.json", 1) is None      # larger than the cap


HUNTER = Path(__file__).parent / "isolation" / "hunter.py"
KEPT = (STORE, KEPT_FILE)   # what a grading keeps for `--rejudge` beside its reports
SECRET_SEED = 738204519364281   # the course seed of these gradings: 15 digits, which no output meets by chance
STUDENT_FORMATS = "json,html,md,gradescope,junit"


def _hunting_submission(folder: Path, course: Course) -> Path:
    """A correct file of the course's host exercise that hunts for other exercises' probe code and for the course
    seed (tests/isolation/hunter.py), between correct neighbours."""
    for exercise in course.neighbours:
        solution = course.solution(exercise)
        (folder / exercise).mkdir(parents=True)
        shutil.copyfile(solution, folder / exercise / solution.name)
    solution = course.solution(course.host)
    solutions = solution.parent.parent
    others = sorted({ex.id for ex in load_course(course.root).exercises} - {course.host}
                    | {p.stem for p in (solutions / LIB).glob("*.py")})
    (folder / course.host).mkdir()
    hunter = HUNTER.read_text().replace("@DEES@", str(SECRET_SEED)[::-1]).replace("@OWN@", course.host)
    hunter = hunter.replace("@OTHERS@", repr(others)).replace("@SOLUTIONS@", str(solutions))
    (folder / course.host / solution.name).write_text(solution.read_text() + hunter)
    return folder


def _exercises(course: Course) -> list[str]:
    return [arg for exercise in (course.host, *course.neighbours) for arg in ("--exercise", exercise)]


@pytest.mark.parametrize("level", ["strict", "basic"])
def test_no_other_exercises_probe_code_nor_the_course_seed_reaches_student_code(tmp_path, level, course):
    """Student code finds no other exercise's probe module, loaded or importable, and no copy of the course seed
    in its memory; in the box, no probe code on disk either. The positive controls: the same search finds the
    exercise's own probe module loaded, and the running probe's own seed in memory; at the basic level (no box) the
    file search finds the grader's probe sources, which that level does not hide."""
    out = tmp_path / "out"
    done = _grade(_hunting_submission(tmp_path / "alice", course), out, *_exercises(course), "--sandbox", level,
                  env={"GRADER_SEED": str(SECRET_SEED)}, course=course)
    assert done.returncode == 0, done.stderr
    host = _exercise(_report(out), course.host)
    tail = host["run"]["output_tail"]
    assert tail.count("HUNTED") == 2, tail                            # both hunts ran to their end
    assert f"OWN grader.probes.{course.host}" in tail, tail          # the module search works
    assert re.search(r"PROBE-SEED \d+ FOUND", tail), tail            # the memory search works
    leaks = [line for line in tail.splitlines() if line.startswith("LEAK")]
    if level == "strict":
        assert not leaks, tail
    else:
        assert any("files of probe code" in line for line in leaks), tail   # the file search works
        assert not [line for line in leaks if "seed" in line or "loaded" in line], tail
    assert host["score"] == host["max_score"], host["message"]


def test_no_student_visible_output_names_the_course_seed(tmp_path, course):
    """Every file a grading writes for students (report.json, report.html, scorecard.md, Gradescope's results.json,
    junit.xml) and everything it prints hold no trace of the course seed. Positive control: the same search finds
    the running probe's seed, which the student's code printed into its output tail."""
    out = tmp_path / "out"
    done = _grade(_hunting_submission(tmp_path / "alice", course), out, *_exercises(course), "--format",
                  STUDENT_FORMATS, env={"GRADER_SEED": str(SECRET_SEED)}, course=course)
    assert done.returncode == 0, done.stderr
    # every file a student may be shown; the observations kept for `--rejudge` stay with the instructor
    written = {path.name: path.read_text(encoding="utf-8") for path in out.iterdir() if path.name not in KEPT}
    assert {"report.json", "report.html", "scorecard.md", "results.json", "junit.xml"} <= set(written), sorted(written)
    assert str(SECRET_SEED) not in (out / KEPT_FILE).read_text(encoding="utf-8")   # nor is it in what is kept
    shown = {**written, "stdout": done.stdout, "stderr": done.stderr}
    for name, text in shown.items():
        assert str(SECRET_SEED) not in text, f"{name} shows the course seed"
    probe_seed = re.search(r"PROBE-SEED (\d+) FOUND",
                           _exercise(_report(out), course.host)["run"]["output_tail"]).group(1)
    assert probe_seed in written["report.json"] and probe_seed in written["report.html"]
