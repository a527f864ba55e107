"""Grade one submission: stage, run probes in the sandbox, judge, and build the report."""

from __future__ import annotations

import atexit
import datetime as dt
import functools
import hashlib
import importlib.metadata
import os
import shutil
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import grader
from grader.course import Course, ExerciseConfig
from grader.i18n import Text, t, verbatim
from grader.report.model import SCHEMA_VERSION, Report
from grader.sandbox.levels import Sandbox, choose
from grader.sandbox.private import private_folder, seal
from grader.sandbox.probe_plan import probe_code_modules, probe_specs
from grader.sandbox.scratch import new_scratch, remove_scratch
from grader.sandbox.staging import Staged, stage
from grader.sandbox.session import SandboxSession
from grader.sandbox.supervisor import WARMING_SHARE, Job, Run, run_jobs
from grader.worker.protocol import Status

if TYPE_CHECKING:
    from grader.sandbox.forkserver import ForkServer

# torch, pytest and the criteria are imported by the judging server (grader/judge/server.py), never here.


def cache_root() -> Path:
    base = os.environ.get("GRADER_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "transformer-grader")
    return Path(base)


def private_cache(name: str) -> Path:
    """The cache's folder `name`, the cache and it owner-only (they hold the reference solutions and what they
    computed; at the basic level student code reads what its uid can): closed again each time, whatever made them."""
    private_folder(cache_root())
    return private_folder(cache_root() / name)


def probe_order(ex: ExerciseConfig) -> list[str]:
    """The exercise's probe names in order, read from the probe module's source: the judge need not import
    what the worker runs (some probe modules import heavy parts of torch)."""
    return [name for name, _ in probe_specs(ex.probes_file)]


def job_for(ex: ExerciseConfig, student_file: Path) -> Job:
    return Job(id=ex.id, student_file=student_file, module_name=ex.module_name, probes_file=ex.probes_file,
               limits=ex.limits, forbidden=ex.forbidden)


def summary_of(ex: ExerciseConfig, run: Run | None) -> dict | None:
    """How the exercise's run ended, as the judge reads it (grader/judge/observations.py's RunSummary, as JSON)."""
    if run is None:
        return None
    return {"limit": run.limit, "signal": run.signal, "exit": run.exit, "failure": _said(run.failure),
            **ex.limits.to_dict(), "acks": run.acks, "grader_fault": _said(run.grader_fault),
            "forbidden": list(run.forbidden), "served_seed": run.served_seed}


def _said(said) -> dict | str:
    """A sentence as JSON: every language's words of a Text, or a plain string as it is."""
    return said.texts() if isinstance(said, Text) else (said or "")


def reference_folders(course: Course, exercises: list[ExerciseConfig]) -> dict[str, Path]:
    """The observations of the same probes run on the reference solutions, cached on disk by everything that
    could change them; computed here when the cache lacks them."""
    if course.references is not None:   # a handout's checker: stored, for its visible criteria only
        return {ex.id: course.references / ex.id for ex in exercises}
    refs: dict[str, Path] = {}
    missing: list[tuple[ExerciseConfig, Path]] = []
    cache = private_cache("references")
    for ex in exercises:
        folder = cache / f"{ex.id}-{reference_key(course, ex)}"
        if not (folder / "obs" / "complete").exists():
            missing.append((ex, folder))
        refs[ex.id] = folder / "obs"
    if missing:
        with tempfile.TemporaryDirectory(prefix="grader-ref-") as tmp:
            jobs = []
            for ex, _ in missing:
                target = Path(tmp) / ex.id / ex.file
                target.parent.mkdir(parents=True)
                shutil.copyfile(course.solution(ex), target)
                jobs.append(job_for(ex, target))
            runs = run_jobs(jobs, course.seed, choose("none"), Path(tmp))
            for (ex, folder), job in zip(missing, jobs, strict=True):
                run = runs[ex.id]
                if run.failure or run.limit or run.signal is not None or run.exit:
                    raise RuntimeError(f"the reference solution of {ex.id} did not run cleanly: {run}")
                (job.obs_dir / "complete").write_text("")
                staging = Path(tempfile.mkdtemp(dir=folder.parent, prefix=f".{folder.name}."))
                shutil.copytree(job.obs_dir, staging / "obs")   # the observations only, not the solution
                seal(staging)   # copytree gave it the modes of the run's folders
                try:
                    os.rename(staging, folder)
                except OSError:  # another grader stored the same key first: theirs is as good
                    shutil.rmtree(staging, ignore_errors=True)
    return refs


@functools.cache
def torch_version() -> str:
    """The installed torch's version, read from its metadata file once per process (a report names it: parsing that
    file for each of a class's reports cost more than writing one of their files)."""
    return importlib.metadata.version("torch")


def reference_key(course: Course, ex: ExerciseConfig) -> str:
    """Solution content, the exercise's probe code (as staged), worker code, seed and torch version: any change makes
    a new key."""
    h = hashlib.sha256()
    h.update(course.solution(ex).read_bytes())
    package = Path(grader.__file__).parent
    for name, path in probe_code_modules(ex.probes_file):
        h.update(name.encode() + b"\0" + Path(path).read_bytes())
    for source in sorted([*(package / "probes").glob("*.py"), *(package / "worker").glob("*.py")]):
        h.update(source.name.encode() + b"\0" + source.read_bytes())
    h.update(f"{ex.id}|{course.seed}|{torch_version()}|{grader.__version__}".encode())
    return h.hexdigest()[:16]


@dataclass
class Probed:
    """A submission staged for its probes, then probed: what the judge needs, and the scratch it must remove.
    `runs` fills in as the supervisor ends each exercise; `arrived` tells the judge, which may wait on it."""

    course: Course
    submission: Path
    exercises: list[ExerciseConfig]
    sandbox: Sandbox
    reference_dirs: dict[str, Path]
    scratch: Path
    staged: dict[str, Staged]
    started_at: str
    t0: float
    runs: dict[str, Run] = field(default_factory=dict)
    answers: dict[str, dict[str, str]] = field(default_factory=dict)   # exercise -> question -> the written answer
    arrived: threading.Condition = field(default_factory=threading.Condition)
    over: bool = False   # the supervisor is done with the sandbox: no run will arrive any more

    @property
    def jobs(self) -> list[Job]:
        return [job_for(ex, self.staged[ex.id].path) for ex in self.exercises if self.staged[ex.id].path is not None]

    def add(self, run: Run) -> None:
        with self.arrived:
            self.runs[run.id] = run
            self.arrived.notify_all()

    def close(self) -> None:
        with self.arrived:
            self.over = True
            self.arrived.notify_all()

    def run_of(self, exercise_id: str) -> Run | None:
        """The exercise's run, once the supervisor has ended it (None: the exercise had no job, or none came)."""
        if self.staged[exercise_id].path is None:
            return None
        with self.arrived:
            self.arrived.wait_for(lambda: exercise_id in self.runs or self.over)
            return self.runs.get(exercise_id)


def staged_for_probes(course: Course, submission: Path, exercise_ids: list[str], sandbox: Sandbox,
                      session: SandboxSession | None = None) -> Probed:
    """The references ready and the submission staged into a scratch folder (the pre-started sandbox's, when
    one was started), nothing run yet: `run_probes` runs it."""
    started_at = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    t0 = time.monotonic()
    scratch: Path | None = None
    try:
        exercises = [course.exercise(e) for e in exercise_ids]
        reference_dirs = reference_folders(course, exercises)
        scratch = session.scratch if session is not None and session.scratch is not None else new_scratch()
        staged = {ex.id: stage(submission, ex.id, ex.file, course.stub(ex), scratch / ex.id) for ex in exercises}
    except BaseException:
        if session is not None:
            session.discard()   # no other submission may have it
        if scratch is not None:
            remove_scratch(scratch)
        raise
    return Probed(course, submission, exercises, sandbox, reference_dirs, scratch, staged, started_at, t0,
                  answers=written_answers(submission, exercises))


def written_answers(submission: Path, exercises: list[ExerciseConfig]) -> dict[str, dict[str, str]]:
    """The submission's written answers, read with the files staged: carried in the report as text."""
    from grader.grading.answers import read_answers

    return {ex.id: read_answers(submission, ex).texts for ex in exercises if ex.questions}


def run_in_sandbox(probed: Probed, session: SandboxSession | None = None, server: ForkServer | None = None) -> None:
    """Run the staged submission's probes in its sandbox (`session`'s when it serves them; else one started for them,
    forked from `server` when given); each exercise's run reaches `probed` as it ends."""
    try:
        jobs = probed.jobs
        if jobs:
            run_jobs(jobs, probed.course.seed, probed.sandbox, probed.scratch, probed.course.uids,
                     session=session, on_run=probed.add, server=server)
    finally:
        if session is not None:
            session.retire()   # taken by run_jobs, or (no job) unused: it serves no other submission
        probed.close()


def prestart(course: Course, sandbox: Sandbox, exercise_ids: list[str] | None = None,
             share: float = WARMING_SHARE, server: ForkServer | None = None) -> SandboxSession:
    """A sandbox started now for a submission to come (able to run `exercise_ids`, default all; its worker forked
    from `server` when given), warm when its request comes. When none can be had now (every grading uid held, say)
    the session says why in `failure` (`said_failure`): that submission's sandbox is then started for it, as
    without this, and a failure to start that one is its report's. It dies with the calling thread."""
    exercises = [course.exercise(e) for e in exercise_ids or [ex.id for ex in course.exercises]]
    return SandboxSession(sandbox, {ex.id: ex.probes_file for ex in exercises}, course.uids, share, server)


def said_failure(session: SandboxSession) -> Text | None:
    """Why the session's sandbox could not be started ahead of its submission, in words (None: it was)."""
    if not session.failure:
        return None
    return t("no sandbox could be started ahead of the submission ({reason}); one is started for it when it comes",
             reason=verbatim(session.failure))


def fork_server(course: Course, sandbox: Sandbox) -> ForkServer | None:
    """A fork server for the course's workers when the course asks for one (`[sandbox] fork_server`) and the level
    has namespaces (strict); None otherwise, or when it would not start (said on stderr): workers are then
    started afresh. It dies with the calling thread, and every worker it forked with it."""
    if not course.fork_server or sandbox.level != "strict":
        return None
    from grader.sandbox.forkserver import ForkServer, ForkServerUnavailable
    from grader.sandbox.probe_plan import preload

    try:
        return ForkServer(sandbox, preload(list(dict.fromkeys(ex.probes_file for ex in course.exercises))))
    except (ForkServerUnavailable, OSError) as exc:
        print("grader: " + t("the fork server would not start ({reason}); each sandbox is started afresh",
                             reason=verbatim(str(exc)[:500])).render("en"), file=sys.stderr)
        return None


def probe_submission(course: Course, submission: Path, exercise_ids: list[str], sandbox: Sandbox,
          session: SandboxSession | None = None, server: ForkServer | None = None) -> Probed:
    """Stage the submission and run its probes in a fresh sandbox (or `session`'s, started for it ahead of
    time; a sandbox started here is forked from `server` when given); the caller hands the result to `judged`."""
    probed = staged_for_probes(course, submission, exercise_ids, sandbox, session)
    try:
        run_in_sandbox(probed, session, server)
    except BaseException:
        remove_scratch(probed.scratch)
        raise
    return probed


def reference_request(probed: Probed) -> list[dict]:
    """What the judge needs to prepare for a submission's exercises before their runs end: their references."""
    return [{"id": ex.id, "file": ex.file, "probes": probe_order(ex), "reference": str(probed.reference_dirs[ex.id])}
            for ex in probed.exercises]


def judge_request(probed: Probed) -> list[dict]:
    """What the judge needs of each exercise of a probed submission (grader/judge/channel.py): where its
    observations and references are, how its run ended, how it was staged. Every run has ended."""
    entries = []
    for ex in probed.exercises:
        st = probed.staged[ex.id]
        entries.append({"id": ex.id, "file": ex.file, "probes": probe_order(ex),
                        "obs": str(probed.scratch / ex.id / "obs") if st.path else None,
                        "run": summary_of(ex, probed.run_of(ex.id)),
                        "staged": {"status": st.status, "message": st.message.texts() if st.message else None},
                        "reference": str(probed.reference_dirs[ex.id])})
    return entries


_judges: dict[tuple, object] = {}
_judges_lock = threading.Lock()


@atexit.register
def _close_judges() -> None:
    """Each judging server ends with this process, waited for (its time is this process's children's)."""
    with _judges_lock:
        judges = list(_judges.values())
    for judge in judges:
        judge.close()


def judge_for(course: Course):
    """This process's judge for the course: a judging server (grader/judge/server.py), started on first use and
    kept for every later grading here, which judges each submission in a child process of its own under the
    course's judge limits. Where no process can be forked (not Linux: a student's own machine, where what a
    submission costs falls on that student alone) the judge runs in this process, unlimited."""
    if sys.platform != "linux" or not hasattr(os, "fork") or not hasattr(os, "wait4"):
        from grader.judge.session import InProcessJudge

        return InProcessJudge(course.solutions)
    from grader.judge.client import JudgeClient

    key = (course.root, tuple(ex.id for ex in course.exercises), course.judge_limits, course.solutions)
    with _judges_lock:
        if key not in _judges:
            _judges[key] = JudgeClient([ex.id for ex in course.exercises], course.judge_limits, course.solutions)
        return _judges[key]


def judge_outcomes(judge, probed: Probed) -> dict:
    """The judge's outcomes of a probed submission; when the judge itself could not run (its server would not
    start, or died), every criterion is the grader's error with the reason, graded again later."""
    from grader.judge.client import JudgeUnavailable

    try:
        return judge.judge(judge_request(probed))
    except JudgeUnavailable as exc:
        return unavailable_outcomes(probed.course, probed.exercises, exc)


def unavailable_outcomes(course: Course, exercises: list[ExerciseConfig], exc: Exception) -> dict:
    """Every criterion the grader's error: the judge could not run."""
    from grader.judge.criterion import Outcome
    from grader.judge.listing import criteria_of

    said = t("the judge could not run ({error}): this is the grader's fault, no point is taken for it, and the "
             "submission will be graded again", error=verbatim(str(exc)[:300])).texts()
    return {ex.id: [Outcome(meta, Status.GRADER_ERROR, said, {}) for meta in criteria_of(ex.id, course.solutions)]
            for ex in exercises}


def judged(probed: Probed, judge=None, keep=None) -> Report:
    """Judge a probed submission against the references (with `judge`, default this process's judge for its
    course), once its probes have all run, and build its report; its scratch is removed. `keep`, when given, is
    called with the probed submission before the judge reads it (to keep its observations: grader.grading.rejudge)."""
    course, exercises, scratch = probed.course, probed.exercises, probed.scratch
    try:
        with probed.arrived:   # the sandbox is gone before the judge reads what it left
            probed.arrived.wait_for(lambda: probed.over)
        if keep is not None:
            keep(probed)
        outcomes = judge_outcomes(judge or judge_for(course), probed)
        runs = {ex.id: run for ex in exercises if (run := probed.run_of(ex.id)) is not None}
    finally:
        remove_scratch(scratch)
    return build_report(course, probed.submission.name, exercises, outcomes, runs, probed.sandbox.describe(),
                        probed.started_at, round(time.monotonic() - probed.t0, 3), probed.answers)


def build_report(course: Course, name: str, exercises: list[ExerciseConfig], outcomes: dict, runs: dict[str, Run],
                 sandbox: dict, started_at: str, duration_s: float,
                 answers: dict[str, dict[str, str]] | None = None) -> Report:
    """A submission's report from the judge's outcomes, how each exercise's run went and its written answers: a
    grading's, or a re-judging's of what a grading kept."""
    from grader.report.build import exercise_result

    results = [exercise_result(ex, outcomes[ex.id], run_facts(ex, runs.get(ex.id), outcomes[ex.id]),
                               (answers or {}).get(ex.id)) for ex in exercises]
    score = round(sum(r.score for r in results), 4)
    max_score = round(sum(r.max_score for r in results), 4)
    return Report(schema_version=SCHEMA_VERSION, submission=name, course=course.name, score=score,
                  max_score=max_score, percent=round(100 * score / max_score, 2) if max_score else 0.0,
                  sandbox=sandbox, grader_version=grader.__version__,
                  torch_version=torch_version(), started_at=started_at,
                  duration_s=duration_s, exercises=results)


def grade(course: Course, submission: Path, exercise_ids: list[str], sandbox: Sandbox, keep=None) -> Report:
    """Stage and probe in a supervisor thread while this process's judge starts (importing torch, pytest and the
    criteria on the other core), then judge (`keep`: as `judged` takes it)."""
    staged: list[Probed] = []
    failures: list[BaseException] = []
    launched, ready = threading.Event(), threading.Event()

    def supervise() -> None:
        server = None
        try:
            # The sandbox starts first: it imports torch while the submission is staged and the references found.
            # With the course's fork server, that server is what imports it (this thread's, gone with it).
            server = fork_server(course, sandbox)
            if server is not None:
                launched.set()   # on its way: the judge may start while it imports torch
            session = prestart(course, sandbox, exercise_ids, share=1, server=server)
            launched.set()
            staged.append(staged_for_probes(course, submission, exercise_ids, sandbox, session))
            ready.set()
            run_in_sandbox(staged[0], session, server)
        except BaseException as exc:  # noqa: BLE001 - re-raised in this thread below
            failures.append(exc)
        finally:
            launched.set()
            ready.set()
            if server is not None:
                server.close()

    worker = threading.Thread(target=supervise, name="supervisor")
    worker.start()
    launched.wait()   # once the sandbox is on its way, so that the two do not contend for the processor before
    judge = judge_for(course)
    judge.start()
    ready.wait()
    if staged:   # the server reads the references and runs their criteria once while the probes run
        judge.prepare(reference_request(staged[0]))
    worker.join()
    if not staged:
        raise failures[0]
    if failures:   # the supervisor failed after staging: its scratch goes, and no report is made
        remove_scratch(staged[0].scratch)
        raise failures[0]
    return judged(staged[0], judge, keep)


def run_facts(ex: ExerciseConfig, run: Run | None, outcomes: list = ()) -> dict:
    """How the exercise's run went, with its limits and the one it hit. A limit the worker saw ends the run
    (time, cpu, output, file_size); one the student's code hit and survived long enough to report (memory,
    file size, as MemoryError or "File too large") is found in the verdicts."""
    if run is None:
        return {}
    limit = run.limit or next((o.evidence["limit"] for o in outcomes
                               if o.status in (Status.CRASHED, Status.TIMEOUT) and o.evidence.get("limit")), None)
    return {"wall_s": run.wall_s, "cpu_s": run.cpu_s, "max_rss_mb": run.max_rss_mb, "limit": limit,
            "limits": {"time_s": ex.limits.timeout_s, "memory_mb": ex.limits.memory_mb,
                       "output_kb": ex.limits.output_kb},
            "output_bytes": run.output_bytes, "output_tail": run.output_tail[-2000:]}
