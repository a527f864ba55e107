"""`grader batch`: grade a class in parallel into a gradebook, with resume after any interruption.

Each submission is graded by its own `grader grade` process, so one student's failure never touches
another's; the gradebook is written by this process alone, one transaction per submission.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import stat
import subprocess
import sys
import zipfile
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path

from grader.course import Course
from grader.gradebook import Gradebook, class_summary, content_hash, grader_key, grades_csv
from grader.reporting import write_atomic

MAX_ZIP_MEMBERS = 2000
MAX_ZIP_FILE_BYTES = 16 << 20
MAX_ZIP_TOTAL_BYTES = 64 << 20


class UnsafeArchive(Exception):
    """A zip that would write outside its folder, hold links, or unpack to more than the caps."""


@dataclass
class Entry:
    name: str
    folder: Path | None      # None when the submission could not be unpacked
    problem: str = ""


def discover(submissions: Path, unpack_to: Path, exercise_ids: set[str]) -> list[Entry]:
    """Student folders and zip files directly under `submissions`, in name order."""
    entries = []
    for path in sorted(submissions.iterdir()):
        if path.name.startswith("."):
            continue
        if path.is_dir() and not path.is_symlink():
            entries.append(Entry(path.name, path))
        elif path.suffix == ".zip" and path.is_file():
            name = path.stem
            try:
                entries.append(Entry(name, unpack(path, unpack_to / name, exercise_ids)))
            except (UnsafeArchive, zipfile.BadZipFile, OSError) as exc:
                entries.append(Entry(name, None, f"{path.name} could not be unpacked: {exc}"))
    return entries


def unpack(archive: Path, target: Path, exercise_ids: set[str]) -> Path:
    """Unpack regular files only, refusing path escapes, links and oversized content; a single top-level
    folder is looked through, since students often zip their folder rather than its contents."""
    shutil.rmtree(target, ignore_errors=True)
    with zipfile.ZipFile(archive) as zf:
        members = zf.infolist()
        if len(members) > MAX_ZIP_MEMBERS:
            raise UnsafeArchive(f"{len(members)} entries (at most {MAX_ZIP_MEMBERS})")
        total = 0
        for m in members:
            parts = Path(m.filename).parts
            if m.filename.startswith(("/", "\\")) or ".." in parts or (parts and ":" in parts[0]):
                raise UnsafeArchive(f"entry {m.filename!r} points outside the archive")
            if stat.S_ISLNK(m.external_attr >> 16):
                raise UnsafeArchive(f"entry {m.filename!r} is a symbolic link")
            if m.file_size > MAX_ZIP_FILE_BYTES:
                raise UnsafeArchive(f"entry {m.filename!r} is {m.file_size:,} bytes (at most {MAX_ZIP_FILE_BYTES:,})")
            total += m.file_size
            if total > MAX_ZIP_TOTAL_BYTES:
                raise UnsafeArchive(f"more than {MAX_ZIP_TOTAL_BYTES:,} bytes uncompressed")
        target.mkdir(parents=True)
        for m in members:
            if m.is_dir():
                continue
            destination = target.joinpath(*Path(m.filename).parts)
            destination.parent.mkdir(parents=True, exist_ok=True)
            with zf.open(m) as src, open(destination, "wb") as dst:
                remaining = MAX_ZIP_FILE_BYTES + 1
                while chunk := src.read(min(1 << 16, remaining)):
                    dst.write(chunk)
                    remaining -= len(chunk)
                if remaining <= 0:  # the header lied about the size
                    raise UnsafeArchive(f"entry {m.filename!r} is larger than it claims")
    children = [p for p in target.iterdir() if not p.name.startswith((".", "__MACOSX"))]
    if len(children) == 1 and children[0].is_dir() and children[0].name not in exercise_ids:
        return children[0]
    return target


def run_batch(course: Course, submissions: Path, out: Path, jobs: int, regrade: bool, sandbox: str,
              lang: str, progress) -> dict:
    out.mkdir(parents=True, exist_ok=True)
    book = Gradebook(out / "gradebook.sqlite")
    key = grader_key(course)
    entries = discover(submissions, out / "unpacked", {ex.id for ex in course.exercises})
    todo, skipped = [], 0
    for e in entries:
        chash = content_hash(course, e.folder) if e.folder else "unreadable"
        if not regrade and book.is_graded(e.name, chash, key):
            skipped += 1
        else:
            todo.append((e, chash))
    done = skipped
    progress(done, len(entries), None)
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        futures = {pool.submit(grade_one, course, e, out / "students" / e.name, sandbox, lang): (e, chash)
                   for e, chash in todo}
        for future in as_completed(futures):
            entry, chash = futures[future]
            summary, rows = future.result()
            book.store(entry.name, chash, key, summary, rows)
            done += 1
            progress(done, len(entries), (entry.name, summary))
    write_atomic(out / "grades.csv", grades_csv(course, book, key))
    from grader.render.templated import render_class

    write_atomic(out / "class.html", render_class(class_summary(course, book, key), course, course.root / "templates", lang))
    book.close()
    return {"total": len(entries), "graded": len(todo), "skipped": skipped}


def grade_one(course: Course, entry: Entry, report_dir: Path, sandbox: str, lang: str) -> tuple[dict, list[dict]]:
    """Grade one submission in its own process; whatever happens, return a summary and one row per criterion."""
    now = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    if entry.folder is None:
        return failure_rows(course, entry.problem, now)
    limit = sum(ex.timeout_s for ex in course.exercises) * 2 + 300
    command = [sys.executable, "-m", "grader", "--course", str(course.root), "grade", str(entry.folder),
               "--out", str(report_dir), "--sandbox", sandbox, "--lang", lang]
    try:
        finished = subprocess.run(command, capture_output=True, text=True, timeout=limit,
                                  env={**os.environ, "GITHUB_STEP_SUMMARY": ""})
    except subprocess.TimeoutExpired:
        return failure_rows(course, f"grading did not finish within {limit:g} s", now)
    if finished.returncode != 0:
        reason = (finished.stderr.strip().splitlines() or ["no message"])[-1]
        return failure_rows(course, f"grading failed (exit {finished.returncode}): {reason}", now)
    report = json.loads((report_dir / "report.json").read_text())
    rows = [{"exercise": e["id"], "criterion": c["id"], "kind": c["kind"], "status": c["status"],
             "points": c["points"], "max_points": c["max_points"], "message": c["message"]}
            for e in report["exercises"] for c in e["criteria"]]
    statuses = {e["status"] for e in report["exercises"]}
    status = "passed" if statuses == {"passed"} else "graded"
    summary = {"score": report["score"], "max_score": report["max_score"], "percent": report["percent"],
               "status": status, "message": f"{sum(r['status'] == 'passed' for r in rows)} of {len(rows)} criteria passed",
               "report_dir": str(report_dir), "graded_at": now}
    return summary, rows


def failure_rows(course: Course, message: str, now: str) -> tuple[dict, list[dict]]:
    """A submission that could not be graded still gets every row: status error, no points, the reason."""
    from grader.judge.session import criteria_of

    rows = [{"exercise": ex.id, "criterion": meta.id, "kind": meta.kind, "status": "error", "points": 0.0,
             "max_points": ex.points.get(meta.id, 0.0), "message": message}
            for ex in course.exercises for meta in criteria_of(ex.id)]
    max_score = sum(r["max_points"] for r in rows)
    return {"score": 0.0, "max_score": max_score, "percent": 0.0, "status": "error", "message": message,
            "report_dir": None, "graded_at": now}, rows
