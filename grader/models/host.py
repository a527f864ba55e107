"""The supervisor's side of a model process: start it beside a grading, say where it listens, name its faults.

An exercise whose solutions folder holds SERVED_FILE gets one model process per grading (`ModelHost`): started by
the supervisor, outside every box, as the supervisor's own user, before the worker is asked to run the exercise; it
listens on a Unix socket in the supervisor's scratch folder (mode 0600, the grader's own), which the worker's child
connects to as root, before it drops to the grading's uid (grader/models/handles.py `attach`). Its log and its end
are read when the exercise's run is final: a model process that passed one of its limits, or died, makes the run a
grader fault, never the student's failure.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from grader.models import FAULT
from grader.worker.seeds import probe_seed

SERVED_FILE = "served.py"   # in <solutions>/<id>/: the entries a model process serves (catalog, build)


@dataclass(frozen=True)
class ModelLimits:
    """What the model process may take, and how its replies are held (grader/models/server.py)."""

    # A reply leaves after a whole number of quanta since its request came, each quantum above what one call of any
    # served entry takes (measured: a model's forward or gradients under 4 ms, a run's step, save or load under 31
    # ms, a build under 10 ms once the process has built each entry once), so that timing tells no entry apart.
    quantum_s: float = 0.02        # a model's or a function's calls
    run_quantum_s: float = 0.05    # a trainer's and a run's calls (new, load, step, save, parameters)
    open_quantum_s: float = 0.05   # opening an entry (building it)
    call_limit_s: float = 20.0     # one call's wall clock in the model process
    memory_mb: int = 2048          # its resident memory (torch's own included)
    cpu_s: int = 600               # its CPU time in all

    def setup(self) -> dict:
        return {"quantum_s": self.quantum_s, "run_quantum_s": self.run_quantum_s, "open_quantum_s": self.open_quantum_s,
                "call_limit_s": self.call_limit_s, "memory_mb": self.memory_mb, "cpu_s": self.cpu_s}


def served_file(probes_file: str | os.PathLike) -> Path | None:
    """The exercise's served module beside its probes, when it has one."""
    path = Path(probes_file).with_name(SERVED_FILE)
    return path if path.is_file() else None


def served_seed(course_seed: int, exercise: str, student_file: Path) -> int:
    """The seed a submission's entries are built and ordered with: the course's, the exercise and the file's bytes,
    so that the same file is graded in the same order and a changed one in another (what one report says of the
    order teaches nothing of the next's). Derived as probe seeds are: no way back to the course's seed."""
    try:
        digest = hashlib.sha256(student_file.read_bytes()).hexdigest()
    except OSError:
        digest = "absent"
    return probe_seed(course_seed, exercise, f"served:{digest}")


class ModelHost:
    """One exercise's model process for one grading."""

    def __init__(self, exercise: str, served: Path, seed: int, scratch: Path, limits: ModelLimits = ModelLimits()):
        self.exercise, self.served, self.seed, self.scratch, self.limits = exercise, served, seed, scratch, limits
        self.name = f".models-{exercise}.sock"
        self.log_path = scratch / f".models-{exercise}.log"
        self.proc: subprocess.Popen | None = None

    def setup(self) -> dict:
        # the course's root is the folder above its solutions folder, as served modules expect it
        return {"served": str(self.served), "root": str(self.served.resolve().parents[2]), "seed": self.seed,
                **self.limits.setup()}

    def start(self) -> None:
        from grader.sandbox.levels import run_module

        folder = os.open(self.scratch, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            path = f"/proc/self/fd/{folder}/{self.name}" if sys.platform.startswith("linux") \
                else str(self.scratch / self.name)
            old = os.umask(0o177)
            try:
                listener.bind(path)   # 0600: the grader's own; a grading's uid cannot connect
            finally:
                os.umask(old)
            listener.listen(4)
            env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(self.scratch), "TMPDIR": str(self.scratch),
                   "LANG": "C.UTF-8", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PYTHONHASHSEED": "0",
                   "PYTHONDONTWRITEBYTECODE": "1"}
            with open(self.log_path, "wb") as log:
                self.proc = subprocess.Popen([*run_module("grader.models.server"), "--listen-fd",
                                              str(listener.fileno())], stdin=subprocess.PIPE, stdout=log, stderr=log,
                                             pass_fds=[listener.fileno()], env=env, cwd=self.scratch,
                                             start_new_session=True)
            assert self.proc.stdin is not None
            self.proc.stdin.write((json.dumps(self.setup()) + "\n").encode())
            self.proc.stdin.close()
        finally:
            listener.close()   # the model process holds it
            os.close(folder)

    def request(self, boxed: bool) -> dict:
        """What the worker is told: where to connect (in the box, relative to the supervisor's folder)."""
        return {"socket": self.name if boxed else str(self.scratch / self.name)}

    def fault(self) -> str:
        """Why the model process failed the exercise's run ('' when it did not): its FAULT line, or its end."""
        said = ""
        try:
            for line in self.log_path.read_text("utf-8", "replace").splitlines():
                if line.startswith(FAULT + " "):
                    said = line[len(FAULT) + 1:].strip()
        except OSError:
            pass
        if said:
            return f"the grader's model process failed: {said}"
        if self.proc is not None and self.proc.poll() is not None:
            return f"the grader's model process ended early (exit status {self.proc.returncode})"
        return ""

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if self.proc is not None:
            self.proc.wait()
        try:
            os.unlink(self.scratch / self.name)
        except OSError:
            pass


def hosts_for(jobs: list, course_seed: int, scratch: Path) -> dict[str, ModelHost]:
    """A started model process for each job whose exercise serves models, by exercise."""
    hosts: dict[str, ModelHost] = {}
    try:
        for job in jobs:
            served = served_file(job.probes_file)
            if served is None:
                continue
            host = ModelHost(job.id, served, served_seed(course_seed, job.id, job.student_file), scratch)
            host.start()
            hosts[job.id] = host
    except BaseException:
        for host in hosts.values():
            host.stop()
        raise
    return hosts
