"""Pre-started sandboxes (the warm path starts each submission's sandbox before its request): one submission
each, the same report as a sandbox started for the submission, and none left running when the warm process is
killed."""

import os
import signal
import threading
import time
from pathlib import Path

import pytest

from conftest import ROOT, course_copy
from grader.course import CourseError, load_course
from grader.grading.pipeline import grade, judged, probe_submission
from grader.report.model import stable_view
from grader.sandbox.levels import choose, strict_missing
from grader.sandbox.session import SandboxSession
from grader.batch.warm import WarmGrader

# end to end: every test here grades in a sandbox (`pytest -m "not slow"` leaves them out)
pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(bool(strict_missing()), reason="the strict sandbox needs root and namespaces")]

LIMIT_S = 120
SETTLE_S = 60   # waits for what happens within moments on an idle machine: they end as soon as it has happened


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    return load_course(course_copy(tmp_path_factory.mktemp("course"), ["heads", "masks"]))


def submission(folder: Path, heads: str) -> Path:
    for ex in ("heads", "masks"):
        (folder / ex).mkdir(parents=True)
    (folder / "heads" / "heads.py").write_text(heads)
    (folder / "masks" / "masks.py").write_text((ROOT / "solutions" / "masks" / "masks.py").read_text())
    return folder


def prestarted(course) -> SandboxSession:
    session = SandboxSession(choose("strict"), {ex.id: ex.probes_file for ex in course.exercises}, course.uids)
    assert session.started, session.failure
    return session


def test_a_prestarted_sandbox_serves_one_submission_then_is_gone(course, tmp_path):
    student = submission(tmp_path / "student", (ROOT / "solutions" / "heads" / "heads.py").read_text())
    waiting = prestarted(course)
    assert not any(waiting.scratch.glob("*/*.py")), "nothing of a student's is there before the request"
    assert not any(waiting.scratch.glob(".probes/*/*")), "nor any probe code"
    for folder in waiting.lease.group.folders if waiting.lease.group else []:   # it warms on the CPU left over
        shares = Path(folder) / "cpu.shares"
        if shares.is_file():
            assert int(shares.read_text()) < 1024
    probed = probe_submission(course, student, ["heads", "masks"], choose("strict"), waiting)
    try:
        assert waiting.taken and waiting.worker.proc.poll() is not None, "killed once its submission is probed"
        assert not waiting.serves(probed.jobs, choose("strict"))
        assert waiting.take(probed.jobs, choose("strict")) is None, "it serves one submission only"
    finally:
        report = judged(probed)
    assert report.percent == 100


def test_a_prestarted_sandbox_grades_as_a_sandbox_started_for_the_submission(course, tmp_path):
    # A partly wrong submission, so that the comparison covers failed verdicts and their messages too.
    student = submission(tmp_path / "student", "import torch\n\ndef split_heads(x, n_heads):\n    return x\n\n"
                                                "def merge_heads(x):\n    return x\n")
    ids = ["heads", "masks"]
    waiting = prestarted(course)
    warm = judged(probe_submission(course, student, ids, choose("strict"), waiting)).to_dict()
    assert waiting.taken
    cold = grade(course, student, ids, choose("strict")).to_dict()
    assert 0 < cold["percent"] < 100
    assert stable_view(warm) == stable_view(cold)


def test_a_prestarted_sandbox_for_other_exercises_is_not_used(course, tmp_path):
    student = submission(tmp_path / "student", (ROOT / "solutions" / "heads" / "heads.py").read_text())
    waiting = SandboxSession(choose("strict"), {"masks": course.exercise("masks").probes_file}, course.uids)
    report = judged(probe_submission(course, student, ["heads", "masks"], choose("strict"), waiting))
    assert waiting.worker.proc.poll() is not None
    assert report.percent == 100


def _descendants(pid: int) -> set[int]:
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", "rb") as fh:
                    parents[int(entry)] = int(fh.read().rsplit(b")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
    found, frontier = set(), {pid}
    while frontier:
        frontier = {child for child, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return fh.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except OSError:
        return False


def _uid(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/status") as fh:
            return next(int(line.split()[1]) for line in fh if line.startswith("Uid:"))
    except (OSError, StopIteration, ValueError):
        return None


def _cmdline(pid: int) -> bytes:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return fh.read()
    except OSError:
        return b""


def _cgroup(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/cgroup") as fh:
            for line in fh:
                path = line.strip().split(":", 2)[2]
                if "transformer-grader" in path:
                    return path
    except OSError:
        pass
    return None


def test_killing_the_warm_process_mid_grading_leaves_no_sandbox_running(tmp_path):
    # A long time limit: the student's code would keep its sandbox busy well past the few seconds waited below.
    course = load_course(course_copy(tmp_path / "course", ["heads", "masks"], timeout_s={"heads": 120}))
    student = submission(tmp_path / "student", "import time\ntime.sleep(120)\n")
    warm = WarmGrader(course.root, "strict")
    grading = threading.Thread(target=lambda: _grade_quietly(warm, student), daemon=True)
    try:
        grading.start()
        deadline = time.monotonic() + LIMIT_S
        student_code = []
        while not student_code and time.monotonic() < deadline:
            time.sleep(0.2)
            if warm._proc is not None:
                low, high = course.uids
                student_code = [p for p in _descendants(warm._proc.pid) if low <= (_uid(p) or -1) <= high]
        assert student_code, "the student's code never started"
        sandboxes = _descendants(warm._proc.pid)
        groups = {g for g in map(_cgroup, sandboxes) if g}
        os.kill(warm._proc.pid, signal.SIGKILL)
        deadline = time.monotonic() + SETTLE_S
        while any(map(_alive, sandboxes)) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not [p for p in sandboxes if _alive(p)], "a sandbox outlived its warm process"
        for group in groups:
            try:
                procs = (Path("/sys/fs/cgroup") / group.lstrip("/") / "cgroup.procs").read_text().split()
            except FileNotFoundError:
                continue
            assert not [p for p in procs if _alive(int(p))], f"processes left in {group}"
    finally:
        warm.close()


def test_killing_the_warm_process_at_the_basic_level_leaves_no_student_process(tmp_path):
    # No pid namespace here: the student's child dies with its worker, and what the child started in a session of
    # its own is swept with the grading uids once the warm process is gone.
    course = load_course(course_copy(tmp_path / "course", ["heads", "masks"], timeout_s={"heads": 120}))
    student = submission(tmp_path / "student", "import subprocess, time\n"
                         "subprocess.Popen(['sleep', '120'], start_new_session=True)\ntime.sleep(120)\n")
    warm = WarmGrader(course.root, "basic")
    grading = threading.Thread(target=lambda: _grade_quietly(warm, student), daemon=True)
    low, high = course.uids
    try:
        grading.start()
        deadline = time.monotonic() + LIMIT_S
        student_code = []
        while len(student_code) < 2 and time.monotonic() < deadline:   # the child and the sleep it started
            time.sleep(0.2)
            student_code = [p for p in _pids() if low <= (_uid(p) or -1) <= high and _alive(p)]
        assert len(student_code) >= 2, f"the student's code never started its process: {student_code}"
        os.kill(warm._proc.pid, signal.SIGKILL)
        deadline = time.monotonic() + SETTLE_S
        while any(map(_alive, student_code)) and time.monotonic() < deadline:
            time.sleep(0.1)
        left = [(p, _cmdline(p)) for p in student_code if _alive(p)]
        assert not left, f"student processes outlived their warm process: {left}"
    finally:
        warm.close()


def _fork_server(pid: int) -> bool:
    """Whether the process is a fork server or what started its box (they live as long as their warm process; the
    workers it forks keep its command line, but their parent has it too)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            parent = int(fh.read().rsplit(b")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return False
    command = _cmdline(pid)
    return b"\0--serve\0" in command or (b"grader.worker.spawn" in command
                                          and b"grader.worker.spawn" not in _cmdline(parent))


def _pids() -> list[int]:
    return [int(entry) for entry in os.listdir("/proc") if entry.isdigit()]


def _grade_quietly(warm: WarmGrader, student: Path) -> None:
    try:
        warm.grade(student, ["heads", "masks"], "en", LIMIT_S)
    except Exception:  # noqa: BLE001 - the process is killed under it: that is the test
        pass


def test_gradings_in_one_process_share_its_judging_server_and_agree(course, tmp_path):
    """The judge is started once per process (it imports torch, pytest and the criteria) and judges each grading
    in a child of its own: a second grading uses the same server and gets the same report."""
    from grader.grading.pipeline import judge_for

    student = submission(tmp_path / "student",
                         "import torch\n\ndef split_heads(x, n_heads):\n    raise ValueError('no')\n")
    ids = ["heads", "masks"]
    first = grade(course, student, ids, choose("strict")).to_dict()
    server = judge_for(course).pid
    second = grade(course, student, ids, choose("strict")).to_dict()
    assert server is not None and judge_for(course).pid == server
    assert 0 < first["percent"] < 100
    assert stable_view(first) == stable_view(second)


def test_a_submission_that_fails_before_its_probes_leaves_its_prestarted_sandbox_dead(course, tmp_path):
    waiting = prestarted(course)
    with pytest.raises(CourseError):
        probe_submission(course, tmp_path, ["no_such_exercise"], choose("strict"), waiting)
    assert waiting.taken and waiting.worker.proc.poll() is not None and not waiting.scratch.exists()


def test_no_sandbox_waits_after_the_last_submission(course, tmp_path):
    """A request that says no other submission follows leaves no pre-started sandbox importing torch for nobody;
    one that says another follows does leave one waiting (the positive control)."""
    student = submission(tmp_path / "student", (ROOT / "solutions" / "heads" / "heads.py").read_text())
    warm = WarmGrader(course.root, "strict")

    def waiting_sandboxes(seconds: float) -> list[int]:
        deadline = time.monotonic() + seconds
        found: list[int] = []
        while not found and time.monotonic() < deadline:
            found = [p for p in _descendants(warm._proc.pid)
                     if _alive(p) and b"grader.worker" in _cmdline(p) and not _fork_server(p)]
            time.sleep(0.2)
        return found

    try:
        assert warm.grade(student, ["heads", "masks"], "en", LIMIT_S, more=True).get("files")
        # Waited for as long as it takes to appear (on a busy machine, seconds); its absence is watched for as long
        # as a sandbox started after the reply takes to show up on an idle one.
        assert waiting_sandboxes(SETTLE_S), "no sandbox waits although another submission was announced"
        assert warm.grade(student, ["heads", "masks"], "en", LIMIT_S, more=False).get("files")
        left = waiting_sandboxes(10)
        assert not left, f"a sandbox was pre-started after the last submission: {[_cmdline(p)[:300] for p in left]}"
    finally:
        warm.close()
