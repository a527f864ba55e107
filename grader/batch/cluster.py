"""`grader batch --cluster`: grade on Dask workers, on this machine or many, with no shared file system.

A task carries what the grader reads and nothing else: the course (course.toml, the stubs, the solutions with each
exercise's probes and criteria and the code they share, the report templates) and the submission's exercise files
and the notebooks that may stand in for them, each read without following a link. The worker materialises both in
its own folders, grades through its warm grading process (grader/batch/warm.py) and returns the reply; the client
alone writes reports and the gradebook. A task whose worker dies is retried on another; a second death is that
submission's verdict (`killed_workers`), so no submission kills workers forever.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import threading
import tomllib
from collections.abc import Callable
from pathlib import Path

from grader.i18n import t, verbatim
from grader.course import COURSE_FILE, CRITERIA_FILE, LIB, PROBES_FILE, Course, load_course
from grader.batch.gradebook import KILLED_WORKERS, grader_key
from grader.nolinks import LINK, REGULAR, read_without_links
from grader.batch.pool import PIPELINE, time_limit

JOBQUEUE_KINDS = {"slurm": "SLURMCluster", "pbs": "PBSCluster", "sge": "SGECluster", "lsf": "LSFCluster",
                  "htcondor": "HTCondorCluster", "moab": "MoabCluster", "oar": "OARCluster"}
JOBQUEUE_DEFAULTS = {"cores": 1, "processes": 1, "memory": "4GB"}   # one grading slot per job
ALLOWED_FAILURES = 1      # worker deaths a task survives: retried once elsewhere, then recorded
MAX_FILE_BYTES = 2 << 20  # what content_hash reads of an exercise file: the grader reads no more
TASKS_PER_THREAD = 2      # tasks in flight per worker thread: workers never idle, the client holds little


class ClusterError(Exception):
    """The cluster named cannot be reached or started, or may not be used; the message says why."""


def refuse_basic(sandbox: str, lang: str) -> None:
    """A Dask worker runs whatever any client of its scheduler sends it, as the user it runs as (root, for the
    strict level). At the basic level student code shares the worker's host and network, and the scheduler's
    address is in the worker's command line: it could send the worker a function of its own. Only the strict
    level (no network, no view of other processes) may grade on a cluster."""
    if sandbox == "basic":
        raise ClusterError(t("--cluster grades only with --sandbox strict: at the basic level student code can reach "
                             "the Dask scheduler and run code in the workers").render(lang))


def cluster_settings(course: Course, kind: str, options: dict) -> dict:
    """A dask-jobqueue cluster's arguments: the defaults, then course.toml's [cluster.<kind>], then the flags."""
    data = tomllib.loads((course.root / COURSE_FILE).read_text(encoding="utf-8"))
    return {**JOBQUEUE_DEFAULTS, **data.get("cluster", {}).get(kind, {}), **options}


def connect(spec: str, jobs: int, settings: dict):
    """A Dask client and the cluster this process started for it (None for a scheduler already running)."""
    import dask
    from distributed import Client, LocalCluster

    # Read by schedulers this process starts; a scheduler started elsewhere is told in the README.
    dask.config.set({"distributed.scheduler.allowed-failures": ALLOWED_FAILURES})
    if spec == "local":
        # Workers as threads of this process: each still grades through a warm process of its own, and none
        # has to start an interpreter and import Dask first. PIPELINE threads each, as the pool feeds a warm
        # process: it judges one submission while the next one's probes run.
        cluster = LocalCluster(n_workers=jobs, threads_per_worker=PIPELINE, processes=False, dashboard_address=None)
    elif spec in JOBQUEUE_KINDS:
        try:
            import dask_jobqueue
        except ImportError:
            raise ClusterError(f"--cluster {spec} needs dask-jobqueue: "
                               "pip install 'transformer-grader[cluster]'") from None
        cluster = getattr(dask_jobqueue, JOBQUEUE_KINDS[spec])(**settings)
        cluster.scale(jobs)
    elif "://" in spec:
        try:
            return Client(spec, timeout="30s"), None
        except OSError as exc:
            raise ClusterError(f"no Dask scheduler answers at {spec}: {exc}") from None
    else:
        raise ClusterError(f"--cluster {spec!r}: use local, a scheduler address (tcp://HOST:8786) or one of "
                           f"{', '.join(JOBQUEUE_KINDS)}")
    return Client(cluster), cluster


def course_files(course: Course) -> dict[str, bytes]:
    """What a worker needs of the course, by path relative to its root."""
    paths = [COURSE_FILE,
             *(p.relative_to(course.root).as_posix() for p in sorted((course.root / "templates").glob("*.j2")))]
    grading = [course.solutions / ex.id / name for ex in course.exercises for name in (PROBES_FILE, CRITERIA_FILE)]
    for path in [*(course.stub(ex) for ex in course.exercises), *(course.solution(ex) for ex in course.exercises),
                 *grading, *sorted((course.solutions / LIB).glob("*.py"))]:
        paths.append(path.relative_to(course.root).as_posix())
    return {p: (course.root / p).read_bytes() for p in paths if (course.root / p).is_file()}


def submission_files(course: Course, folder: Path) -> dict[str, tuple[str, bytes | str]]:
    """Each exercise's file as the grader would find it: its bytes, the component that is a link, or its absence;
    and, by their path inside the submission, the notebooks staging may read in an exercise's place."""
    from grader.grading.notebooks import MAX_NOTEBOOK_BYTES, notebook_paths

    found: dict[str, tuple[str, bytes | str]] = {}
    for ex in course.exercises:
        try:
            lookup = read_without_links(folder, (ex.id, ex.file), MAX_FILE_BYTES)
        except OSError:
            found[ex.id] = ("unreadable", b"")
            continue
        found[ex.id] = (REGULAR, lookup.data) if lookup.kind == REGULAR else (lookup.kind, lookup.link)
    for relative in notebook_paths(folder, [ex.id for ex in course.exercises]):
        try:   # past the cap by one byte: the worker refuses it as staging here would
            lookup = read_without_links(folder, tuple(relative.split("/")), MAX_NOTEBOOK_BYTES + 1)
        except OSError:
            continue
        if lookup.kind in (REGULAR, LINK):
            found[relative] = (REGULAR, lookup.data) if lookup.kind == REGULAR else (LINK, lookup.link)
    return found


def rebuild_submission(course: Course, files: dict[str, tuple[str, bytes | str]], target: Path) -> None:
    """The submission again, on the worker: regular files as they were, a link as a link (never to be followed:
    staging refuses it by its name, as on the client), anything else as what staging cannot read."""
    from grader.grading.notebooks import SUFFIX

    for ex in course.exercises:
        kind, payload = files.get(ex.id, ("absent", b""))
        path = target / ex.id / ex.file
        if kind == REGULAR:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(payload)
        elif kind == LINK:
            link = target / payload
            link.parent.mkdir(parents=True, exist_ok=True)
            link.symlink_to("/nonexistent")
        elif kind != "absent":
            path.mkdir(parents=True, exist_ok=True)   # not a regular file, as the client saw it
    for relative, (kind, payload) in files.items():   # the notebooks, by their path
        if not relative.endswith(SUFFIX) or ".." in relative.split("/"):
            continue
        if kind == REGULAR:
            path = target.joinpath(*relative.split("/"))
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(payload)
        elif kind == LINK and not os.path.lexists(target / payload):   # an exercise's folder, linked: made above
            (target / payload).parent.mkdir(parents=True, exist_ok=True)
            (target / payload).symlink_to("/nonexistent")


def _digest(files: dict[str, bytes]) -> str:
    h = hashlib.sha256()
    for name in sorted(files):
        h.update(name.encode() + b"\0" + files[name] + b"\0")
    return h.hexdigest()[:20]


_graders: dict = {}   # warm graders by (worker, course folder, sandbox level): a worker's threads share one
_course_lock = threading.Lock()


def _course_here(files: dict[str, bytes]) -> Path:
    """The course written under this worker's cache, once per content."""
    from grader.grading.pipeline import private_cache
    from grader.sandbox.private import seal

    with _course_lock:
        folder = private_cache("courses") / _digest(files)   # it holds the solutions: owner-only
        if not (folder / COURSE_FILE).is_file():
            staging = Path(tempfile.mkdtemp(dir=folder.parent, prefix=f".{folder.name}."))
            for name, data in files.items():
                (staging / name).parent.mkdir(parents=True, exist_ok=True)
                (staging / name).write_bytes(data)
            seal(staging)
            try:
                os.rename(staging, folder)
            except OSError:   # another process of this worker's host wrote it first
                shutil.rmtree(staging, ignore_errors=True)
    return folder


def grade_on_worker(course: dict[str, bytes], key: str, submission: dict, sandbox: str, lang: str) -> dict:
    """The Dask task: the same reply a warm grading process gives, never an exception for a grading fault."""
    from distributed import get_worker

    from grader.batch.warm import GradingTimeout, WarmGrader, WarmGraderDied

    try:
        root = _course_here(course)
        here = load_course(root)
        if grader_key(here) != key:
            return {"error": t("this worker runs grader {worker}, the client {client}", worker=grader_key(here),
                               client=key).texts()}
        with _course_lock:
            grader = _graders.setdefault((get_worker().address, root, sandbox), WarmGrader(root, sandbox))
        with tempfile.TemporaryDirectory(prefix="grader-task-") as tmp:
            folder = Path(tmp) / "submission"
            folder.mkdir()
            rebuild_submission(here, submission, folder)
            return grader.grade(folder, [ex.id for ex in here.exercises], lang, time_limit(here))
    except (GradingTimeout, WarmGraderDied) as exc:
        return {"error": exc.said.texts()}
    except Exception as exc:  # noqa: BLE001 - a worker-side failure is the submission's grader_error
        return {"error": t("on the worker: {error}", error=verbatim(f"{type(exc).__name__}: {exc}")).texts()}


class DaskEngine:
    def __init__(self, course: Course, jobs: int, sandbox: str, lang: str, spec: str, options: dict):
        refuse_basic(sandbox, lang)
        self.course, self.sandbox, self.lang = course, sandbox, lang
        settings = cluster_settings(course, spec, options) if spec in JOBQUEUE_KINDS else {}
        self.client, self._cluster = connect(spec, max(1, jobs), settings)

    def replies(self, submissions: list[tuple[object, Path]], started: Callable[[object], None] = lambda tag: None):
        """(tag, reply) for each (tag, submission folder) as they finish, a bounded number in flight; `started(tag)`
        is called when the submission is sent to the cluster."""
        from distributed import as_completed
        from distributed.scheduler import KilledWorker

        files, key = course_files(self.course), grader_key(self.course)
        waiting = list(reversed(submissions))
        tags = {}

        def submit_more(done) -> None:
            window = TASKS_PER_THREAD * max(1, sum(self.client.nthreads().values()))
            while waiting and len(tags) < window:
                tag, folder = waiting.pop()
                future = self.client.submit(grade_on_worker, files, key, submission_files(self.course, folder),
                                            self.sandbox, self.lang, pure=False)
                tags[future] = tag
                done.add(future)
                started(tag)

        completed = as_completed()
        submit_more(completed)
        for future in completed:
            tag = tags.pop(future)
            try:
                reply = future.result()
            except KilledWorker:
                reply = {"final_status": KILLED_WORKERS,
                         "error": t("every Dask worker that graded it died while grading it; not retried "
                                    "(--regrade tries again)").texts()}
            except Exception as exc:  # noqa: BLE001 - the cluster lost it: graded again by the next run
                if self.client.status != "running":   # the scheduler is gone: every task left would fail alike
                    raise ClusterError(f"lost the Dask scheduler ({exc}); every submission graded so far is kept: "
                                       "run the same command again to finish") from None
                reply = {"error": t("the cluster could not grade it: {error}",
                                    error=verbatim(f"{type(exc).__name__}: {exc}")).texts()}
            future.release()
            submit_more(completed)
            yield tag, reply

    def close(self) -> None:
        self.client.close()
        if self._cluster is not None:
            self._cluster.close()
