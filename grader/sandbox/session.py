"""One pre-started sandbox, owned from its start to its discard: `SandboxSession`.

A sandbox started before its submission is known (its own uid, control group, scratch folder and worker, which
imports torch and what the probe code needs, then waits for its one request) passes through four decisions, all
made here: whether it can serve a submission's jobs, the CPU weight it runs at (a fraction of a grading's while it
waits, a whole one from its request on), when it is retired untaken, and when its scratch folder goes. The
supervisor (`run_jobs`) and the grading (`grader/grading/pipeline.py`, `grader/batch/warm.py`) ask it; neither decides
for it.

A start that failed is a session as well, without a sandbox: `failure` keeps the exception's text, so that the log
can say why the head start was missed; the submission's sandbox is then started for it, as without one.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from grader.sandbox.levels import Sandbox
from grader.sandbox.scratch import new_scratch, remove_scratch
from grader.sandbox.supervisor import DEFAULT_UIDS, WARMING_SHARE, Job, _Lease, _Worker

if TYPE_CHECKING:
    from grader.sandbox.forkserver import ForkServer


class SandboxSession:
    """A sandbox started now for one submission to come, able to run `exercises` (id -> probes file).

    Nothing of a student's is in it before its request: the staged files go into its scratch folder afterwards, and
    so does each exercise's probe code. It serves exactly one submission and is then killed, like a sandbox started
    for its submission. Its process dies with the thread that started it (a parent-death signal), so a grading
    process killed with -9 leaves no sandbox waiting: start it from a thread that outlives its use.
    """

    def __init__(self, sandbox: Sandbox, exercises: dict[str, str], uids: tuple[int, int] = DEFAULT_UIDS,
                 share: float = WARMING_SHARE, server: ForkServer | None = None):
        """`share`: its control group's CPU weight until its request comes, as a fraction of a grading's (a whole
        one when its submission is already on its way). `server`: the fork server its worker is forked from (None:
        a fresh process). It holds no seed: the probes' seeds come with the request."""
        self.sandbox, self.exercises = sandbox, dict(exercises)
        self.failure = ""                 # why the start failed, the exception's text; "" when it started
        self.lease: _Lease | None = None
        self.worker: _Worker | None = None
        self.scratch: Path | None = None
        self.taken = False
        try:
            self.lease = _Lease.take(sandbox, uids)
            self.scratch = new_scratch()
            if self.lease.group:
                self.lease.group.weigh(share)
            self.worker = _Worker.start(sandbox, list(self.exercises), list(dict.fromkeys(self.exercises.values())),
                                        self.lease, self.scratch, attempt=1, server=server)
        except Exception as exc:  # noqa: BLE001 - a missed head start costs time, never a grading: said, not raised
            self.failure = f"{type(exc).__name__}: {exc}"
            self._give_up()
        except BaseException:
            self._give_up()
            raise

    @property
    def started(self) -> bool:
        """Whether a sandbox was started (the first attempt's root and log in its scratch folder are its own)."""
        return self.worker is not None

    def serves(self, jobs: list[Job], sandbox: Sandbox) -> bool:
        """Whether these jobs can run in it: not taken, same level, exercises it has room for, still alive."""
        return (not self.taken and self.worker is not None and sandbox == self.sandbox
                and all(self.exercises.get(j.id) == j.probes_file for j in jobs) and self.worker.alive())

    def take(self, jobs: list[Job], sandbox: Sandbox) -> tuple[_Lease, _Worker] | None:
        """Its lease and worker for these jobs, weighed as a full grading from now on; the caller owns both then.
        None when it cannot serve them (taken, dead, started for other exercises, or never started): it is retired,
        and the caller starts a sandbox of its own."""
        if not self.serves(jobs, sandbox):
            self.retire()
            return None
        self.taken = True
        assert self.lease is not None and self.worker is not None   # serves() says both are there
        try:
            if self.lease.group:
                self.lease.group.weigh(1)   # a grading's full share from its request on, like any other
        except OSError:
            self.worker.kill()
            self.lease.release()
            return None
        return self.lease, self.worker

    def retire(self) -> None:
        """Kill it untaken and give back its uid and group; its scratch folder stays (a grading may use it)."""
        if not self.taken:
            self.taken = True
            if self.worker is not None:
                self.worker.kill()
            if self.lease is not None:
                self.lease.release()

    def discard(self) -> None:
        """Retire it, and remove its scratch folder: no grading will use it."""
        self.retire()
        if self.scratch is not None:
            remove_scratch(self.scratch)

    def _give_up(self) -> None:
        self.taken = True   # it serves nobody
        if self.lease is not None:
            self.lease.release()
        if self.scratch is not None:
            remove_scratch(self.scratch)
            self.scratch = None
        self.lease = self.worker = None
