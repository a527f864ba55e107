"""Start the worker at the chosen sandbox level, follow its reports, and survive whatever it does.

The worker reports each exercise on a control pipe. When it stops reporting (an exercise ran past its
wall clock plus a grace period, or the worker died), the supervisor kills the whole sandbox, records the
exercise that was running as `timeout` or `crashed`, and starts a fresh worker for the exercises left.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from grader.i18n import Text, t
from grader.sandbox import cgroups, rootfs
from grader.sandbox.levels import Sandbox
from grader.sandbox.uids import NoFreeUid
from grader.sandbox.uids import claim as uid_claim

STARTUP_SECONDS = 180.0   # importing torch on a loaded machine
GRACE_SECONDS = 15.0      # beyond an exercise's own timeout, before the worker itself is presumed stuck
LOG_TAIL_BYTES = 4000
PIPE_BYTES = 60000        # what a pipe holds before its reader runs (Linux: 64 KiB)
DEFAULT_UIDS = (61000, 61999)


@dataclass(frozen=True)
class Job:
    """One exercise for the worker: where the student's file is, where observations go, its limits."""

    id: str
    student_file: Path
    module_name: str
    probes_module: str
    timeout_s: float
    memory_mb: int
    output_kb: int
    forbidden: tuple[str, ...] = ()
    disk_mb: int = 256
    files: int = 4096

    @property
    def workdir(self) -> Path:
        return self.student_file.parent

    @property
    def obs_dir(self) -> Path:
        return self.workdir / "obs"

    def request(self, boxed: bool) -> dict:
        """What the worker is told of this exercise. In the box it names box paths only: the staged file is
        reached relative to the supervisor's folder, which the worker holds as a descriptor."""
        if boxed:
            workdir = f"{rootfs.SUBMISSION}/{self.id}"
            paths = {"student_file": f"{workdir}/{self.student_file.name}", "workdir": workdir,
                     "obs_dir": f"{workdir}/obs", "staged": f"{self.id}/{self.student_file.name}"}
        else:
            paths = {"student_file": str(self.student_file), "workdir": str(self.workdir), "obs_dir": str(self.obs_dir)}
        return {"id": self.id, "module_name": self.module_name, "probes_module": self.probes_module,
                "timeout_s": self.timeout_s, "memory_mb": self.memory_mb, "output_kb": self.output_kb,
                "forbidden": list(self.forbidden), "disk_mb": self.disk_mb, "files": self.files, **paths}


@dataclass
class Run:
    """How one exercise's run ended, as the worker (or, failing it, the supervisor) saw it."""

    id: str
    exit: int | None = None
    signal: int | None = None
    limit: str | None = None
    wall_s: float = 0.0
    cpu_s: float = 0.0
    max_rss_mb: float = 0.0
    output_tail: str = ""
    output_bytes: int = 0
    failure: Text | None = None  # set when the supervisor, not the worker, had to end it
    grader_fault: Text | str = ""  # the grader, not the student, failed: the exercise is graded again later
    extra: dict = field(default_factory=dict)
    acks: dict = field(default_factory=dict)  # probe -> [json sha256, tensors sha256 or None]; None: not trusted


def run_jobs(jobs: list[Job], seed: int, sandbox: Sandbox, scratch: Path,
             uids: tuple[int, int] = DEFAULT_UIDS) -> dict[str, Run]:
    """Run every job; each gets a Run, whatever the student code does."""
    for job in jobs:
        job.obs_dir.mkdir(parents=True, exist_ok=True)
    runs: dict[str, Run] = {}
    try:
        claim = uid_claim(*uids) if sandbox.own_uid else None
    except NoFreeUid as exc:
        return {job.id: Run(job.id, grader_fault=str(exc)) for job in jobs}
    group = cgroups.create(f"uid-{claim.uid}") if claim and sandbox.level == "strict" else None
    try:
        if claim and sandbox.level == "basic":
            # No box: the exercise folders live on the host, lent to the grading's uid one at a time.
            for folder, _, _ in os.walk(scratch):
                os.chmod(folder, 0o755)
        remaining = list(jobs)
        attempt = 0
        while remaining:
            attempt += 1
            finished = _run_worker(remaining, seed, sandbox, claim.uid if claim else None, scratch, attempt, group)
            progressed = bool(finished)
            runs.update(finished)
            remaining = [j for j in remaining if j.id not in runs]
            if remaining and not progressed:
                reason = _log_tail(scratch / f"worker-{attempt}.log")
                for job in remaining:
                    runs[job.id] = Run(job.id, grader_fault=t("the grading worker could not start: {reason}",
                                                           reason=reason or "no output"))
                break
    finally:
        if group:
            group.remove()
        if claim:
            claim.release()
    return runs


def _pipe_with(text: str) -> int:
    """The read end of a pipe already holding `text`, for the box (its plan) or the worker (its request) to read
    at start: no file in the scratch folder holds either."""
    data = text.encode("utf-8")
    if len(data) >= PIPE_BYTES:
        raise ValueError(f"a worker request of {len(data)} bytes does not fit in a pipe")
    read_end, write_end = os.pipe()
    os.write(write_end, data)
    os.close(write_end)
    return read_end


def _run_worker(jobs: list[Job], seed: int, sandbox: Sandbox, uid: int | None, scratch: Path, attempt: int,
                group: cgroups.GradingGroup | None = None) -> dict[str, Run]:
    boxed = sandbox.level == "strict"
    scratch_fd = os.open(scratch, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW) if boxed else None
    request = {"seed": seed, "jail": sandbox.jail(uid, scratch_fd), "exercises": [j.request(boxed) for j in jobs]}
    request_fd = _pipe_with(json.dumps(request))
    plan_fd = None
    if boxed:
        root = scratch / f".root-{attempt}"
        root.mkdir(mode=0o700)
        plan_fd = _pipe_with(json.dumps({"root": str(root), "plan": rootfs.plan(), "uid": uid,
                                         "exercises": [j.id for j in jobs], "cgroups": group.procs if group else []}))
    read_end, write_end = os.pipe()
    log_path = scratch / f"worker-{attempt}.log"
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(scratch), "TMPDIR": str(scratch),
           "LANG": "C.UTF-8", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PYTHONHASHSEED": "0",
           "PYTHONDONTWRITEBYTECODE": "1"}
    passed = [fd for fd in (write_end, request_fd, plan_fd, scratch_fd) if fd is not None]
    try:
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(sandbox.command(write_end, request_fd, plan_fd), stdin=subprocess.DEVNULL,
                                    stdout=log, stderr=log, pass_fds=passed, cwd=scratch, env=env,
                                    start_new_session=True)
    finally:
        for fd in passed:
            os.close(fd)
    by_id = {j.id: j for j in jobs}
    runs: dict[str, Run] = {}
    current: str | None = None
    children: list[int] = []
    acks: dict[str, dict] = {}
    deadline = time.monotonic() + STARTUP_SECONDS
    buffer = b""
    finished = False
    try:
        while not finished:
            ready, _, _ = select.select([read_end], [], [], max(0.0, min(1.0, deadline - time.monotonic())))
            if ready:
                chunk = os.read(read_end, 65536)
                if not chunk:
                    break  # the worker closed the pipe: it finished or died
                buffer += chunk
                *lines, buffer = buffer.split(b"\n")
                for line in lines:
                    try:
                        event = json.loads(line)
                    except ValueError:
                        continue
                    if event["event"] == "child":
                        children.append(event["pid"])
                    elif event["event"] == "acks":
                        acks[event["id"]] = event["acks"]
                    elif event["event"] == "start":
                        current = event["id"]
                        deadline = time.monotonic() + by_id[current].timeout_s + GRACE_SECONDS
                    elif event["event"] == "done":
                        runs[event["id"]] = _run_from_event(event)
                        runs[event["id"]].acks = acks.get(event["id"], {})
                        current = None
                        deadline = time.monotonic() + GRACE_SECONDS
                    elif event["event"] == "finished":
                        # All is said: the sandbox is killed rather than waited for (a boxed worker's own exit
                        # waits on its namespaces' teardown, a third of a second of every grading).
                        finished = True
            elif time.monotonic() >= deadline:
                if current is not None:
                    runs[current] = Run(current, limit="time", wall_s=by_id[current].timeout_s + GRACE_SECONDS,
                                        failure=t("stopped after {seconds:g} s of wall time (the worker did not end "
                                                  "it, so the whole sandbox was killed)",
                                                  seconds=by_id[current].timeout_s),
                                        acks=acks.get(current, {}))
                break
    finally:
        os.close(read_end)
        _kill(proc, children if sandbox.level != "strict" else [])
    if current is not None and current not in runs:
        code = proc.returncode
        runs[current] = Run(current, failure=t("the grading process died while running this exercise (exit status "
                                               "{code}); its last output: {output}", code=code,
                                               output=repr(_log_tail(log_path))),
                            acks=acks.get(current, {}))
    return runs


def _run_from_event(event: dict) -> Run:
    return Run(event["id"], exit=event["exit"], signal=event["signal"], limit=event["limit"],
               grader_fault=event.get("grader_fault", ""),
               wall_s=event.get("wall_s", 0.0), cpu_s=event.get("cpu_s", 0.0), max_rss_mb=event.get("max_rss_mb", 0.0),
               output_tail=event.get("output_tail", ""), output_bytes=event.get("output_bytes", 0))


def _kill(proc: subprocess.Popen, child_groups: list[int]) -> None:
    """Kill the worker's session and its children's process groups.

    In strict mode killing `unshare` takes the whole pid namespace down with it, so no groups are named
    (outside the namespace those pids would mean other processes).
    """
    for pgid in [proc.pid, *child_groups]:
        try:
            os.killpg(pgid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    proc.wait()


def _log_tail(path: Path) -> str:
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            fh.seek(max(0, fh.tell() - LOG_TAIL_BYTES))
            return fh.read().decode("utf-8", "replace").strip()
    except OSError:
        return ""
