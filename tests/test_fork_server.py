"""The fork server (grader/worker/spawn.py, grader/sandbox/forkserver.py): a batch whose workers are forked from one
process that imported torch once grades exactly as one whose workers are fresh processes, and nothing of one
submission reaches the next through it."""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import ROOT, course_copy
from grader.report.model import stable_view
from grader.sandbox.levels import strict_missing

# end to end: every test here grades whole batches in the strict sandbox (`pytest -m "not slow"` leaves them out)
pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(bool(strict_missing()), reason="the fork server needs the strict sandbox")]

ISOLATION = Path(__file__).parent / "isolation"
EXERCISES = ["heads", "masks"]
# What legitimately differs between two gradings of one submission: when, and how long (README: same submission,
# same report, timestamps and durations aside). Everything else of a run (its exit, signal, limit, output) stays.
RUN_TIMINGS = ("wall_s", "cpu_s", "max_rss_mb")
TIMES = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\+00:00|Z)?|\d+(\.\d+)?\s?(s|ms|MB)\b")


def _solution(ex: str) -> str:
    return (ROOT / "solutions" / ex / f"{ex}.py").read_text()


def _write(room: Path, name: str, files: dict[str, str]) -> None:
    for ex, text in files.items():
        (room / name / ex).mkdir(parents=True)
        (room / name / ex / f"{ex}.py").write_text(text)


SERVER_BOOT = b"from grader.worker.spawn import serve"     # grader/sandbox/box.py's boots, in a process's argv
WORKER_BOOT = b"from grader.worker.__main__ import main"


def _batch(course: Path, room: Path, out: Path, fork_server: bool, jobs: int = 2) -> None:
    """Grade the class; while it runs, watch the machine's processes for the fork server and for fresh workers, so
    that each batch is shown to have taken the path it was meant to (a fork server's workers keep its argv)."""
    env = {k: v for k, v in os.environ.items() if k != "GITHUB_STEP_SUMMARY"}
    env["GRADER_FORK_SERVER"] = "1" if fork_server else "0"
    seen = {SERVER_BOOT: 0, WORKER_BOOT: 0}
    errors = out.parent / f"{out.name}.stderr"
    with errors.open("wb") as log, subprocess.Popen(
            [sys.executable, "-m", "grader", "--course", str(course), "batch", str(room), "--out", str(out), "--jobs",
             str(jobs)], stdout=subprocess.DEVNULL, stderr=log, cwd=ROOT, env=env) as batch:
        mine = {batch.pid}
        shared: set[str] = set()
        while batch.poll() is None:
            found = _processes()
            argvs = {pid: argv for pid, _, argv in found}
            for pid, parent, argv in found:
                if parent in mine:
                    mine.add(pid)
                    for boot in seen:
                        seen[boot] += boot in argv
                    if SERVER_BOOT in argv and SERVER_BOOT not in argvs.get(parent, b""):   # the server itself
                        shared |= _shared_writable(pid)
            time.sleep(0.1)
    assert batch.returncode == 0, errors.read_text()[-3000:]
    if fork_server:
        assert seen[SERVER_BOOT] and not seen[WORKER_BOOT], seen
        # Its children's writes never reach it: it maps nothing both shared and writable, which a fork would share.
        assert not shared, shared
    else:
        assert seen[WORKER_BOOT] and not seen[SERVER_BOOT], seen


def test_the_shared_mapping_look_sees_one():
    """The positive control of the batches' look at the server's mappings: an anonymous shared one of this process."""
    import mmap

    with mmap.mmap(-1, mmap.PAGESIZE) as shared:   # MAP_SHARED, writable
        shared[0] = 1
        assert _shared_writable(os.getpid())


def _shared_writable(pid: int) -> set[str]:
    try:
        with open(f"/proc/{pid}/maps") as fh:
            return {line.strip() for line in fh if line.split()[1][1] == "w" and line.split()[1][3] == "s"}
    except (OSError, IndexError):
        return set()


def _processes() -> list[tuple[int, int, bytes]]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", "rb") as fh:
                    parent = int(fh.read().rsplit(b")", 1)[1].split()[1])
                with open(f"/proc/{entry}/cmdline", "rb") as fh:
                    found.append((int(entry), parent, fh.read()))
            except (OSError, ValueError, IndexError):
                continue
    return found


def _report_view(path: Path) -> dict:
    report = json.loads(path.read_text())
    view = stable_view(report)
    view["runs"] = {e["id"]: {k: v for k, v in e.get("run", {}).items() if k not in RUN_TIMINGS}
                    for e in report["exercises"]}
    return view


def _rendered(path: Path) -> str:
    return TIMES.sub("<time>", path.read_text())


def _run_tail(out: Path, student: str, exercise: str) -> str:
    report = json.loads((out / "students" / student / "report.json").read_text())
    return next(e for e in report["exercises"] if e["id"] == exercise)["run"]["output_tail"]


def test_a_fork_server_batch_grades_byte_for_byte_as_fresh_sandboxes(tmp_path):
    course = course_copy(tmp_path / "course", EXERCISES)
    room = tmp_path / "class"
    shutil.copytree(ROOT / "examples" / "submissions" / "sample", room / "a_sample")
    _write(room, "b_solution", {ex: _solution(ex) for ex in EXERCISES})
    _write(room, "c_mutant", {"heads": "import torch\n\ndef split_heads(x, n_heads):\n    return x\n\n"
                                       "def merge_heads(x):\n    return x\n",
                              "masks": _solution("masks").replace(".tril()", ".triu()")})
    _write(room, "d_crash", {"heads": "print('said at import', flush=True)\nraise RuntimeError('at import')\n",
                             "masks": "import os\nos._exit(7)\n"})
    fresh, forked = tmp_path / "fresh", tmp_path / "forked"
    _batch(course, room, fresh, fork_server=False)
    _batch(course, room, forked, fork_server=True)

    assert (fresh / "grades.csv").read_bytes() == (forked / "grades.csv").read_bytes()
    students = sorted(p.name for p in (fresh / "students").iterdir())
    assert students == sorted(p.name for p in (forked / "students").iterdir()) and len(students) == 4
    scores = set()
    for student in students:
        a, b = fresh / "students" / student, forked / "students" / student
        assert _report_view(a / "report.json") == _report_view(b / "report.json"), student
        assert sorted(p.name for p in a.iterdir()) == sorted(p.name for p in b.iterdir()), student
        for name in ("report.html", "scorecard.md"):
            if (a / name).exists():
                assert _rendered(a / name) == _rendered(b / name), f"{student}/{name}"
        scores.add(json.loads((a / "report.json").read_text())["percent"])
    assert len(scores) >= 3, f"the class covers full, partial and no marks: {scores}"
    crashed = _run_tail(forked, "d_crash", "heads")
    assert "said at import" in crashed, crashed   # what the student's code printed reaches its report


def test_a_submission_finds_no_trace_of_the_one_before(tmp_path):
    """One warm process grades a submission that leaves marks everywhere it can, a correct one, then one that looks
    for those marks (the third's sandbox is forked after the first's code ran). It finds none of them, though each
    of its looks finds the control mark it planted itself; and it sees the very descriptors it sees in a sandbox
    started afresh."""
    mark = "mark" + secrets.token_hex(8)
    course = course_copy(tmp_path / "course", EXERCISES)
    room = tmp_path / "class"
    masks = _solution("masks")
    _write(room, "a_writer", {"heads": (ISOLATION / "mark_writer.py").read_text().replace("@MARK@", mark),
                              "masks": masks})
    _write(room, "b_between", {"heads": _solution("heads"), "masks": masks})
    _write(room, "c_seeker", {"heads": (ISOLATION / "mark_seeker.py").read_text().replace("@MARK@", mark),
                              "masks": masks})
    forked, fresh = tmp_path / "forked", tmp_path / "fresh"
    _batch(course, room, forked, fork_server=True, jobs=1)

    planted = _run_tail(forked, "a_writer", "heads")
    assert int(planted.split("PLANTED ")[1].split()[0]) >= 10, planted   # it wrote its marks
    seen = _run_tail(forked, "c_seeker", "heads")
    assert "SOUGHT" in seen, seen
    assert "TRACE" not in seen, seen
    for look in ("files", "memory", "environment", "socket", "processes"):
        assert f"CONTROL {look}" in seen, f"the {look} look is blind: {seen}"

    # The descriptors: the same as in a sandbox started afresh for the same submission.
    shutil.rmtree(room / "a_writer")
    shutil.rmtree(room / "b_between")
    _batch(course, room, fresh, fork_server=False, jobs=1)
    fds = [re.search(r"(?m)^FDS .*$", _run_tail(out, "c_seeker", "heads")).group(0) for out in (forked, fresh)]
    assert fds[0] == fds[1], fds


def test_a_dead_fork_server_leaves_its_gradings_to_fresh_sandboxes(tmp_path):
    from grader.course import load_course
    from grader.grading.pipeline import judged, probe_submission
    from grader.sandbox.forkserver import ForkServer
    from grader.sandbox.levels import choose

    course = load_course(course_copy(tmp_path / "course", ["masks"]))
    server = ForkServer(choose("strict"), [])
    try:
        os.killpg(server.proc.pid, 9)
        server.proc.wait()
        assert not server.alive()
        report = judged(probe_submission(course, ROOT / "solutions", ["masks"], choose("strict"), None, server))
        assert report.percent == 100
    finally:
        server.close()
