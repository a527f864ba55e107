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
from collections.abc import Callable
from typing import TYPE_CHECKING

from grader.i18n import Text, t
from grader.models.host import ModelHost, hosts_for
from grader.sandbox import cgroups, probe_plan, rootfs
from grader.sandbox.levels import Sandbox
from grader.sandbox.scratch import lend, take_back
from grader.sandbox.uids import DEFAULT_UIDS, NoFreeUid, UidClaim
from grader.sandbox.uids import claim as uid_claim
from grader.worker.protocol import Event, Limit, Limits
from grader.worker.seeds import probe_seeds

if TYPE_CHECKING:
    from grader.sandbox.forkserver import ForkServer, ForkedWorker
    from grader.sandbox.session import SandboxSession

STARTUP_SECONDS = 180.0   # importing torch on a loaded machine
GRACE_SECONDS = 15.0      # beyond an exercise's own timeout, before the worker itself is presumed stuck
LOG_TAIL_BYTES = 4000
PIPE_BYTES = 60000        # what a pipe holds before its reader runs (Linux: 64 KiB)
# A pre-started sandbox imports torch on what CPU the running gradings leave: until its request comes its control
# group weighs a tenth of a grading's (one that no submission takes then costs the others little).
WARMING_SHARE = 0.1


@dataclass(frozen=True)
class Job:
    """One exercise for the worker: where the student's file is, where observations go, its limits."""

    id: str
    student_file: Path
    module_name: str
    probes_file: str          # the exercise's probes.py in the course folder (grader.course.PROBES_FILE)
    limits: Limits = Limits()
    forbidden: tuple[str, ...] = ()

    @property
    def workdir(self) -> Path:
        return self.student_file.parent

    @property
    def obs_dir(self) -> Path:
        return self.workdir / "obs"

    def request(self, boxed: bool, course_seed: int, scratch: Path, models: dict | None = None) -> dict:
        """What the worker is told of this exercise. In the box it names box paths only: the staged file and the
        probe code are reached relative to the supervisor's folder, which the worker holds as a descriptor.

        Each probe's seed is derived here: the course's seed never enters the sandbox. The probe code is staged
        for this exercise alone (`probe_plan.stage_code`), read by the exercise's child before it drops its
        privileges; the worker itself never loads probe code. `models`: where the exercise's model process listens
        (grader/models/host.py), when it has one."""
        groups = probe_plan.probe_groups(self.probes_file)
        code_dir = scratch / probe_plan.STAGED / self.id
        code = probe_plan.stage_code(self.probes_file, code_dir, rootfs.LIB if boxed else None)
        if boxed:
            workdir = f"{rootfs.SUBMISSION}/{self.id}"
            paths = {"student_file": f"{workdir}/{self.student_file.name}", "workdir": workdir,
                     "staged": f"{self.id}/{self.student_file.name}", "obs_dir": f"{self.id}/obs",
                     "probe_code_dir": f"{probe_plan.STAGED}/{self.id}"}
        else:
            paths = {"student_file": str(self.student_file), "workdir": str(self.workdir), "obs_dir": str(self.obs_dir),
                     "probe_code_dir": str(code_dir)}
        return {"id": self.id, "module_name": self.module_name,
                "probes_module": probe_plan.module_name(self.probes_file), **self.limits.to_dict(),
                "forbidden": list(self.forbidden), "groups": groups,
                "seeds": probe_seeds(course_seed, self.id, [n for g in groups for n in g]), "probe_code": code, **paths,
                **({"models": models} if models else {})}


@dataclass
class Run:
    """How one exercise's run ended, as the worker (or, failing it, the supervisor) saw it."""

    id: str
    exit: int | None = None
    signal: int | None = None
    limit: Limit | None = None
    wall_s: float = 0.0
    cpu_s: float = 0.0
    max_rss_mb: float = 0.0
    output_tail: str = ""
    output_bytes: int = 0
    failure: Text | None = None  # set when the supervisor, not the worker, had to end it
    grader_fault: Text | str = ""  # the grader, not the student, failed: the exercise is graded again later
    extra: dict = field(default_factory=dict)
    acks: dict = field(default_factory=dict)  # probe -> [json sha256, tensors sha256 or None]; None: not trusted
    forbidden: list = field(default_factory=list)  # the course's forbidden APIs the worker saw the code reach
    served_seed: int | None = None  # the seed its model process built and ordered its entries with (grader/models)


@dataclass
class _Lease:
    """A grading's uid claim and control group (strict level), held until the sandbox is gone."""

    claim: UidClaim | None = None
    group: cgroups.GradingGroup | None = None

    @classmethod
    def take(cls, sandbox: Sandbox, uids: tuple[int, int]) -> _Lease:
        # NoFreeUid: the caller decides. A strict grading sees none of the machine's folders and IPC objects: what a
        # basic one left there is cleared when a basic grading next claims the uid.
        claim = uid_claim(*uids, shared=sandbox.level != "strict") if sandbox.own_uid else None
        group = cgroups.create(f"uid-{claim.uid}") if claim and sandbox.level == "strict" else None
        return cls(claim, group)

    @property
    def uid(self) -> int | None:
        return self.claim.uid if self.claim else None

    def release(self) -> None:
        if self.group:
            self.group.remove()
            self.group = None
        if self.claim:
            self.claim.release()
            self.claim = None


def run_jobs(jobs: list[Job], seed: int, sandbox: Sandbox, scratch: Path,
             uids: tuple[int, int] = DEFAULT_UIDS, session: SandboxSession | None = None,
             on_run: Callable[[Run], None] | None = None, server: ForkServer | None = None) -> dict[str, Run]:
    """Run every job; each gets a Run, whatever the student code does. With `session` (a pre-started sandbox, whose
    scratch folder `scratch` must be, staged files in place) the first worker is that sandbox's when it can serve
    the jobs, else one is started here: forked from `server` when given, else a fresh process.
    `on_run` hears each Run as soon as it is final (the judge can start on it while the next exercise runs)."""
    runs: dict[str, Run] = {}
    announced: set[str] = set()

    hosts: dict[str, ModelHost] = {}

    def final(run: Run) -> None:
        host = hosts.pop(run.id, None)
        if host is not None:   # the exercise's model process: its faults are the grader's, said before the verdict
            run.served_seed = host.seed
            run.grader_fault = run.grader_fault or host.fault()
            host.stop()
        if on_run is not None and run.id not in announced:
            announced.add(run.id)
            on_run(run)

    for job in jobs:
        job.obs_dir.mkdir(parents=True, exist_ok=True)
    worker = None
    attempt = 0
    if session is not None and session.started:
        if scratch != session.scratch:
            raise ValueError("the jobs of a pre-started sandbox are staged in its own scratch folder")
        taken = session.take(jobs, sandbox)   # None: it serves nobody, and a sandbox is started here instead
        if taken is not None:
            lease, worker = taken
        attempt = 1   # its root and log keep the first attempt's names
    if worker is None:
        try:
            lease = _Lease.take(sandbox, uids)
        except NoFreeUid as exc:
            for job in jobs:
                runs[job.id] = Run(job.id, grader_fault=str(exc))
                final(runs[job.id])
            return runs
    try:
        if lease.claim and sandbox.level == "basic":
            # No box: the exercise folders live on the host, lent to the grading's uid one at a time.
            lend(scratch, lease.claim.uid)
        hosts.update(hosts_for(jobs, seed, scratch))
        remaining = list(jobs)
        while remaining:
            attempt += 1
            if worker is None:
                worker = _Worker.start(sandbox, [j.id for j in remaining],
                                       list(dict.fromkeys(j.probes_file for j in remaining)), lease, scratch, attempt,
                                       server)
            finished = worker.follow(remaining, seed, scratch, final, hosts)
            worker = None
            progressed = bool(finished)
            runs.update(finished)
            for run in finished.values():
                final(run)
            remaining = [j for j in remaining if j.id not in runs]
            if remaining and not progressed:
                reason = _log_tail(scratch / f"worker-{attempt}.log")
                for job in remaining:
                    runs[job.id] = Run(job.id, grader_fault=t("the grading worker could not start: {reason}",
                                                           reason=reason or "no output"))
                    final(runs[job.id])
                break
    finally:
        for host in hosts.values():
            host.stop()
        if worker is not None:   # follow never ran (an exception on the way): the sandbox goes all the same
            worker.kill()
        try:
            take_back(scratch)   # before the uid can serve another grading
        finally:
            lease.release()
    return runs


def _pipe_with(text: str) -> tuple[int, int]:
    """A pipe already holding `text`, for the box (its plan) or the worker (its request) to read at start: no
    file in the scratch folder holds either. Returns (read end, write end); the write end stays open for more."""
    data = text.encode("utf-8")
    if len(data) >= PIPE_BYTES:
        raise ValueError(f"a worker request of {len(data)} bytes does not fit in a pipe")
    read_end, write_end = os.pipe()
    os.write(write_end, data)
    return read_end, write_end


@dataclass
class _Worker:
    """A started sandbox: its worker's process, the control pipe it reports on, the request pipe it waits on."""

    proc: subprocess.Popen | ForkedWorker
    control: int | None
    request: int | None
    boxed: bool
    kill_groups: bool
    log_path: Path
    children: list[int] = field(default_factory=list)

    @classmethod
    def start(cls, sandbox: Sandbox, exercise_ids: list[str], probes_files: list[str], lease: _Lease,
              scratch: Path, attempt: int, server: ForkServer | None = None) -> _Worker:
        """Start the sandbox and its worker with the first line of its request (the jail, the modules the probe
        code of `probes_files` imports); the second line, its exercises, is `request`ed later. With `server`
        (strict level) the worker is forked from that fork server into namespaces of its own, instead of a fresh
        process in a box built for it."""
        if server is not None and sandbox.level == "strict" and server.alive():
            from grader.sandbox.forkserver import ForkServerUnavailable

            try:
                return cls._forked(server, sandbox, exercise_ids, probes_files, lease, scratch, attempt)
            except ForkServerUnavailable:
                pass   # it died, or never started (its log says why): the worker is started afresh instead
        boxed = sandbox.level == "strict"
        uid = lease.uid
        scratch_fd = os.open(scratch, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW) if boxed else None
        memory = lease.group.memory_files() if boxed and lease.group else {}
        setup = {"jail": sandbox.jail(uid, scratch_fd, memory), "preload": probe_plan.preload(probes_files)}
        request_fd, request_write = _pipe_with(json.dumps(setup) + "\n")
        plan_fd = None
        if boxed:
            root = scratch / f".root-{attempt}"
            root.mkdir(mode=0o700)
            plan_fd, plan_write = _pipe_with(json.dumps({"root": str(root), "plan": rootfs.plan(), "uid": uid,
                                                         "exercises": exercise_ids,
                                                         "cgroups": lease.group.procs if lease.group else []}))
            os.close(plan_write)
        read_end, write_end = os.pipe()
        log_path = scratch / f"worker-{attempt}.log"
        env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(scratch), "TMPDIR": str(scratch),
               "LANG": "C.UTF-8", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PYTHONHASHSEED": "0",
               "PYTHONDONTWRITEBYTECODE": "1"}
        passed = [fd for fd in (write_end, request_fd, plan_fd, scratch_fd, *memory.values()) if fd is not None]
        try:
            with open(log_path, "wb") as log:
                proc = subprocess.Popen(sandbox.command(write_end, request_fd, plan_fd), stdin=subprocess.DEVNULL,
                                        stdout=log, stderr=log, pass_fds=passed, cwd=scratch, env=env,
                                        start_new_session=True)
        except BaseException:
            os.close(read_end)
            os.close(request_write)
            raise
        finally:
            for fd in passed:
                os.close(fd)
        return cls(proc, read_end, request_write, boxed, sandbox.level != "strict", log_path)

    @classmethod
    def _forked(cls, server: ForkServer, sandbox: Sandbox, exercise_ids: list[str], probes_files: list[str],
                lease: _Lease, scratch: Path, attempt: int) -> _Worker:
        """The worker forked from `server`: the same descriptors and request a fresh one is started with, so it
        runs exactly as one would; what the box's plan did (the grading's groups, its uid's name, its exercises'
        folders) the forked child does itself (grader/worker/spawn.py)."""
        uid = lease.uid
        scratch_fd = os.open(scratch, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        memory = lease.group.memory_files() if lease.group else {}
        setup = {"jail": sandbox.jail(uid, scratch_fd, memory), "preload": probe_plan.preload(probes_files)}
        request_fd, request_write = _pipe_with(json.dumps(setup) + "\n")
        read_end, write_end = os.pipe()
        log_path = scratch / f"worker-{attempt}.log"
        groups: list[int] = []
        passed = [write_end, request_fd, scratch_fd, *memory.values()]
        try:
            for path in lease.group.procs if lease.group else []:
                groups.append(os.open(path, os.O_WRONLY))
            with open(log_path, "wb") as log:
                proc = server.spawn(["--control-fd", str(write_end), "--request-fd", str(request_fd)], passed,
                                    log.fileno(), groups, uid, exercise_ids)
        except BaseException:
            os.close(read_end)
            os.close(request_write)
            raise
        finally:
            for fd in [*passed, *groups]:
                os.close(fd)
        return cls(proc, read_end, request_write, True, False, log_path)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def send_request(self, jobs: list[Job], seed: int, scratch: Path,
                     hosts: dict[str, ModelHost] | None = None) -> None:
        """The second line of the request: the exercises, in box paths when boxed; then the pipe is closed."""
        if self.request is None:
            return   # already sent, or the worker was killed
        try:
            hosts = hosts or {}
            data = (json.dumps({"exercises": [
                j.request(self.boxed, seed, scratch, hosts[j.id].request(self.boxed) if j.id in hosts else None)
                for j in jobs]}) + "\n").encode()
            if len(data) >= PIPE_BYTES:
                raise ValueError(f"a worker request of {len(data)} bytes does not fit in a pipe")
            os.write(self.request, data)
        except BrokenPipeError:
            pass   # the worker is gone: follow() finds no progress and says so
        finally:
            os.close(self.request)
            self.request = None

    def kill(self) -> None:
        """Kill the worker's session and its children's process groups.

        In strict mode killing `unshare` takes the whole pid namespace down with it, so no groups are named
        (outside the namespace those pids would mean other processes).
        """
        for fd in (self.control, self.request):
            if fd is not None:
                os.close(fd)
        self.control = self.request = None
        if not isinstance(self.proc, subprocess.Popen):
            self.proc.kill()   # its fork server's child kills the worker's pid namespace, then says how it ended
            self.proc.wait()
            return
        for pgid in [self.proc.pid, *(self.children if self.kill_groups else [])]:
            try:
                os.killpg(pgid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        self.proc.wait()

    def follow(self, jobs: list[Job], seed: int, scratch: Path, on_done: Callable[[Run], None],
               hosts: dict[str, ModelHost] | None = None) -> dict[str, Run]:
        """Send the jobs, follow the worker's reports to its end (or its stopping), then kill the sandbox. `hosts`:
        the model processes of the jobs that have one."""
        self.send_request(jobs, seed, scratch, hosts)
        by_id = {j.id: j for j in jobs}
        runs: dict[str, Run] = {}
        current: str | None = None
        acks: dict[str, dict] = {}
        deadline = time.monotonic() + STARTUP_SECONDS
        buffer = b""
        finished = False
        control = self.control
        assert control is not None   # closed by kill() alone, once following is over
        try:
            while not finished:
                ready, _, _ = select.select([control], [], [], max(0.0, min(1.0, deadline - time.monotonic())))
                if ready:
                    chunk = os.read(control, 65536)
                    if not chunk:
                        break  # the worker closed the pipe: it finished or died
                    buffer += chunk
                    *lines, buffer = buffer.split(b"\n")
                    for line in lines:
                        try:
                            event = json.loads(line)
                        except ValueError:
                            continue
                        if event["event"] == Event.CHILD:
                            self.children.append(event["pid"])
                        elif event["event"] == Event.ACKS:
                            acks[event["id"]] = event
                        elif event["event"] == Event.START:
                            current = event["id"]
                            deadline = time.monotonic() + by_id[current].limits.timeout_s + GRACE_SECONDS
                        elif event["event"] == Event.DONE:
                            runs[event["id"]] = _run_from_event(event)
                            _trust(runs[event["id"]], acks.get(event["id"]))
                            on_done(runs[event["id"]])   # its observations are all out of the box by now
                            current = None
                            deadline = time.monotonic() + GRACE_SECONDS
                        elif event["event"] == Event.FINISHED:
                            # All is said: the sandbox is killed rather than waited for (a boxed worker's own exit
                            # waits on its namespaces' teardown, a third of a second of every grading).
                            finished = True
                elif time.monotonic() >= deadline:
                    if current is not None:
                        timeout_s = by_id[current].limits.timeout_s
                        runs[current] = Run(current, limit=Limit.TIME, wall_s=timeout_s + GRACE_SECONDS,
                                            failure=t("stopped after {seconds:g} s of wall time (the worker did not "
                                                      "end it, so the whole sandbox was killed)",
                                                      seconds=timeout_s))
                        _trust(runs[current], acks.get(current))
                    break
        finally:
            self.kill()
        if current is not None and current not in runs:
            code = self.proc.returncode
            runs[current] = Run(current, failure=t("the grading process died while running this exercise (exit "
                                                   "status {code}); its last output: {output}", code=code,
                                                   output=repr(_log_tail(self.log_path))))
            _trust(runs[current], acks.get(current))
        return runs


def _trust(run: Run, event: dict | None) -> None:
    """What the worker, which never runs student code, said of the exercise's observations: the digests of the files
    it wrote and the forbidden APIs it saw the code reach."""
    if event is not None:
        run.acks = event.get("acks", {})
        run.forbidden = list(event.get("forbidden", []))


def _run_from_event(event: dict) -> Run:
    limit = Limit(event["limit"]) if event["limit"] is not None else None
    return Run(event["id"], exit=event["exit"], signal=event["signal"], limit=limit,
               grader_fault=event.get("grader_fault", ""),
               wall_s=event.get("wall_s", 0.0), cpu_s=event.get("cpu_s", 0.0), max_rss_mb=event.get("max_rss_mb", 0.0),
               output_tail=event.get("output_tail", ""), output_bytes=event.get("output_bytes", 0))


def _log_tail(path: Path) -> str:
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            fh.seek(max(0, fh.tell() - LOG_TAIL_BYTES))
            return fh.read().decode("utf-8", "replace").strip()
    except OSError:
        return ""
