"""The one owner of a pre-started sandbox (grader/sandbox/session.py): a start that fails is kept with its reason
and gives back all it took; one that starts is taken once, and a grading runs whether it was taken or not."""

import pytest

from conftest import ROOT, course_copy
from grader.course import load_course
from grader.grading.pipeline import judged, prestart, probe_submission, said_failure
from grader.sandbox import session as session_module
from grader.sandbox.levels import choose
from grader.sandbox.session import SandboxSession
from grader.sandbox.supervisor import _Worker


def _failing_start(*args, **kwargs):
    raise OSError(28, "No space left on device")


def test_a_failed_start_is_kept_with_its_reason_and_holds_nothing(monkeypatch, tmp_path):
    monkeypatch.setattr(_Worker, "start", _failing_start)
    made = []
    real_new_scratch = session_module.new_scratch
    monkeypatch.setattr(session_module, "new_scratch", lambda: made.append(real_new_scratch()) or made[-1])
    session = SandboxSession(choose("none"), {"masks": str(ROOT / "solutions" / "masks" / "probes.py")})
    assert not session.started
    assert session.failure == "OSError: [Errno 28] No space left on device"
    assert made and not made[0].exists(), "its scratch folder went with it"
    assert session.scratch is None and session.lease is None
    assert session.take([], choose("none")) is None
    session.discard()   # nothing left to end: a no-op, not an error


def test_a_started_session_records_no_failure_and_serves_one_submission(tmp_path):
    session = SandboxSession(choose("none"), {"masks": str(ROOT / "solutions" / "masks" / "probes.py")})
    try:
        assert session.started and session.failure == ""
        assert session.worker.alive()
        assert session.scratch is not None and session.scratch.is_dir()
        assert not session.serves([], choose("basic")), "another level's jobs are not its own"
    finally:
        session.discard()
    assert not session.worker.alive() and not session.scratch.exists()
    assert session.take([], choose("none")) is None, "a discarded session serves nobody"


@pytest.mark.slow
def test_prestart_says_why_it_failed_and_the_grading_still_runs(monkeypatch, tmp_path):
    course = load_course(course_copy(tmp_path / "course", ["masks"]))
    real_start = _Worker.start
    calls = []

    def start_once_failing(*args, **kwargs):
        calls.append(args)
        if len(calls) == 1:
            raise OSError(28, "No space left on device")
        return real_start(*args, **kwargs)

    monkeypatch.setattr(_Worker, "start", start_once_failing)
    session = prestart(course, choose("none"))
    said = said_failure(session)
    assert said is not None and "No space left on device" in said.render("en") and "预先" in said.render("zh")
    assert said_failure(prestart(course, choose("none"))) is None, "a session that started says nothing"
    report = judged(probe_submission(course, ROOT / "solutions", ["masks"], choose("none"), session))
    # The session has no worker: a full score means the grading started one of its own.
    assert not session.started and report.percent == 100
