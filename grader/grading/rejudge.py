"""Stored observations, re-judged: a changed criterion, points table or visibility graded without running student
code again.

Theory of operation. When a submission is graded, what its probes observed (each exercise's obs folder, as the
sandbox left it), how each run ended and how each file was staged are kept: the files content-addressed under
`<store>/<sha256[:2]>/<sha256>` (identical observations stored once), the rest as one JSON record in the gradebook,
stamped with each exercise's probe version (`probe_version`: the worker code, the exercise's probe code in the
course folder as the sandbox stages it, every grader module they import, torch's version, the seed and the
exercise's run settings). Re-judging hands the stored record to the judge as a fresh grading would, in the judge's
own limited child process: the judge validates the stored data as it validates a sandbox's. A submission whose probe
version changed, whose files changed, or that has no record is graded again from scratch. Nothing here runs student
code.

What the judge concluded is kept too, per exercise, stamped with the exercise's judge version (`judge_version`: the
grader's code and catalogs, the exercise's criteria module and the course's shared code, the judge's limits, the
references, torch's version): the same observations judged by the same code with the same references conclude the
same, so a re-judging judges again only the exercises whose judge version changed, and a change of points or
visibility alone judges nothing (the report is built again from the kept outcomes, with the new points). Outcomes a
limit or the grader's own failure decided are never kept: those are judged again.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import hashlib
import json
import os
import shutil
import stat
import tempfile
import threading
import weakref
from collections.abc import Iterable
from pathlib import Path

import grader
from grader.course import Course, ExerciseConfig
from grader.worker.protocol import Status

STORE = "observations"          # beside the gradebook: the content-addressed observation files
DIFF_FILE = "rejudge-diff.csv"  # the grade diff a re-judging writes beside grades.csv
MAX_KEPT_BYTES = 64 << 20       # a submission's observations kept at most (the judge reads one tensor file of 64 MiB)
MAX_KEPT_FILES = 4096           # ... and files
RECORD_VERSION = 1              # of the stored record's layout
# a kept outcome, as reported (`points` and `max_points`: the share a failed criterion earned, Outcome.partial)
OUTCOME_KEYS = ("id", "kind", "title", "hint", "status", "message", "evidence", "points", "max_points")


@functools.cache
def _probe_sources() -> str:
    """A digest of the worker code, the package probe code is loaded into, and every grader module they import."""
    package = Path(grader.__file__).parent
    return _closure_digest(package, [package / "probes" / "__init__.py", *sorted((package / "worker").glob("*.py"))])


def _course_probes(ex: ExerciseConfig) -> str:
    """A digest of the exercise's probe code as the sandbox stages it (its probes.py and the course's shared code it
    imports) and of every grader module that code imports."""
    from grader.sandbox.probe_plan import probe_code_modules

    files = tuple((name, path, os.stat(path).st_mtime_ns, os.stat(path).st_size)
                  for name, path in probe_code_modules(ex.probes_file))
    return _files_digest(files)


@functools.cache
def _files_digest(files: tuple[tuple[str, str, int, int], ...]) -> str:
    """(module name, path, mtime, size) of course files: their names and contents, and the grader modules they
    import."""
    package = Path(grader.__file__).parent
    h = hashlib.sha256()
    for name, path, _, _ in files:
        h.update(name.encode() + b"\0" + Path(path).read_bytes() + b"\0")
    h.update(_closure_digest(package, [Path(path) for _, path, _, _ in files]).encode())
    return h.hexdigest()


def _closure_digest(package: Path, roots: list[Path]) -> str:
    """A digest of the files `roots` and of every module of the package they import (`import grader.x`, `from
    grader.x import y`: grader/x.py or grader/x/__init__.py), transitively, each with its path in the package."""
    todo = list(roots)
    seen: set[Path] = set()
    while todo:
        path = todo.pop()
        if path in seen or not path.is_file():
            continue
        seen.add(path)
        for node in ast.walk(ast.parse(path.read_bytes())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module] if isinstance(node, ast.ImportFrom) and node.module and not node.level else []
            for name in names:
                if name == "grader" or name.startswith("grader."):
                    parts = name.split(".")[1:]
                    todo += [package.joinpath(*parts).with_suffix(".py"), package.joinpath(*parts, "__init__.py")]
    h = hashlib.sha256()
    for path in sorted(p for p in seen if p.is_relative_to(package)):   # the roots outside it: their caller's
        h.update(str(path.relative_to(package)).encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


def probe_version(course: Course, ex: ExerciseConfig) -> str:
    """What decides an exercise's observations of a given file: any change means they must be made again."""
    from grader.grading.pipeline import torch_version

    settings = {"seed": course.seed, "file": ex.file, **ex.limits.to_dict(), "forbidden": list(ex.forbidden),
                "torch": torch_version(), "probes": _probe_sources(), "course_probes": _course_probes(ex)}
    return hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:20]


@functools.cache
def _source_files(package: Path) -> tuple[tuple[str, str], ...]:
    """The package's code and message catalogs, each file's path (relative to the package) and digest, read once."""
    return tuple((path.relative_to(package).as_posix(), hashlib.sha256(path.read_bytes()).hexdigest())
                 for path in sorted(package.rglob("*"))
                 if path.suffix in (".py", ".po", ".mo", ".ini") and path.is_file())


@functools.cache
def _grader_sources(package: Path) -> str:
    """A digest of the package's code and message catalogs: the judge, what the criteria import and the words they
    say (more than the judge reads, so that nothing it reads is missed)."""
    h = hashlib.sha256()
    for relative, digest in _source_files(package):
        h.update(f"{relative}\0{digest}\0".encode())
    return h.hexdigest()


def _course_criteria(course: Course, ex: ExerciseConfig) -> str:
    """A digest of the exercise's criteria module, of the course's shared code (which criteria may import as
    `grader.probes.<name>`) and of the course's catalogs (merged into one, they say every criterion's words); the
    other exercises' criteria count not: the judge collects each as a module of its own, and none of them changes
    what another's conclude."""
    from grader.course import CRITERIA_FILE, LIB

    catalogs = sorted(course.solutions.glob("*/*.po"))
    h = hashlib.sha256()
    for path in [course.solutions / ex.id / CRITERIA_FILE, *sorted((course.solutions / LIB).glob("*.py")), *catalogs]:
        h.update(f"{path.relative_to(course.solutions).as_posix()}\0".encode()
                 + (path.read_bytes() if path.is_file() else b"(none)") + b"\0")
    return h.hexdigest()


def judge_versions(course: Course) -> dict[str, str]:
    """Each exercise's judge version: what decides the judge's outcomes on given observations. Any change means the
    exercise must be judged again (a change to one exercise's criteria alone: that exercise)."""
    from grader.grading.pipeline import reference_key, torch_version

    versions = {}
    for ex in course.exercises:
        settings = {"grader": _grader_sources(Path(grader.__file__).parent), "torch": torch_version(),
                    "limits": course.judge_limits.to_dict(), "criteria": _course_criteria(course, ex),
                    "references": reference_key(course, ex) if course.references is None else str(course.references)}
        versions[ex.id] = hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:20]
    return versions


def with_outcomes(record: dict, report: dict, versions: dict[str, str]) -> dict:
    """The record with what the judge concluded of each exercise of `report` (a report.json's data), kept under the
    exercise's judge version for the re-judgings after; an exercise where a limit or the grader's own failure
    decided an outcome is left out (it is judged again)."""
    judged = dict(record.get("judged") or {})
    for e in report.get("exercises", []):
        if e["id"] not in versions:
            continue
        if not _keepable((c["status"], c.get("evidence")) for c in e["criteria"]):
            judged.pop(e["id"], None)
            continue
        judged[e["id"]] = {"version": versions[e["id"]],
                           "criteria": [{key: c[key] for key in OUTCOME_KEYS} for c in e["criteria"]]}
    return {**record, "judged": judged}


def _kept_outcomes(record: dict, ex_id: str, version: str) -> list | None:
    """The outcomes kept for the exercise when its judge version is still `version`; None otherwise."""
    from grader.judge.criterion import CriterionMeta, Outcome

    held = (record.get("judged") or {}).get(ex_id)
    if not held or held.get("version") != version:
        return None
    return [Outcome(CriterionMeta(c["id"], c["kind"], c["title"], c["hint"]), c["status"], c["message"],
                    c["evidence"], c["hint"], _kept_share(c)) for c in held["criteria"]]


def _kept_share(kept: dict) -> float | None:
    """The share of its points a kept failed criterion earned (a record kept before partial points holds none)."""
    points, most = kept.get("points"), kept.get("max_points")
    if kept["status"] != Status.FAILED or not points or not most:
        return None
    return points / most


# Beside a student's report files: the renderer and language they were written with, and each file's digest. A
# re-judging whose report.json comes out as the stamp says, from the same renderer in the same language, finds the
# files it would write on the disk already (each checked against its digest) and writes none.
PAGES_STAMP = ".rendered"


@functools.cache
def renderer_version(templates: Path) -> str:
    """What decides a report's files given its report.json and a language: the rendering code (grader/render/files.py
    and every grader module it imports), the message catalogs, the report templates, jinja2's and markupsafe's
    versions."""
    from importlib.metadata import version

    package = Path(grader.__file__).parent
    h = hashlib.sha256(_closure_digest(package, [package / "render" / "files.py"]).encode())
    for relative, digest in _source_files(package):   # the catalogs, as the judge versions read them
        if relative.startswith("locale/"):
            h.update(f"{relative}\0{digest}\0".encode())
    for path in sorted(p for p in templates.rglob("*") if p.is_file()):
        h.update(f"{path.relative_to(templates).as_posix()}\0".encode() + path.read_bytes() + b"\0")
    h.update(f"jinja2 {version('jinja2')} markupsafe {version('markupsafe')}".encode())
    return h.hexdigest()[:20]


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def stamped(files: dict[str, str], lang: str, templates: Path) -> dict[str, str]:
    """A report's files, by file name, and their stamp (PAGES_STAMP), to be written last."""
    stamp = {"renderer": renderer_version(templates), "lang": lang,
             "files": {name: _digest(text) for name, text in files.items()}}
    return {**files, PAGES_STAMP: json.dumps(stamp, sort_keys=True) + "\n"}


def pages_current(folder: Path, names: list[str], report_json: str, lang: str, templates: Path) -> bool:
    """Whether `folder` holds exactly the files `names` that this renderer writes of `report_json` (report.json's
    text) in `lang`: its stamp says so, and each file on the disk has the digest the stamp gives it."""
    try:
        stamp = json.loads((folder / PAGES_STAMP).read_text(encoding="utf-8"))
        digests = stamp["files"]
        if (stamp["renderer"] != renderer_version(templates) or stamp["lang"] != lang
                or sorted(digests) != sorted(names) or digests["report.json"] != _digest(report_json)):
            return False
        return all(hashlib.sha256((folder / name).read_bytes()).hexdigest() == digests[name] for name in names)
    except (OSError, ValueError, KeyError, TypeError):
        return False


class NotKept(Exception):
    """The observations could not be kept (too many, too large, unreadable): the next re-judging grades afresh."""


def _kept_files(folder: Path) -> dict[str, Path]:
    """The regular files under an obs folder, by relative path; links and anything else are not observations."""
    found: dict[str, Path] = {}
    total = 0
    todo = [folder]
    while todo:
        current = todo.pop()
        with os.scandir(current) as entries:
            for entry in entries:
                info = entry.stat(follow_symlinks=False)
                if stat.S_ISDIR(info.st_mode):
                    todo.append(Path(entry.path))
                elif stat.S_ISREG(info.st_mode):
                    total += info.st_size
                    found[str(Path(entry.path).relative_to(folder))] = Path(entry.path)
                if total > MAX_KEPT_BYTES or len(found) > MAX_KEPT_FILES:
                    raise NotKept(f"more than {MAX_KEPT_BYTES >> 20} MiB or {MAX_KEPT_FILES} files")
    return found


def _put(store: Path, path: Path) -> str:
    """Copy a file into the store under its content's hash (written whole, then renamed: concurrent writers of the
    same content agree), never following a link."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as src:
        data = src.read(MAX_KEPT_BYTES + 1)
    digest = hashlib.sha256(data).hexdigest()
    target = store / digest[:2] / digest
    if not target.exists():
        target.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".put-")
        with os.fdopen(fd, "wb") as out:
            out.write(data)
        os.replace(tmp, target)
    return digest


def keep(probed, store: Path) -> dict:
    """The record of a probed submission (its runs over), its observation files put in `store`. NotKept when they
    cannot all be kept."""
    from grader.grading.pipeline import probe_order, summary_of
    from grader.sandbox.private import private_folder

    exercises = {}
    try:
        private_folder(store)   # students' observations: the instructor's alone
        for ex in probed.exercises:
            st = probed.staged[ex.id]
            run = probed.run_of(ex.id)
            obs = probed.scratch / ex.id / "obs"
            files = None
            if st.path is not None and obs.is_dir():
                files = {name: _put(store, path) for name, path in sorted(_kept_files(obs).items())}
            exercises[ex.id] = {
                "probe_version": probe_version(probed.course, ex), "probes": probe_order(ex), "obs": files,
                "had_obs": st.path is not None, "run": summary_of(ex, run),
                "facts": None if run is None else {"limit": run.limit, "wall_s": run.wall_s, "cpu_s": run.cpu_s,
                                                   "max_rss_mb": run.max_rss_mb, "output_bytes": run.output_bytes,
                                                   "output_tail": run.output_tail[-2000:]},
                "staged": {"status": st.status, "message": st.message.texts() if st.message else None},
                "answers": probed.answers.get(ex.id, {})}
    except OSError as exc:
        raise NotKept(str(exc)) from None
    return {"version": RECORD_VERSION, "exercises": exercises, "sandbox": probed.sandbox.describe(),
            "started_at": probed.started_at}


def stale(course: Course, record: dict | None) -> list[str]:
    """The exercises of the course a record cannot be re-judged for (all of them when there is no usable record)."""
    if not record or record.get("version") != RECORD_VERSION:
        return [ex.id for ex in course.exercises]
    held = record.get("exercises", {})
    return [ex.id for ex in course.exercises if ex.id not in held or held[ex.id]["probe_version"]
            != probe_version(course, ex)]


def _materialise(store: Path, files: dict[str, str], folder: Path) -> None:
    """The stored files of one obs folder laid out again in `folder` (a fresh folder of ours: nothing in it is a
    link), each checked against its hash."""
    folder.mkdir(parents=True)
    made = {""}
    root = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for name, digest in files.items():
            with open(f"{store}/{digest[:2]}/{digest}", "rb") as stored:
                data = stored.read()
            if hashlib.sha256(data).hexdigest() != digest:
                raise NotKept(f"the stored observation {digest} is damaged")
            parts = name.split("/")
            if name.startswith("/") or any(part in ("", ".", "..") for part in parts):
                raise NotKept(f"a stored observation is named {name!r}")
            parent = "/".join(parts[:-1])
            if parent not in made:
                os.makedirs(folder / parent, exist_ok=True)
                made.add(parent)
            fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644, dir_fd=root)
            with open(fd, "wb") as out:
                out.write(data)
    finally:
        os.close(root)


# Where stored observations are laid out for the judge: memory (tmpfs) where there is one, so that a class's
# re-judging writes and removes no file on disk (a hundred and more per submission); the system's temporary folder
# elsewhere.
SCRATCH = Path("/dev/shm")


def _scratch() -> str | None:
    return str(SCRATCH) if SCRATCH.is_dir() and os.access(SCRATCH, os.W_OK | os.X_OK) else None


def rejudged(course: Course, name: str, record: dict, store: Path, judge=None,
             versions: dict[str, str] | None = None):
    """The report a full grading would have made of the submission, from its stored record: the outcomes kept for
    each exercise whose judge version (`versions`, default judge_versions(course)) is the same, the others judged
    again (with `judge`, default this process's judge for the course). NotKept when the stored files are gone or
    damaged."""
    versions = versions or judge_versions(course)
    return report_from(course, name, record, versions, judged_again(course, record, store, versions, judge))


def judged_again(course: Course, record: dict, store: Path, versions: dict[str, str], judge=None) -> dict[str, list]:
    """The judge's outcomes of the exercises whose kept outcomes are not of their judge version now (none judged, and
    no judge started, when every exercise's are, or when this process judged the same observations already:
    `_judged_alike`). NotKept when the stored files are gone or damaged."""
    from grader.grading.pipeline import judge_for

    todo = [ex for ex in course.exercises if _kept_outcomes(record, ex.id, versions[ex.id]) is None]
    if not todo:
        return {}
    judge = judge or judge_for(course)   # started only when it judges
    with _alike_lock:
        alike = _judged_alike.setdefault(judge, {})
    keys = {ex.id: _observed_key(ex, record["exercises"][ex.id], versions[ex.id]) for ex in todo}
    if os.environ.get(ALIKE_SWITCH) == "0":
        alike = {}
    judged = {ex.id: list(alike[keys[ex.id]]) for ex in todo if keys[ex.id] in alike}
    rest = [ex for ex in todo if ex.id not in judged]
    if rest:
        got = _judged_again(course, record, store, rest, judge, _references(course, rest, versions))
        for ex in rest:
            judged[ex.id] = got[ex.id]
            if _keepable((o.status, o.evidence) for o in got[ex.id]):
                alike[keys[ex.id]] = tuple(got[ex.id])
                while len(alike) > MAX_ALIKE:
                    alike.pop(next(iter(alike)), None)
    return judged


def prepare_judge(course: Course, record: dict, versions: dict[str, str]) -> bool:
    """When the record has exercises to judge again, have this process's judge start, read their references and run
    their criteria once now (while the caller reads the rest of a class's records) rather than at the first
    judging; whether it had any (the head start is then asked for, or failed: either way once is enough)."""
    from grader.grading.pipeline import judge_for, probe_order

    todo = [ex for ex in course.exercises
            if ((record.get("judged") or {}).get(ex.id) or {}).get("version") != versions[ex.id]]
    if not todo:
        return False
    try:
        references = _references(course, todo, versions)
        judge_for(course).prepare([{"id": ex.id, "file": ex.file, "probes": probe_order(ex),
                                    "reference": str(references[ex.id])} for ex in todo])
    except Exception:  # noqa: BLE001 - a head start missed (not tried again): the judging does it, and says why
        pass
    return True


# What each judge concluded in this process, by what decided it (`_observed_key`): an exercise whose observations
# are the same as another submission's (the same bytes: an exercise left unattempted, an exact answer, a copy)
# concludes the same under the same judge version, and is not judged twice. Oldest first, at most MAX_ALIKE a judge.
_judged_alike: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_alike_lock = threading.Lock()   # a batch re-judges from `jobs` threads
MAX_ALIKE = 2048   # exercises' outcomes; tens of kilobytes each at most, evidence included
ALIKE_SWITCH = "GRADER_REJUDGE_ALIKE"   # "0": judge every submission's observations, alike or not (a class of distinct
#                                         students, as bench/rejudge_bench.py measures one)


def _observed_key(ex: ExerciseConfig, held: dict, version: str) -> str:
    """A digest of everything the judge reads of an exercise's stored observations, and of its judge version."""
    read = {key: held.get(key) for key in ("probe_version", "probes", "obs", "had_obs", "run", "staged")}
    return hashlib.sha256(json.dumps({"version": version, "file": ex.file, **read}, sort_keys=True,
                                     default=str).encode()).hexdigest()


# What a limit of the judge leaves in a criterion's evidence: the judging child was killed (the client says how it
# exited), or a limit this process enforces on itself stopped a criterion (grader/judge/plugin.py).
LIMIT_EVIDENCE = ("judge_exit", "judge_limit")


def _keepable(outcomes: Iterable[tuple[str, dict | None]]) -> bool:
    """Whether outcomes, as (status, evidence) pairs, may be kept and reused: those a limit of the judge or the
    grader's own failure decided are judged again, never reused (by with_outcomes nor by a re-judging)."""
    return not any(status == Status.GRADER_ERROR or any(key in (evidence or {}) for key in LIMIT_EVIDENCE)
                   for status, evidence in outcomes)


def report_from(course: Course, name: str, record: dict, versions: dict[str, str], judged: dict[str, list]):
    """The submission's report from its record: the outcomes `judged` holds, the kept ones for the other exercises
    (judged_again's outcomes and this need nothing but the record: a process of its own may build it)."""
    from grader.grading.pipeline import build_report
    from grader.sandbox.supervisor import Run

    exercises = list(course.exercises)
    outcomes = {ex.id: judged[ex.id] if ex.id in judged else _kept_outcomes(record, ex.id, versions[ex.id])
                for ex in exercises}
    runs = {ex.id: Run(id=ex.id, **record["exercises"][ex.id]["facts"]) for ex in exercises
            if record["exercises"][ex.id]["facts"] is not None}
    answers = {ex.id: record["exercises"][ex.id].get("answers") or {} for ex in exercises}   # none: kept before 3.2
    return build_report(course, name, exercises, outcomes, runs, record["sandbox"], record["started_at"],
                        record.get("duration_s", 0.0), answers)


_reference_dirs: dict[tuple[str, str], Path] = {}   # (exercise, judge version) -> its references, found once


def _references(course: Course, exercises: list[ExerciseConfig], versions: dict[str, str]) -> dict[str, Path]:
    """reference_folders, once per exercise and judge version (which holds the references' key)."""
    from grader.grading.pipeline import reference_folders

    missing = [ex for ex in exercises if (ex.id, versions[ex.id]) not in _reference_dirs]
    if missing:
        for ex_id, folder in reference_folders(course, missing).items():
            _reference_dirs[(ex_id, versions[ex_id])] = folder
    return {ex.id: _reference_dirs[(ex.id, versions[ex.id])] for ex in exercises}


def _judged_again(course: Course, record: dict, store: Path, exercises: list[ExerciseConfig], judge,
                  references: dict[str, Path]) -> dict[str, list]:
    """The judge's outcomes of these exercises from the stored observations, laid out again as the sandbox left them
    (in memory where there is room, else on disk)."""
    from grader.judge.client import JudgeUnavailable

    with contextlib.ExitStack() as stack:
        for scratch in dict.fromkeys([_scratch(), None]):
            tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="grader-rejudge-", dir=scratch)))
            try:
                entries = _laid_out(record, store, exercises, references, tmp)
                break
            except OSError:
                if scratch is None:
                    raise
        try:
            return judge.judge(entries)
        except JudgeUnavailable as exc:
            from grader.grading.pipeline import unavailable_outcomes

            return unavailable_outcomes(course, exercises, exc)


def _laid_out(record: dict, store: Path, exercises: list[ExerciseConfig], references: dict[str, Path],
              tmp: Path) -> list[dict]:
    """The judging request of these exercises, their stored observations laid out under `tmp`. OSError when there
    is no room (a small tmpfs)."""
    entries = []
    for ex in exercises:
        held = record["exercises"][ex.id]
        obs = None
        if held["obs"] is not None:
            obs = tmp / ex.id / "obs"
            _materialise(store, held["obs"], obs)
        elif held["had_obs"]:   # the run left no obs folder: the judge says so, as it did
            obs = tmp / ex.id / "obs"
        entries.append({"id": ex.id, "file": ex.file, "probes": held["probes"],
                        "obs": str(obs) if obs is not None else None, "run": held["run"],
                        "staged": held["staged"], "reference": str(references[ex.id])})
    return entries


# --- the grade diff --------------------------------------------------------------------------------------------

DIFF_COLUMNS = ("submission", "exercise", "criterion", "old_points", "new_points", "old_status", "new_status",
                "how")


def grade_diff(name: str, old: list[dict], new: list[dict], how: str) -> list[dict]:
    """The criteria whose points or status changed between two gradings of one submission (a criterion only one of
    them has counts as changed)."""
    before = {(r["exercise"], r["criterion"]): r for r in old}
    after = {(r["exercise"], r["criterion"]): r for r in new}
    changed = []
    for key in [*after, *(k for k in before if k not in after)]:
        was, now = before.get(key), after.get(key)
        if was and now and was["points"] == now["points"] and was["status"] == now["status"]:
            continue
        changed.append({"submission": name, "exercise": key[0], "criterion": key[1],
                        "old_points": None if was is None else was["points"],
                        "new_points": None if now is None else now["points"],
                        "old_status": None if was is None else was["status"],
                        "new_status": None if now is None else now["status"], "how": how})
    return changed


def diff_csv(lines: list[dict]) -> str:
    from grader.render.safe_text import csv_text

    return csv_text([DIFF_COLUMNS, *[[line[c] for c in DIFF_COLUMNS] for line in lines]])


def remove_store(store: Path) -> None:
    shutil.rmtree(store, ignore_errors=True)


def print_diff(tallies: dict, lang: str) -> None:
    """What a re-judging says: how many were re-judged, which were graded from scratch and why, and each student
    whose grade changed, by criterion, old and new."""
    from grader.i18n import t
    from grader.render.safe_text import terminal_text

    print(t("{count} submissions re-judged from their kept observations (no student code ran)",
            count=tallies["rejudged"]).render(lang))
    for name, why in tallies["afresh"]:
        print(terminal_text(t("{name}: graded again from scratch: {why}", name=name, why=why).render(lang)))
    by_name: dict[str, list[dict]] = {}
    for line in tallies["diff"]:
        by_name.setdefault(line["submission"], []).append(line)
    if not by_name:
        print(t("no grade changed").render(lang))
    for name, lines in by_name.items():
        old, new = tallies["totals"][name]
        print(terminal_text(t("{name}: {old:g} -> {new:g} points", name=name, old=old, new=new).render(lang)))
        for line in lines:
            print(terminal_text(t("  {exercise}/{criterion}: {old} -> {new} ({old_status} -> {new_status})",
                                  exercise=line["exercise"], criterion=line["criterion"],
                                  old=_points(line["old_points"]), new=_points(line["new_points"]),
                                  old_status=line["old_status"] or "-", new_status=line["new_status"] or "-")
                                .render(lang)))
    print(t("the grade diff: {file}", file=str(tallies["diff_file"])).render(lang))


def _points(value: float | None) -> str:
    return "-" if value is None else f"{value:g}"


# `grader grade`'s record of what it kept, in its report folder beside the observation store.
KEPT_FILE = "observed.json"


def rows_of(report: dict | None) -> list[dict]:
    """A report's criteria as the gradebook's rows (exercise, criterion, points, status)."""
    return [{"exercise": e["id"], "criterion": c["id"], "points": c["points"], "status": c["status"]}
            for e in (report or {}).get("exercises", []) for c in e["criteria"]]


def grade_one(course: Course, submission: Path, exercise_ids: list[str], sandbox, out: Path, rejudge: bool):
    """`grader grade` into `out`, keeping the observations there: (report, the re-judging's outcome or None). With
    `rejudge`, what the last grading into `out` kept is judged again when the submission and its probes are the
    same; otherwise (or when it cannot be read) the submission is graded from scratch, and the outcome says why."""
    import dataclasses

    from grader.batch.gradebook import content_hash
    from grader.grading.pipeline import grade
    from grader.i18n import t
    from grader.batch.warm import keep_observations

    chosen = dataclasses.replace(course, exercises=tuple(course.exercise(e) for e in exercise_ids))
    chash = content_hash(course, submission)
    store, kept_file = out / STORE, out / KEPT_FILE
    old = None
    if rejudge:
        try:
            old = json.loads((out / "report.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            old = None
    why = None
    report = None
    if rejudge:
        try:
            kept = json.loads(kept_file.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            kept = None
        record = kept["record"] if kept and kept.get("content_hash") == chash else None
        changed = stale(chosen, record)
        if record is not None and not changed:
            try:
                report = rejudged(chosen, submission.name, record, store)
            except (NotKept, OSError, KeyError):
                why = t("its kept observations could not be read")
        else:
            why = t("no observations of these files were kept") if record is None else \
                t("the probes of {exercises} changed since it was graded", exercises=", ".join(changed))
    if report is None:
        record = {}
        report = grade(course, submission, exercise_ids, sandbox,
                       keep=lambda probed: keep_observations(store, record, probed))
        if record:
            record["duration_s"] = report.duration_s
    data = json.loads(report.to_json())
    if record:   # with what the judge concluded, for the re-judgings after
        from grader.render.files import write_atomic

        out.mkdir(parents=True, exist_ok=True)
        record = with_outcomes(record, data, judge_versions(chosen))
        write_atomic(kept_file, json.dumps({"content_hash": chash, "record": record}) + "\n")
    if not rejudge:
        return report, None
    before, after = rows_of(old), rows_of(data)
    lines = grade_diff(submission.name, before, after, "regraded" if why is not None else "rejudged")
    out.mkdir(parents=True, exist_ok=True)
    (out / DIFF_FILE).write_text(diff_csv(lines), encoding="utf-8")
    return report, {"rejudged": 0 if why is not None else 1, "afresh": [(submission.name, why)] if why else [],
                    "diff": lines, "diff_file": out / DIFF_FILE,
                    "totals": {submission.name: (sum(r["points"] for r in before), sum(r["points"] for r in after))}}
