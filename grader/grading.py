"""Grade one submission: stage, run probes in the sandbox, judge, and build the report."""

from __future__ import annotations

import ast
import datetime as dt
import hashlib
import importlib.metadata
import importlib.util
import os
import shutil
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import grader
from grader.course import Course, ExerciseConfig
from grader.report.model import SCHEMA_VERSION, Report
from grader.sandbox.levels import Sandbox, choose
from grader.sandbox.scratch import new_scratch, remove_scratch
from grader.sandbox.staging import Staged, stage
from grader.sandbox.supervisor import Job, Run, run_jobs

# torch, pytest and the judge are imported only once the worker is running: both then import in parallel.


def cache_root() -> Path:
    base = os.environ.get("GRADER_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "transformer-grader")
    return Path(base)


def probe_order(ex: ExerciseConfig) -> list[str]:
    """The exercise's probe names in order, read from the probe module's source: the judge need not import
    what the worker runs (some probe modules import heavy parts of torch)."""
    spec = importlib.util.find_spec(ex.probes_module)
    tree = ast.parse(Path(spec.origin).read_text(encoding="utf-8"))
    names = []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            for d in node.decorator_list:
                target = d.func if isinstance(d, ast.Call) else d
                if isinstance(target, ast.Name) and target.id == "probe":
                    names.append(node.name)
    return names


def job_for(ex: ExerciseConfig, student_file: Path) -> Job:
    return Job(id=ex.id, student_file=student_file, module_name=ex.module_name, probes_module=ex.probes_module,
               timeout_s=ex.timeout_s, memory_mb=ex.memory_mb, output_kb=ex.output_kb, forbidden=ex.forbidden,
               disk_mb=ex.disk_mb, files=ex.files)


def summary_of(ex: ExerciseConfig, run: Run | None):
    from grader.judge.observations import RunSummary

    if run is None:
        return None
    return RunSummary(limit=run.limit, signal=run.signal, exit=run.exit, failure=run.failure,
                      timeout_s=ex.timeout_s, memory_mb=ex.memory_mb, output_kb=ex.output_kb, acks=run.acks,
                      grader_fault=run.grader_fault, disk_mb=ex.disk_mb, files=ex.files)


def reference_folders(course: Course, exercises: list[ExerciseConfig]) -> dict[str, Path]:
    """The observations of the same probes run on the reference solutions, cached on disk by everything that
    could change them; computed here when the cache lacks them."""
    if course.references is not None:   # a handout's checker: stored, for its visible criteria only
        return {ex.id: course.references / ex.id for ex in exercises}
    refs: dict[str, Path] = {}
    missing: list[tuple[ExerciseConfig, Path]] = []
    for ex in exercises:
        folder = cache_root() / "references" / f"{ex.id}-{reference_key(course, ex)}"
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
            for (ex, folder), job in zip(missing, jobs):
                run = runs[ex.id]
                if run.failure or run.limit or run.signal is not None or run.exit:
                    raise RuntimeError(f"the reference solution of {ex.id} did not run cleanly: {run}")
                (job.obs_dir / "complete").write_text("")
                folder.parent.mkdir(parents=True, exist_ok=True)
                staging = Path(tempfile.mkdtemp(dir=folder.parent, prefix=f".{folder.name}."))
                shutil.copytree(job.workdir, staging, dirs_exist_ok=True)
                try:
                    os.rename(staging, folder)
                except OSError:  # another grader stored the same key first: theirs is as good
                    shutil.rmtree(staging, ignore_errors=True)
    return refs


def reference_key(course: Course, ex: ExerciseConfig) -> str:
    """Solution content, probe and worker code, seed and torch version: any change makes a new key."""
    h = hashlib.sha256()
    h.update(course.solution(ex).read_bytes())
    package = Path(grader.__file__).parent
    for source in sorted([*(package / "probes").glob("*.py"), *(package / "worker").glob("*.py")]):
        h.update(source.name.encode() + b"\0" + source.read_bytes())
    h.update(f"{ex.id}|{course.seed}|{importlib.metadata.version('torch')}|{grader.__version__}".encode())
    return h.hexdigest()[:16]


@dataclass
class Probed:
    """A submission whose probes have run: what the judge needs, and the scratch it must remove."""

    course: Course
    submission: Path
    exercises: list[ExerciseConfig]
    sandbox: Sandbox
    reference_dirs: dict[str, Path]
    scratch: Path
    staged: dict[str, Staged]
    runs: dict[str, Run]
    started_at: str
    t0: float


def probe(course: Course, submission: Path, exercise_ids: list[str], sandbox: Sandbox) -> Probed:
    """Stage the submission and run its probes in a fresh sandbox; the caller hands the result to `judged`."""
    started_at = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    t0 = time.monotonic()
    exercises = [course.exercise(e) for e in exercise_ids]
    reference_dirs = reference_folders(course, exercises)
    scratch = new_scratch()
    try:
        staged = {ex.id: stage(submission, ex.id, ex.file, course.stub(ex), scratch / ex.id) for ex in exercises}
        jobs = [job_for(ex, staged[ex.id].path) for ex in exercises if staged[ex.id].path is not None]
        runs = run_jobs(jobs, course.seed, sandbox, scratch, course.uids) if jobs else {}
    except BaseException:
        remove_scratch(scratch)
        raise
    return Probed(course, submission, exercises, sandbox, reference_dirs, scratch, staged, runs, started_at, t0)


def judged(probed: Probed) -> Report:
    """Judge a probed submission against the references and build its report; its scratch is removed."""
    from grader.judge.observations import Observations, RunSummary
    from grader.judge.session import judge
    from grader.report.build import exercise_result

    course, exercises, scratch = probed.course, probed.exercises, probed.scratch
    try:
        references = {ex.id: Observations(ex.id, ex.file, probe_order(ex), probed.reference_dirs[ex.id], RunSummary())
                      for ex in exercises}
        observations = {}
        for ex in exercises:
            st = probed.staged[ex.id]
            observations[ex.id] = Observations(
                ex.id, ex.file, probe_order(ex), scratch / ex.id / "obs" if st.path else None,
                summary_of(ex, probed.runs.get(ex.id)), st.status, st.message)
        outcomes = judge([ex.id for ex in exercises], observations, references)
        results = [exercise_result(ex, outcomes[ex.id], run_facts(ex, probed.runs.get(ex.id), outcomes[ex.id]))
                   for ex in exercises]
    finally:
        remove_scratch(scratch)
    score = round(sum(r.score for r in results), 4)
    max_score = round(sum(r.max_score for r in results), 4)
    return Report(schema_version=SCHEMA_VERSION, submission=probed.submission.name, course=course.name, score=score,
                  max_score=max_score, percent=round(100 * score / max_score, 2) if max_score else 0.0,
                  sandbox=probed.sandbox.describe(), grader_version=grader.__version__,
                  torch_version=importlib.metadata.version("torch"),
                  seed=course.seed, started_at=probed.started_at, duration_s=round(time.monotonic() - probed.t0, 3),
                  exercises=results)


def grade(course: Course, submission: Path, exercise_ids: list[str], sandbox: Sandbox) -> Report:
    probed: list[Probed] = []
    failures: list[BaseException] = []

    def run_probes() -> None:
        try:
            probed.append(probe(course, submission, exercise_ids, sandbox))
        except BaseException as exc:  # noqa: BLE001 - re-raised in this thread below
            failures.append(exc)

    worker = threading.Thread(target=run_probes, name="supervisor")
    worker.start()
    # While the worker imports torch and runs the probes (it mostly waits on the student's code), the judge
    # imports its own heavy modules on the other core.
    import grader.judge.observations  # noqa: F401
    import grader.judge.session  # noqa: F401
    import grader.report.build  # noqa: F401

    worker.join()
    if failures:
        raise failures[0]
    return judged(probed[0])


def run_facts(ex: ExerciseConfig, run: Run | None, outcomes: list = ()) -> dict:
    """How the exercise's run went, with its limits and the one it hit. A limit the worker saw ends the run
    (time, cpu, output, file_size); one the student's code hit and survived long enough to report (memory,
    file size, as MemoryError or "File too large") is found in the verdicts."""
    if run is None:
        return {}
    limit = run.limit or next((o.evidence["limit"] for o in outcomes
                               if o.status in ("crashed", "timeout") and o.evidence.get("limit")), None)
    return {"wall_s": run.wall_s, "cpu_s": run.cpu_s, "max_rss_mb": run.max_rss_mb, "limit": limit,
            "limits": {"time_s": ex.timeout_s, "memory_mb": ex.memory_mb, "output_kb": ex.output_kb},
            "output_bytes": run.output_bytes, "output_tail": run.output_tail[-2000:]}
