"""Nothing a grading leaves in what the kernel keeps per uid reaches the next grading given the same uid (strict level,
fresh sandboxes and a fork server's; basic level, no namespaces), and a uid whose state cannot be cleared is never
given out again (run as root, as CI does). Each look of the seeker has a positive control (tests/isolation)."""

from __future__ import annotations

import json
import os
import re
import secrets
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import ROOT, course_copy
from grader.sandbox import reclaim, uids
from grader.sandbox.levels import strict_missing

# end to end: the batches grade in sandboxes (`pytest -m "not slow"` leaves them out)
pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(bool(strict_missing()), reason=f"strict sandbox unavailable: {strict_missing()}")]

ISOLATION = Path(__file__).parent / "isolation"
# One uid for the whole class, of the course's range but used by no other test: every grading of the batch gets it.
ONE_UID = 61985
KEY_LOOKS = ("session keyring", "user keyring", "user-session keyring", "persistent keyring", "named session keyring")
IPC_LOOKS = ("System V message queue", "POSIX message queue")


def _join_session_keyring() -> None:
    """As a login (pam_keyinit) or a container runtime (runc) starts its processes: in a session keyring that every
    process it starts inherits, grading processes included."""
    from grader.worker.syscalls import KEYCTL_JOIN_SESSION_KEYRING, keyctl

    keyctl(KEYCTL_JOIN_SESSION_KEYRING, b"grader-test-session")


def _batch(tmp_path: Path, mark: str, level: str, fork_server: bool) -> Path:
    """Grade a writer, then a seeker, one at a time and on the one uid; the folder of their reports."""
    course = course_copy(tmp_path / "course", ["heads"])
    text = (course / "course.toml").read_text()
    (course / "course.toml").write_text(text.replace("uids = [61000, 61999]", f"uids = [{ONE_UID}, {ONE_UID}]"))
    room = tmp_path / "class"
    for name, source in (("a_writer", "kernel_writer.py"), ("b_seeker", "kernel_seeker.py")):
        (room / name / "heads").mkdir(parents=True)
        (room / name / "heads" / "heads.py").write_text(_submission(source, mark))
    os.chmod(room, 0o700)   # the basic level refuses a class folder others can enter
    out = tmp_path / "out"
    env = {k: v for k, v in os.environ.items() if k != "GITHUB_STEP_SUMMARY"}
    env["GRADER_FORK_SERVER"] = "1" if fork_server else "0"
    done = subprocess.run([sys.executable, "-m", "grader", "--course", str(course), "batch", str(room), "--out",
                           str(out), "--jobs", "1", "--sandbox", level], capture_output=True, text=True, timeout=900,
                          cwd=ROOT, env=env, preexec_fn=_join_session_keyring)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "quarantined" not in done.stderr, done.stderr[-3000:]
    return out


def _submission(source: str, mark: str) -> str:
    """tests/isolation/`source` as one file: kernel_calls.py's text in place of its import, `mark` filled in."""
    calls = (ISOLATION / "kernel_calls.py").read_text()
    text = re.sub(r"from kernel_calls import \([^)]*\)\n", lambda _: calls, (ISOLATION / source).read_text(), count=1)
    assert "from kernel_calls import" not in text, source
    return text.replace("@MARK@", mark)


def _tail(out: Path, student: str) -> str:
    report = json.loads((out / "students" / student / "report.json").read_text())
    return next(e for e in report["exercises"] if e["id"] == "heads")["run"]["output_tail"]


def _said(tail: str, word: str) -> str:
    return tail.split(f"{word} ", 1)[1].split()[0]


@pytest.mark.parametrize("level, fork_server", [("strict", True), ("strict", False), ("basic", False)])
def test_nothing_of_a_grading_in_its_uids_kernel_state_reaches_the_next(tmp_path, level, fork_server):
    mark = "mark" + secrets.token_hex(8)
    try:
        out = _batch(tmp_path, mark, level, fork_server)
        planted, seen = _tail(out, "a_writer"), _tail(out, "b_seeker")
    finally:
        reclaim.clear(ONE_UID)   # whatever the test leaves, were the grader to leave it
    assert _said(planted, "UID") == _said(seen, "UID") == str(ONE_UID), (planted, seen)   # the same uid, in turn
    assert int(_said(planted, "PLANTED")) >= 7, planted      # five keyrings, a file, a queue at the least
    assert int(_said(planted, "FILLED")) > 0, planted        # it spent its uid's key quota
    # request_key(2) is refused outright (its upcall would run as root outside the box), though add_key works
    assert _said(planted, "REQUEST_KEY") == "ENOSYS", planted
    assert "ADDED" in seen, seen
    assert "TRACE" not in seen, seen
    assert int(_said(seen, "ADDED")) == 20, seen             # the quota is whole again
    assert int(_said(planted, "QUEUES")) > 0, planted        # it spent its uid's message queue bytes...
    assert _said(seen, "QUEUE_ROOM") == "1", seen             # ...which are whole again
    folders = ("/tmp", "/dev/shm", "/var/tmp", "/run/lock") if level == "basic" else ("/tmp", "/dev/shm")
    for look in (*KEY_LOOKS, *IPC_LOOKS, *(f"file {folder}" for folder in folders)):
        assert f"CONTROL {look}\n" in seen + "\n", f"the {look} look is blind: {seen}"


ADD_KEY = {"x86_64": 248, "aarch64": 217}


def _add_key(kind: bytes, description: bytes, payload: bytes | None, keyring: int) -> int:
    """add_key(2), which neither Python nor glibc wraps; the new key's serial, or OSError."""
    import ctypes
    import platform

    from grader.worker.syscalls import _libc

    result = _libc.syscall(ADD_KEY[platform.machine()], kind, description, payload,
                           ctypes.c_size_t(len(payload or b"")), ctypes.c_int(keyring))
    if result < 0:
        raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))
    return result


def _as(uid: int, action) -> None:
    """Run `action` in a child that has become `uid`; it must succeed."""
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.setgroups([])
            os.setresgid(uid, uid, uid)
            os.setresuid(uid, uid, uid)
            action()
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


# Out of the course's range: no grading is ever given them, whatever a test leaves.
TEST_UIDS = (62990, 62991)


def test_a_claim_clears_what_a_killed_grading_left(tmp_path):
    """A grading killed with -9 never releases its uid: what it left (a key, a process, a file and a folder too deep
    for a recursive removal in a shared folder) is cleared when the uid is next claimed."""
    from grader.worker.syscalls import KEY_SPEC_USER_KEYRING

    uid = TEST_UIDS[0]
    name = f"left-{secrets.token_hex(4)}"

    def leave() -> None:
        _add_key(b"user", b"left", b"over", KEY_SPEC_USER_KEYRING)
        with open(f"/tmp/{name}.txt", "w") as fh:
            fh.write("left")
        os.mkdir(f"/tmp/{name}")
        os.chdir(f"/tmp/{name}")
        for _ in range(1500):   # deeper than Python's recursion limit
            os.mkdir("d")
            os.chdir("d")
        os.chdir("/")
        if os.fork() == 0:
            os.setsid()
            time.sleep(600)
            os._exit(0)

    _as(uid, leave)
    # The positive controls: each is there.
    assert reclaim.owned_keys(uid) >= 2   # the key and the keyring it is in
    assert os.path.exists(f"/tmp/{name}.txt") and os.path.isdir(f"/tmp/{name}/d/d")
    assert reclaim.processes_of(uid)
    claim = uids.claim(uid, uid)
    try:
        assert reclaim.owned_keys(uid) == 0
        assert not os.path.lexists(f"/tmp/{name}.txt") and not os.path.lexists(f"/tmp/{name}")
        assert not reclaim.processes_of(uid)
    finally:
        claim.release()


def test_a_uid_whose_keys_cannot_be_cleared_is_quarantined(capfd):
    """A key of the uid's kept where it cannot reach (here, a keyring of root's that lets every uid write): the uid is
    never given out again, and the grading process says why."""
    from grader.worker.syscalls import KEY_SPEC_THREAD_KEYRING, keyctl

    uid = TEST_UIDS[0]
    quarantine = Path(uids._lock_folder()) / f"{uid}{uids.QUARANTINED}"
    holder = _add_key(b"keyring", b"holder" + secrets.token_hex(4).encode(), None, KEY_SPEC_THREAD_KEYRING)
    try:
        keyctl(5, holder, 0x3F3F3F3F)   # KEYCTL_SETPERM: anyone may add to it
        _as(uid, lambda: _add_key(b"user", b"kept", b"away", holder))
        with pytest.raises(uids.NoFreeUid, match="1 of them quarantined"):
            uids.claim(uid, uid)
        assert "kernel keys of the uid outlive the clearing" in quarantine.read_text()
        assert f"grading uid {uid} is quarantined" in capfd.readouterr().err
        uids._announced.discard(uid)
        uids.sweep(*TEST_UIDS)           # as a batch's end does: named where the instructor sees it
        assert f"grading uid {uid} is quarantined" in capfd.readouterr().err
        assert uids.quarantined(*TEST_UIDS) == {uid: quarantine.read_text().strip()}
        claim = uids.claim(*TEST_UIDS)   # it stays so, and the range's other uid serves
        try:
            assert claim.uid == TEST_UIDS[1]
        finally:
            claim.release()
    finally:
        keyctl(7, holder)                # KEYCTL_CLEAR
        keyctl(21, holder)               # KEYCTL_INVALIDATE
        quarantine.unlink(missing_ok=True)
    claim = uids.claim(uid, uid)         # cleared now, and given back
    claim.release()
