"""Hostile and broken submissions (tests/hostile/<case>/): the grader survives every one, judges it right,
and loses nothing.

Each case is a submission-shaped folder with a `manifest.toml` saying what the report must show for the
hostile exercise (status, score, criterion statuses, the words of the message, the limit hit); the keys are
listed in tests/hostile/README.md. Files that cannot live in git (links to /etc/shadow, non-UTF-8 bytes, 1 GB
files, a shipped conftest.py, torch.py or .pth) are made here at run time (`build` in the manifest). For
every grading, whatever the case, this test also checks that:

- the grader exits 0 and writes a report that follows the schema;
- the other exercises of the submission (reference solutions picked from the course configuration, one
  graded before and one after the hostile one) get full marks;
- no process of the grading is left running;
- nothing outside the scratch and report folders changed: no marker file on the host, the submission
  untouched, the temporary folder empty again, only the grader's files in the report folder;
- every exercise's wall time stays within its timeout plus a few seconds;
- nothing the submission printed or wrote is taken for a verdict.

Cases with `pack = true` never start student code (staging refuses them), so several of them share one
grading, each in an exercise of its own. Cases with `twin = true` are forgeries: their file says `FORGE = True`,
and it is graded again with `FORGE = False`, the same code without the forgery; the two must score the same,
criterion by criterion (`test_forgery_gains_nothing`). Gradings run PARALLEL at a time (their processes are told
apart by the scratch folder in their environment); `exclusive = true` ones run alone. Cases with `basic = true` are
graded again without root (as `nobody` when the tests run as root) with `--sandbox basic`, to show the
recorded fallback of a machine where the strict sandbox is unavailable (no fork bomb there: without a pid
namespace it would reach the whole machine).

The gradings are dealt out to PARTS test files, tests/test_hostile_<n>.py (`PART = n`), which hold no code of their
own: pytest-xdist gives each file to one worker, so the parts are graded side by side, each with a `gradings` of its
own. One file of every case kept one worker busy for most of the suite's run.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import tomllib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from conftest import ROOT, shared_folder
from grader.course import load_course
from grader.sandbox import uids
from grader.sandbox.supervisor import GRACE_SECONDS
from grader.grading.rejudge import KEPT_FILE, STORE
from grader.render.files import DEFAULT_FORMATS, FORMATS

# end to end: every test here grades in a sandbox (`pytest -m "not slow"` leaves them out)
pytestmark = pytest.mark.slow

# what a part's file takes (`from hostile_suite import *`): the tests, their fixtures, the hook dealing the cases
__all__ = ["pytestmark", "pytest_generate_tests", "course", "gradings", "nobody_area", "test_hostile_case",
           "test_forgery_gains_nothing", "test_basic_fallback_without_root"]

CATALOG = ROOT / "tests" / "hostile"
# How far past its own timeout an exercise may run: past it, the worker did not end it and the supervisor did,
# after its grace period. The one bound that tells the two apart, whatever the machine's load.
WALL_SLACK_S = GRACE_SECONDS
# The whole grader, beyond the timeouts: torch imported in the grading and its sandboxes, next to another grading,
# on a machine others load too. A wait on one of the supervisor's own deadlines shows in the report as well.
RUN_SLACK_S = 300.0
STRAYS_SETTLE_S = 30.0       # a killed namespace takes a moment to be reaped (longer on a busy machine)
# gradings of one part at the same time (each one's processes and files are told apart): a grading waits on its
# timeouts and sandboxes most of its wall time (the catalog used about half a core per worker): three at a time
PARALLEL = 3
PARTS = 3                    # test files the gradings are dealt to (tests/test_hostile_<n>.py), graded side by side
MARKER = "hostile-marker"    # hostile cases name every file they try to leave on the host like this
STRAY = "hostile-stray"      # ... and every process they try to leave running
# what `grader grade` writes into --out: the reports, and the observations kept for `--rejudge`
GRADER_FILES = {FORMATS[f][0] for f in DEFAULT_FORMATS} | {STORE, KEPT_FILE}
LIGHT_EXERCISES = ("heads", "embedding", "masks", "attention", "layer_norm", "rope", "param_count", "decoder_block")
IS_ROOT = os.geteuid() == 0
GRADING_UIDS = (61000, 62000)   # course.toml's [sandbox] uids, as a range


@dataclass(frozen=True)
class Case:
    name: str
    manifest: dict

    @property
    def folder(self) -> Path:
        return CATALOG / self.name

    @property
    def exercise(self) -> str:
        return self.manifest["exercise"]

    @property
    def limits(self) -> dict:
        # The course's own timeout unless the manifest sets one: a short one only where the case is about time
        # (a loop, a sleep, a fork bomb). Any other hostile exercise does real work, which on a busy machine takes
        # many times its CPU time in wall time, and must not end as a timeout for it.
        return dict(self.manifest.get("limits", {}))


def load_cases() -> list[Case]:
    return [Case(p.parent.name, tomllib.loads(p.read_text())) for p in sorted(CATALOG.glob("*/manifest.toml"))]


CASES = load_cases()
PACKED = [c for c in CASES if c.manifest.get("pack")]
TWINS = [c for c in CASES if c.manifest.get("twin")]
BASIC = [c for c in CASES if c.manifest.get("basic")]


# ------------------------------------------------------------------------------------------------ the course
def healthy_exercises(course, exclude: set[str]) -> list[str]:
    """Exercises of the course configuration that can stand next to a hostile one: a reference solution and
    hidden criteria exist. Light ones first, so that neighbours cost little time."""
    usable = [e.id for e in course.exercises if e.id not in exclude and course.solution(e).is_file()
              and (course.solutions / e.id / "criteria.py").is_file() and course.stub(e).is_file()]
    return sorted(usable, key=lambda i: LIGHT_EXERCISES.index(i) if i in LIGHT_EXERCISES else len(LIGHT_EXERCISES))


def course_with_limits(folder: Path, limits: dict[str, dict]) -> Path:
    """A course folder sharing this checkout's exercises, solutions and templates, whose course.toml gives
    the named exercises limits of their own: what an instructor writes in an [[exercise]] block."""
    folder.mkdir(parents=True, exist_ok=True)
    for name in ("exercises", "solutions", "templates"):
        (folder / name).symlink_to(ROOT / name)
    head, *blocks = (ROOT / "course.toml").read_text().split("[[exercise]]")
    edited = []
    for block in blocks:
        exercise_id = re.search(r'(?m)^id = "(\w+)"', block).group(1)
        own = limits.get(exercise_id, {})
        if own:
            top, sep, rest = block.partition("\n[exercise.")
            top = "\n".join(line for line in top.split("\n") if not any(line.startswith(f"{k} =") for k in own))
            top = re.sub(r'(?m)^(id = "\w+")$',
                         lambda m, own=own: m.group(1) + "".join(f"\n{k} = {v}" for k, v in own.items()), top)
            block = top + sep + rest
        edited.append(block)
    (folder / "course.toml").write_text(head + "".join("[[exercise]]" + b for b in edited))
    return folder


# ------------------------------------------------------------------------------------------------ builders
# Files a submission ships in the hope that Python or pytest runs them. Made at run time, never kept under
# tests/: pytest would load a conftest.py found there, and a torch.py could shadow torch.
SHIPPED = """\"\"\"Hostile: shipped with the submission, in the hope that Python or pytest runs it ({name}).\"\"\"
import builtins
import sys

builtins.HOSTILE_SHIPPED_RAN = True  # the count in block.py turns right when this ran
print("SHIPPED {name} RAN", file=sys.stderr)
try:
    open("/tmp/{marker}", "w").close()  # and if it ran in the judge (as root, on the host), this shows it
except OSError:
    pass
if "{name}" == "torch.py":
    raise ImportError("a shipped torch.py shadowed the real one")
"""
SHIPPED_PTH = ("import builtins, sys; builtins.HOSTILE_SHIPPED_RAN = True; print('SHIPPED .pth RAN', file=sys.stderr); "
               "open('/tmp/{marker}', 'w').close()\n")


def build_special(case: Case, exercise_id: str, submission: Path, course, neighbours: list[str]) -> None:
    """Make the files a case cannot keep in git."""
    ex = course.exercise(exercise_id)
    target = submission / exercise_id / ex.file
    target.parent.mkdir(parents=True, exist_ok=True)
    build = case.manifest.get("build")
    if build == "symlink_shadow":
        target.symlink_to("/etc/shadow")
    elif build == "symlink_solution":
        target.symlink_to(course.solution(ex))
    elif build == "latin1_source":
        target.write_bytes(course.solution(ex).read_bytes() + "\n# café: saved as Latin-1\n".encode("latin-1"))
    elif build == "one_gigabyte":
        for big in (target, submission / neighbours[-1] / "weights.bin"):
            big.parent.mkdir(parents=True, exist_ok=True)
            with open(big, "wb") as fh:
                fh.truncate(1 << 30)  # sparse: 1 GB long, no disk used
    elif build == "stub_crlf":
        text = course.stub(ex).read_text()
        target.write_bytes("\r\n".join(line + "  " for line in text.split("\n")).encode())
    elif build == "value_error_stub":
        target.write_text(course.stub(ex).read_text().replace("raise NotImplementedError", "raise ValueError"))
    elif build == "shipped_files":
        for folder in (submission, submission / exercise_id):
            for name in ("conftest.py", "torch.py", "sitecustomize.py", "usercustomize.py"):
                (folder / name).write_text(SHIPPED.format(name=name, marker=f"{MARKER}-shipped-{name[:-3]}"))
            (folder / "hostile.pth").write_text(SHIPPED_PTH.format(marker=f"{MARKER}-shipped-pth"))
    elif build is not None:
        raise AssertionError(f"{case.name}: unknown build {build!r}")


# ------------------------------------------------------------------------------------------------ host checks
def host_places(submission: Path, tmp_root: Path) -> list[Path]:
    """Where a marker written by an escaped submission would land on the host."""
    places = [Path(p) for p in ("/tmp", "/var/tmp", "/dev/shm", "/run/lock", "/", "/root", "/etc", "/usr/local")]
    places += [ROOT, ROOT / "grader", ROOT / "reports", ROOT / "tests", Path.home(), submission, submission.parent,
               tmp_root, tmp_root.parent]
    return [p for p in dict.fromkeys(places) if p.is_dir()]


def markers_on_host(places: list[Path]) -> list[str]:
    found = []
    for place in places:
        try:
            found += [str(place / n) for n in os.listdir(place) if n.startswith(MARKER)]
        except OSError:
            pass
    return found


def tree_digest(folder: Path) -> dict[str, tuple]:
    """Every entry under folder: kind, size, mtime and link target (contents of small files too)."""
    digest = {}
    for root, dirs, files in os.walk(folder):
        for name in dirs + files:
            path = Path(root) / name
            info = os.lstat(path)
            entry = (info.st_mode, info.st_size, info.st_mtime_ns)
            if path.is_symlink():
                entry += (os.readlink(path),)
            elif path.is_file() and info.st_size < (1 << 20):
                entry += (hashlib.sha256(path.read_bytes()).hexdigest(),)
            digest[str(path.relative_to(folder))] = entry
    return digest


def _read(path: str) -> bytes:
    try:
        with open(path, "rb") as fh:
            return fh.read()
    except OSError:
        return b""


def processes() -> dict[int, tuple[int, str, str]]:
    """pid -> (uid, state, command line) of every process alive now."""
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            uid = os.stat(f"/proc/{entry}").st_uid
            state = _read(f"/proc/{entry}/stat").rsplit(b")", 1)[1].split()[0].decode()
        except (OSError, IndexError):
            continue
        found[int(entry)] = (uid, state, _read(f"/proc/{entry}/cmdline").replace(b"\0", b" ").decode(errors="replace"))
    return found


def strays(before: set[int], tmp_root: Path, settle_s: float = STRAYS_SETTLE_S) -> dict[int, str]:
    """Processes the grading left running: new processes of a uid student code runs as (the course's grading
    uids as root, this user otherwise), and any process named like a hostile stray, that are not zombies.
    Concurrent gradings run as other uids of the range; their strays would be caught by their own check, and
    their live processes are told apart here by the scratch folder the supervisor's environment names."""
    grading_uids = range(*GRADING_UIDS) if IS_ROOT else range(os.getuid(), os.getuid() + 1)
    deadline = time.monotonic() + settle_s
    while True:
        left = {}
        for pid, (uid, state, cmdline) in processes().items():
            if pid in before or state in ("Z", "X") or pid == os.getpid():
                continue
            if STRAY not in cmdline and uid not in grading_uids:
                continue
            if STRAY not in cmdline and IS_ROOT and _uid_held(uid):
                continue  # a uid a grading still holds: another grading's, still running
            environ = _read(f"/proc/{pid}/environ").decode(errors="replace")
            scratch = re.search(r"(?:^|\0)HOME=([^\0]*)", environ)
            if STRAY not in cmdline and not IS_ROOT and scratch and not scratch.group(1).startswith(str(tmp_root)):
                continue  # a worker of another grading (basic level: on the host, with its scratch as HOME)
            left[pid] = cmdline
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.1)


def _uid_held(uid: int) -> bool:
    """Whether a grading holds `uid` now (its lock is taken): the grading that finished has let its own go."""
    try:
        held = uids.claim(uid, uid)
    except uids.NoFreeUid:
        return True
    held.release()
    return False


class Listener:
    """A TCP server on 127.0.0.1 that counts who connects (a sandboxed submission must never reach it)."""

    def __init__(self):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.sock.settimeout(0.2)
        self.connections = 0
        self.stop = False
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        while not self.stop:
            try:
                conn, _ = self.sock.accept()
                self.connections += 1
                conn.close()
            except OSError:
                pass

    def close(self):
        self.stop = True
        self.thread.join()
        self.sock.close()


def kill_leftovers(found: dict[int, str]) -> None:
    """Clean up after a failed check, so that one failure does not poison the next case."""
    for pid in found:
        try:
            os.kill(pid, 9)
        except OSError:
            pass


# ------------------------------------------------------------------------------------------------ grading
@dataclass
class Grading:
    """One run of `grader grade` over a submission holding one or more hostile cases."""

    cases: list[Case]
    exercises: dict[str, str]                     # case name -> the exercise it occupies
    neighbours: list[str]
    limits: dict[str, dict]
    returncode: int = -1
    stdout: str = ""
    stderr: str = ""
    elapsed: float = 0.0
    report: dict = field(default_factory=dict)
    report_text: str = ""
    out_files: set[str] = field(default_factory=set)
    strays: dict[int, str] = field(default_factory=dict)
    markers: list[str] = field(default_factory=list)
    submission_changed: list[str] = field(default_factory=list)
    tmp_left: list[str] = field(default_factory=list)
    connections: int = 0

    def exercise(self, exercise_id: str) -> dict:
        return next(e for e in self.report["exercises"] if e["id"] == exercise_id)


def unprivileged() -> list[str]:
    """The command prefix that runs the grader without root: as `nobody` when this is root, else as is."""
    return ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"] if IS_ROOT else []


def grade_cases(cases: list[Case], folder: Path, course, sandbox: str = "strict", without_root: Path | None = None,
                unforged: bool = False) -> Grading:
    """Grade the cases in one submission with two healthy neighbours, and look at everything around it.
    `without_root`: run the grader unprivileged, with this folder as its cache of reference observations.
    `unforged`: the cases' files with their forgery turned off (`FORGE = False`)."""
    exercises = {c.name: c.exercise for c in cases}
    free = [e for e in healthy_exercises(course, set()) if e not in exercises.values()]
    for c in cases:
        if c.exercise == "*":
            exercises[c.name] = free.pop(0)
    neighbours = [e for e in healthy_exercises(course, set(exercises.values()))][:2]
    assert len(neighbours) == 2, (
        "the course needs two more exercises with solutions and criteria to stand next to the hostile ones")
    limits = {exercises[c.name]: c.limits for c in cases}
    g = Grading(cases, exercises, neighbours, limits)

    course_root = course_with_limits(folder / "course", limits)
    submission = folder / "submission"
    for c in cases:
        if (c.folder / c.exercise).is_dir() and c.exercise != "*":
            shutil.copytree(c.folder, submission, dirs_exist_ok=True,
                            ignore=shutil.ignore_patterns("manifest.toml", "__pycache__"))
        if unforged:
            for source in (submission / c.exercise).glob("*.py"):
                text = source.read_text()
                assert text.count("FORGE = True") == 1, f"{c.name}: a twin case sets FORGE = True once"
                source.write_text(text.replace("FORGE = True", "FORGE = False"))
        build_special(c, exercises[c.name], submission, course, neighbours)
    for n in neighbours:
        ex = course.exercise(n)
        (submission / n).mkdir(parents=True, exist_ok=True)
        shutil.copyfile(course.solution(ex), submission / n / ex.file)
    out = folder / "out"
    tmp_root = folder / "tmp"
    tmp_root.mkdir()
    if without_root and IS_ROOT:
        for p in (folder, course_root, submission):
            os.chmod(p, 0o755)
        for root, dirs, files in os.walk(submission):
            for d in dirs:
                os.chmod(Path(root) / d, 0o755)
            for f in files:
                if not (Path(root) / f).is_symlink():
                    os.chmod(Path(root) / f, 0o644)
        for p in (tmp_root, without_root):
            p.mkdir(exist_ok=True)
            shutil.chown(p, "nobody")
        os.chmod(folder, 0o777)  # the report folder is created by the grader, as that user

    order = [neighbours[0], *exercises.values(), neighbours[1]]
    args = ["--course", str(course_root), "grade", str(submission), "--out", str(out), "--sandbox", sandbox]
    for e in order:
        args += ["--exercise", e]
    env = {k: v for k, v in os.environ.items() if k != "GITHUB_STEP_SUMMARY"}
    env["TMPDIR"] = str(tmp_root)
    command = [sys.executable, "-m", "grader", *args]
    if without_root:
        env.update(HOME=str(tmp_root), GRADER_CACHE=str(without_root))
        command = [*unprivileged(), *command]

    places = host_places(submission, tmp_root)
    listener = Listener() if any(c.manifest.get("listener") for c in cases) else None
    before_tree = tree_digest(submission)
    before_pids = set(processes())
    started = time.monotonic()
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=600, cwd=ROOT, env=env)
    finally:
        g.elapsed = time.monotonic() - started
        if listener:
            listener.close()
            g.connections = listener.connections
    g.returncode, g.stdout, g.stderr = done.returncode, done.stdout, done.stderr
    g.strays = strays(before_pids, tmp_root)
    kill_leftovers(g.strays)
    g.markers = markers_on_host(places)
    after_tree = tree_digest(submission)
    g.submission_changed = sorted(k for k in set(before_tree) | set(after_tree)
                                  if before_tree.get(k) != after_tree.get(k))
    g.tmp_left = sorted(os.listdir(tmp_root))
    if (out / "report.json").is_file():
        g.report_text = (out / "report.json").read_text()
        g.report = json.loads(g.report_text)
        g.out_files = set(os.listdir(out))
    return g


def grading_key(case: Case) -> str:
    return "packed" if case.manifest.get("pack") else case.name


TWIN = ".unforged"   # the grading key of a twin case's file without its forgery
WITHOUT_ROOT = "basic:"   # the key of a case's grading without root, as it is dealt to a part


def deal(parts: int) -> dict[str, int]:
    """grading key -> the part (1 to `parts`) that grades it: the strict gradings (the packed cases one; a twin
    counts its grading without the forgery too), then the gradings without root, each given in catalog order to the
    part with the fewest gradings so far. The fork bomb's part grades it after the others, alone."""
    load = [0] * parts
    dealt: dict[str, int] = {}
    units = [(key, 1 + sum(c.name == key for c in TWINS)) for key in dict.fromkeys(grading_key(c) for c in CASES)]
    for key, count in units + [(WITHOUT_ROOT + c.name, 1) for c in BASIC]:
        part = load.index(min(load))
        dealt[key] = part + 1
        load[part] += count
    return dealt


DEALT = deal(PARTS)


def pytest_generate_tests(metafunc):
    """A part's file takes the cases dealt to it (its `PART`), for each test that takes a `case`."""
    if "case" not in metafunc.fixturenames:
        return
    part = metafunc.module.PART
    if metafunc.function.__name__ == "test_basic_fallback_without_root":
        cases = [c for c in BASIC if DEALT[WITHOUT_ROOT + c.name] == part]
    else:
        among = TWINS if metafunc.function.__name__ == "test_forgery_gains_nothing" else CASES
        cases = [c for c in among if DEALT[grading_key(c)] == part]
    metafunc.parametrize("case", cases, ids=[c.name for c in cases])


@pytest.fixture(scope="module")
def course():
    return load_course(ROOT)


def clear_old_markers(tmp_path_factory) -> None:
    """Remove the markers an earlier, interrupted run left on the host: once in this run, by the first part to
    start (under a lock the parts share), never while another part's gradings may be leaving theirs."""
    folder = shared_folder(tmp_path_factory, "hostile-markers")
    folder.parent.mkdir(parents=True, exist_ok=True)
    with open(folder.parent / "hostile-markers.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not folder.exists():
            for leftover in markers_on_host(host_places(Path("/nonexistent"), Path("/nonexistent"))):
                os.unlink(leftover)
            folder.mkdir()


@pytest.fixture(scope="module")
def gradings(request, tmp_path_factory, course) -> dict[str, Grading]:
    """The gradings the selected tests need, each run once: PARALLEL at a time, then the `exclusive` ones
    alone (a fork bomb fills the process table of the unprivileged user that every grading shares)."""
    users = ("test_hostile_case", "test_forgery_gains_nothing")
    selected = [item.callspec.params["case"] for item in request.session.items
                if item.originalname in users and hasattr(item, "callspec") and item.path == request.path]
    groups = {}
    for case in selected:
        groups[grading_key(case)] = PACKED if case.manifest.get("pack") else [case]
        if case.manifest.get("twin"):
            groups[case.name + TWIN] = [case]
    clear_old_markers(tmp_path_factory)
    alone = [k for k, g in groups.items() if any(c.manifest.get("exclusive") for c in g)]
    shared = [k for k in groups if k not in alone]
    done: dict[str, Grading] = {}
    with ThreadPoolExecutor(PARALLEL) as pool:
        futures = {k: pool.submit(grade_cases, groups[k], tmp_path_factory.mktemp(k), course,
                                  unforged=k.endswith(TWIN)) for k in shared}
        done.update({k: f.result() for k, f in futures.items()})
    for k in alone:
        done[k] = grade_cases(groups[k], tmp_path_factory.mktemp(k), course)
    return done


# ------------------------------------------------------------------------------------------------ assertions
def check_grading_survived(g: Grading, course) -> None:
    """What must hold for any grading, whatever the cases in it."""
    assert g.returncode == 0, f"the grader failed (exit {g.returncode}): {g.stderr[-2000:]}"
    assert g.report, "no report.json was written"
    import jsonschema

    jsonschema.validate(g.report, json.loads((ROOT / "grader" / "report" / "schema.json").read_text()))
    assert g.out_files == GRADER_FILES, (
        f"the report folder holds {sorted(g.out_files)}; the grader writes {sorted(GRADER_FILES)}")
    for n in g.neighbours:
        e = g.exercise(n)
        assert e["status"] == "passed" and e["score"] == e["max_score"], (
            f"the healthy exercise {n} next to the hostile one was harmed: {e['status']} "
            f"{e['score']}/{e['max_score']}: "
            + "; ".join(f"{c['id']}: {c['message']['en']}" for c in e["criteria"] if c["status"] != "passed"))
    assert not g.strays, f"processes left running after grading: {g.strays}"
    assert not g.markers, f"files the submission left on the host: {g.markers}"
    assert not g.submission_changed, f"the submission folder changed during grading: {g.submission_changed}"
    assert not g.tmp_left, f"left in the temporary folder after grading: {g.tmp_left}"
    assert g.connections == 0, f"the submission reached a server on 127.0.0.1 ({g.connections} connections)"
    timeouts = 0.0
    for e in g.report["exercises"]:
        timeout = g.limits.get(e["id"], {}).get("timeout_s", course.exercise(e["id"]).limits.timeout_s)
        timeouts += timeout if e["status"] == "timeout" else 0.0
        wall = (e.get("run") or {}).get("wall_s", 0.0)
        assert wall <= timeout + WALL_SLACK_S, f"{e['id']} ran {wall} s against a timeout of {timeout} s"
    assert g.elapsed <= timeouts + RUN_SLACK_S, f"the whole grading took {g.elapsed:.0f} s"


def check_case(g: Grading, case: Case) -> None:
    m = case.manifest
    e = g.exercise(g.exercises[case.name])
    criteria = {c["id"]: c for c in e["criteria"]}
    where = f"{case.name} ({e['id']}): {e['status']} {e['score']}/{e['max_score']}, " + "; ".join(
        f"{c['id']} {c['status']}: {c['message']['en']}" for c in e["criteria"])
    assert e["status"] == m["status"], where
    if "score" in m:
        assert e["score"] == m["score"], where
    assert e["message"]["en"] and e["message"]["zh"], where
    if "criterion" in m:
        c = criteria[m["criterion"]]
        assert c["status"] == m["criterion_status"], where
        text = c["message"]["en"]   # the manifests quote the English
    else:
        text = e["message"]["en"]
    for fragment in m.get("message", []):
        assert fragment in text, f"{fragment!r} is not in the message {text!r}"
    for cid, fragments in m.get("criterion_messages", {}).items():
        for fragment in fragments:
            said = criteria[cid]["message"]["en"]
            assert fragment in said, f"{fragment!r} is not in {cid}'s message {said!r}"
    for cid in m.get("passed", []):
        assert criteria[cid]["status"] == "passed", where
    run = e.get("run") or {}
    assert run.get("limit") == m.get("limit"), (
        f"the report names the limit {run.get('limit')!r}; expected {m.get('limit')!r}")
    printed = run.get("output_tail", "") + g.stdout + g.stderr
    for text in m.get("absent_output", []):
        assert text not in printed, f"{text!r} was printed: {printed[-1500:]}"
    for text in m.get("present_output", []):
        assert text in run.get("output_tail", ""), f"{text!r} was not printed: {run.get('output_tail', '')[-1500:]}"
    if m.get("written_must_not_exist"):
        written = re.findall(r"WROTE (\S+)", run.get("output_tail", ""))
        assert not [p for p in written if os.path.exists(p)], "files written inside the sandbox exist on the host"


@pytest.mark.skipif(not IS_ROOT, reason="the strict sandbox needs root (CI runs as root)")
def test_hostile_case(case, gradings, course):
    g = gradings[grading_key(case)]
    check_grading_survived(g, course)
    if "xfail" not in case.manifest:
        check_case(g, case)
        return
    try:  # a known hole, outside the sandbox's reach: the grading itself must still survive (checked above)
        check_case(g, case)
    except AssertionError as exc:
        pytest.xfail(f"{case.manifest['xfail']} ({str(exc).splitlines()[0][:300]})")
    pytest.fail(f"{case.name} is judged right now: remove its `xfail`")


@pytest.mark.skipif(not IS_ROOT, reason="the strict sandbox needs root (CI runs as root)")
def test_forgery_gains_nothing(case, gradings, course):
    """The forgery (which the case's `present_output` shows ran) earns exactly what the same code earns without it:
    the same status and points for every criterion."""
    forged, plain = gradings[grading_key(case)], gradings[case.name + TWIN]
    check_grading_survived(plain, course)
    scored = {}
    for g in (forged, plain):
        e = g.exercise(g.exercises[case.name])
        scored[g is forged] = (e["score"], {c["id"]: (c["status"], c["points"]) for c in e["criteria"]})
    assert scored[True] == scored[False], (
        f"forged {scored[True]} against the same code without the forgery {scored[False]}")


# ------------------------------------------------------------------------------------------------ non-root
@pytest.fixture(scope="module")
def nobody_area():
    """A folder the unprivileged user can reach (pytest's own temporary folders are root's alone)."""
    folder = Path(tempfile.mkdtemp(prefix="grader-hostile-nobody-", dir="/tmp"))
    os.chmod(folder, 0o755)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


NO_SETPRIV = IS_ROOT and shutil.which("setpriv") is None


@pytest.mark.skipif(NO_SETPRIV, reason="setpriv (util-linux) is needed to drop root")
def test_basic_fallback_without_root(case, nobody_area, course):
    """Without root (as `nobody` when the tests run as root) the strict sandbox is unavailable: with
    --sandbox basic the grader still survives the case and judges it the same, and the report records the
    weaker level and why."""
    folder = nobody_area / case.name
    folder.mkdir()
    g = grade_cases([case], folder, course, sandbox="basic", without_root=nobody_area / "cache")
    check_grading_survived(g, course)
    check_case(g, case)
    sandbox = g.report["sandbox"]
    assert sandbox["level"] == "basic"
    assert sandbox["layers"]["own_uid"] is False and sandbox["layers"]["pid_namespace"] is False
    assert "needs root" in sandbox["note"], sandbox["note"]


@pytest.mark.skipif(NO_SETPRIV, reason="setpriv (util-linux) is needed to drop root")
def test_strict_is_refused_without_root(nobody_area):
    """Official grading (the default, strict) refuses a weaker sandbox with one line saying why."""
    submission = nobody_area / "refused"
    (submission / "decoder_block").mkdir(parents=True)
    shutil.copyfile(CATALOG / "syntax_error" / "decoder_block" / "block.py", submission / "decoder_block" / "block.py")
    os.chmod(submission, 0o755)
    os.chmod(submission / "decoder_block", 0o755)
    env = {k: v for k, v in os.environ.items() if k != "GITHUB_STEP_SUMMARY"}
    env.update(HOME=str(nobody_area), GRADER_CACHE=str(nobody_area / "cache"))
    for extra in ([], ["--sandbox", "strict"]):
        done = subprocess.run([*unprivileged(), sys.executable, "-m",
                               "grader", "grade", str(submission), "--out", str(nobody_area / "refused-out"), *extra],
                              capture_output=True, text=True, timeout=300, cwd=ROOT, env=env)
        assert done.returncode == 2, done.stderr
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and "strict sandbox is unavailable" in lines[0] and "--sandbox basic" in lines[0], (
            done.stderr)
        assert not (nobody_area / "refused-out").exists()
