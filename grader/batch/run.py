"""`grader batch`: grade a class in parallel into a gradebook, with resume after any interruption.

Submissions are graded by warm grading processes (grader/batch/warm.py), here or on Dask workers; each submission's
student code still runs in a sandboxed process tree of its own, so one student's failure never touches another's.
The gradebook is written by this process alone, one transaction per submission.

Every entry of the class folder gets its row, whatever it holds: a link (never followed) or an archive that
cannot be read is the submission's final verdict; a failure of the grader itself is stored as `grader_error`
and graded again by the next run.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import sqlite3
import stat
import zipfile
from contextlib import closing, contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

from grader.i18n import Text, t, verbatim
from grader.course import Course
from grader.policy import Submitted
from grader.batch.gradebook import (GRADER_ERROR, UNREADABLE, EncodedRecord, Gradebook, class_summary, content_hash,
                                    encoded_record, grader_key, grades_csv)
from grader.batch.rows import ROWS, WRITTEN_TO, failure_rows, now, reply_rows, report_rows
from grader.batch.progress import BatchProgress
from grader.batch.faults import machine_fault
from grader.exits import EXIT_BUSY, Fault
from grader.render.files import write_atomic
from grader.batch.roster import Student
from grader.sandbox.private import private_folder

MAX_ZIP_MEMBERS = 2000
MAX_ZIP_FILE_BYTES = 16 << 20
MAX_ZIP_TOTAL_BYTES = 64 << 20
MAX_NAME_BYTES = 255          # one path component, as most file systems allow
LOCK_FILE = ".batch.lock"


class UnsafeArchive(Exception):
    def __init__(self, said: Text):
        super().__init__(str(said))
        self.said = said

    """A zip the grader will not unpack: unreadable, or it would write outside its folder, hold links, or
    unpack to more than the caps."""


class BatchBusy(Fault):
    """Another `grader batch` (or `grader override`) is writing the same output folder."""

    def __init__(self, out: Path):
        super().__init__(EXIT_BUSY, f"another grader batch is writing {out}: wait for it to end (or stop it) and run "
                                    "the same command; what was graded is kept")


@dataclass
class Entry:
    name: str                 # the row's name: the entry's own name, escaped when it is not printable text
    folder: Path | None       # None when there is nothing to grade
    status: str = ""          # with no folder: UNREADABLE (final) or GRADER_ERROR (graded again next run)
    problem: Text | None = None
    fingerprint: str = ""     # with no folder: what decides whether the entry changed


def row_name(name: str) -> str:
    """The name the gradebook shows for a class folder entry: the name itself when it is printable text without
    a backslash; otherwise escaped (a byte that is not UTF-8 as \\xNN, another unprintable character as \\uNNNN,
    a backslash as \\\\), so two entries never share a row and a name never breaks a CSV line or a path."""
    if name.isprintable() and "\\" not in name:
        return name
    return "".join(_escaped(ch) for ch in name)


def _escaped(ch: str) -> str:
    if "\udc80" <= ch <= "\udcff":           # os.fsdecode's stand-in for a byte that is not UTF-8
        return f"\\x{ord(ch) - 0xdc00:02x}"
    if ch == "\\":
        return "\\\\"
    if ch.isprintable():
        return ch
    return f"\\u{ord(ch):04x}" if ord(ch) <= 0xFFFF else f"\\U{ord(ch):08x}"


def discover(submissions: Path, unpack_to: Path, exercise_ids: set[str]) -> list[Entry]:
    """Student folders and zip files directly under `submissions`, in name order; links get a row of their own
    and are never followed. Other files (notes, a README) are not submissions."""
    entries = []
    for path in sorted(submissions.iterdir()):
        if path.name.startswith("."):
            continue
        name = row_name(path.name)
        try:
            info = os.lstat(path)
        except FileNotFoundError:   # removed while the batch started
            continue
        if stat.S_ISLNK(info.st_mode):
            entries.append(Entry(name, None, UNREADABLE, t("{name} is a symbolic link: submit plain files", name=name),
                                 _digest(b"link\0" + os.fsencode(os.readlink(path)))))
        elif stat.S_ISDIR(info.st_mode):
            entries.append(Entry(name, path))
        elif stat.S_ISREG(info.st_mode) and path.name.lower().endswith(".zip"):
            entries.append(_unpacked_entry(path, name, unpack_to / name, exercise_ids))
    return entries


def _unpacked_entry(archive: Path, name: str, target: Path, exercise_ids: set[str]) -> Entry:
    try:
        return Entry(name, unpack(archive, target, exercise_ids))
    except UnsafeArchive as exc:
        return Entry(name, None, UNREADABLE, t("{name} could not be unpacked: {why}", name=name, why=exc.said),
                     _file_digest(archive))
    except OSError as exc:   # writing the unpacked files: the grader's problem, not the student's
        fault = machine_fault(exc, target.parent.parent)
        if fault is not None:   # a full or read-only disk stops the batch, said in one line
            raise fault from exc
        return Entry(name, None, GRADER_ERROR, t("{name} could not be unpacked here: {error}", name=name,
                                                 error=verbatim(exc)))


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:20]


def _file_digest(path: Path) -> str:
    h = hashlib.sha256()
    try:
        with open(path, "rb") as fh:
            while chunk := fh.read(1 << 20):
                h.update(chunk)
    except OSError:
        return "unreadable"
    return h.hexdigest()[:20]


def unpack(archive: Path, target: Path, exercise_ids: set[str]) -> Path:
    """Unpack regular files only, refusing path escapes, links and oversized content; a single top-level
    folder is looked through, since students often zip their folder rather than its contents."""
    files = read_archive(archive)
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir(parents=True)
    for parts, data in files:
        destination = target.joinpath(*parts)
        destination.parent.mkdir(parents=True, exist_ok=True)
        destination.write_bytes(data)
    children = [p for p in target.iterdir() if not p.name.startswith((".", "__MACOSX"))]
    if len(children) == 1 and children[0].is_dir() and children[0].name not in exercise_ids:
        return children[0]
    return target


def read_archive(archive: Path) -> list[tuple[tuple[str, ...], bytes]]:
    """Each regular file of the archive as (path components, content), checked before anything is written."""
    try:
        with zipfile.ZipFile(archive) as zf:
            members = zf.infolist()
            _check_members(members)
            return [(Path(m.filename).parts, _read_member(zf, m)) for m in members if not m.is_dir()]
    except (UnsafeArchive, PermissionError):  # a file the grader may not read is the instructor's to fix
        raise
    # A crafted archive makes zipfile raise nearly anything: BadZipFile, RuntimeError (encrypted),
    # NotImplementedError (compression method 99), zlib.error (corrupt deflate data), EOFError, UnicodeDecodeError
    # (a name flagged UTF-8 that is not), OSError (a seek to a bogus offset)... Each means the same: unreadable.
    except Exception as exc:  # noqa: BLE001
        kind = (type(exc).__qualname__ if type(exc).__module__ == "builtins"
                else f"{type(exc).__module__}.{type(exc).__qualname__}")
        raise UnsafeArchive(verbatim(f"{kind}: {exc}")) from None


def _check_members(members: list[zipfile.ZipInfo]) -> None:
    if len(members) > MAX_ZIP_MEMBERS:
        raise UnsafeArchive(t("{count} entries (at most {most})", count=len(members), most=MAX_ZIP_MEMBERS))
    total = 0
    files, folders = set(), set()
    for m in members:
        parts = Path(m.filename).parts
        if m.filename.startswith(("/", "\\")) or ".." in parts or (parts and ":" in parts[0]):
            raise UnsafeArchive(t("entry {name} points outside the archive", name=repr(m.filename)))
        if not parts or any(len(os.fsencode(p)) > MAX_NAME_BYTES for p in parts):
            raise UnsafeArchive(t("entry {name} has no usable file name", name=repr(m.filename)))
        if stat.S_ISLNK(m.external_attr >> 16):
            raise UnsafeArchive(t("entry {name} is a symbolic link", name=repr(m.filename)))
        if m.file_size > MAX_ZIP_FILE_BYTES:
            raise UnsafeArchive(t("entry {name} is {size:,} bytes (at most {most:,})", name=repr(m.filename),
                                  size=m.file_size, most=MAX_ZIP_FILE_BYTES))
        total += m.file_size
        if total > MAX_ZIP_TOTAL_BYTES:
            raise UnsafeArchive(t("more than {most:,} bytes uncompressed", most=MAX_ZIP_TOTAL_BYTES))
        folders.update(parts[:i] for i in range(1, len(parts)))
        (folders if m.is_dir() else files).add(parts)
    clash = files & folders
    if clash:
        raise UnsafeArchive(t("{name} is both a file and a folder", name=repr("/".join(sorted(clash)[0]))))


def _read_member(zf: zipfile.ZipFile, m: zipfile.ZipInfo) -> bytes:
    """The entry's content, refused when larger than its header said: the checked sizes then bound the total."""
    with zf.open(m) as src:
        data = src.read(m.file_size + 1)
    if len(data) > m.file_size:
        raise UnsafeArchive(t("entry {name} is larger than it claims", name=repr(m.filename)))
    return data


@contextmanager
def batch_lock(out: Path):
    """Hold `out` for this run: unpacked folders and reports are this run's alone."""
    fd = os.open(out / LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise BatchBusy(out) from None
        yield
    finally:
        os.close(fd)


# The byte order mark spreadsheet programs (Excel above all) need to read a CSV file as UTF-8.
EXCEL_BOM = "\ufeff"


def run_batch(course: Course, submissions: Path, out: Path, jobs: int, regrade: bool, sandbox: str,
              lang: str, progress: BatchProgress | None = None, cluster: str | None = None,
              cluster_options: dict | None = None, roster: list[Student] | None = None,
              excel: bool = False, formats: tuple[str, ...] = (), submitted_at: dict[str, str] | None = None,
              arrivals: dict[str, Submitted] | None = None, rejudge: bool = False) -> dict:
    """Grade every entry of `submissions` not yet in the gradebook: on warm processes here (`cluster` None), or
    on Dask (`cluster`: "local", a scheduler's address, or a dask-jobqueue kind such as "slurm"). grades.csv
    names the students of `roster` when given, and starts with a byte order mark when `excel`; `formats` adds
    learning management systems' files (LMS_FILES). When each submission was handed in comes from the roster's
    submitted_at column, `submitted_at` (a --submitted-at file: a submission's or a student's name -> its time)
    and `arrivals` (submission -> Submitted, as the classroom sync knows them). `out` is made owner-only: it holds
    every student's code (unpacked) and report. `rejudge` judges again what each submission's grading kept, with no
    student code run, and grades from scratch those whose probes changed since (grader.grading.rejudge)."""
    if cluster is not None:
        from grader.batch.cluster import refuse_basic

        refuse_basic(sandbox, lang)
    try:
        return _run_batch(course, submissions, out, jobs, regrade, sandbox, lang, progress, cluster, cluster_options,
                          roster, excel, formats, submitted_at, arrivals, rejudge)
    except (OSError, sqlite3.Error) as exc:   # a full disk, a read-only --out, a held or damaged gradebook
        fault = machine_fault(exc, out)
        if fault is None:
            raise
        raise fault from exc


def _run_batch(course: Course, submissions: Path, out: Path, jobs: int, regrade: bool, sandbox: str, lang: str,
               progress: BatchProgress | None, cluster: str | None, cluster_options: dict | None,
               roster: list[Student] | None, excel: bool, formats: tuple[str, ...],
               submitted_at: dict[str, str] | None, arrivals: dict[str, Submitted] | None, rejudge: bool) -> dict:
    private_folder(out)
    with batch_lock(out):
        # What a killed run left unpacked goes first: nothing but this run writes here, and a stale partial
        # unpack must never be graded.
        shutil.rmtree(out / "unpacked", ignore_errors=True)
        tallies = _grade_class(course, submissions, out, jobs, regrade, sandbox, lang, progress or BatchProgress(),
                               cluster, cluster_options or {}, rejudge)
        tallies["unplaced_times"] = _record_times(course, out, tallies.pop("names"), roster, submitted_at or {},
                                                  arrivals or {})
        tallies["similarity"] = compare_class(course, out)
        tallies.update(publish(course, out, lang, roster, excel, formats, tallies.pop("written")))
        return tallies


# What --format adds to the class files, by name.
LMS_FILES = {"canvas": "canvas.csv", "moodle": "moodle.csv"}
SIMILARITY_FILE = "similarity.csv"


def _record_times(course: Course, out: Path, names: list[str], roster: list[Student] | None,
                  submitted_at: dict[str, str], arrivals: dict[str, Submitted]) -> list[str]:
    """Store in the gradebook when each submission was handed in, as the instructor says (the roster's submitted_at
    column, then a --submitted-at file, which wins, in this run and over the runs after it) or as GitHub says
    (`arrivals`); a time without a zone is in the due date's. Returns the --submitted-at names that fit no
    submission."""
    from grader.policy import FROM_FILE, FROM_ROSTER, load_policy, parse_moment
    from grader.batch.roster import match

    policy = load_policy(course)
    zone = policy.due.tzinfo if policy and policy.due else None
    times: dict[str, Submitted | None] = dict(arrivals)
    book = Gradebook(out / "gradebook.sqlite")
    try:
        recorded = book.submitted()
    finally:
        book.close()
    owner = {name: match(name, roster)[0] for name in names} if roster else {}
    for name, student in owner.items():
        from_file = name in recorded and recorded[name].how == FROM_FILE
        if student is not None and student.column("submitted_at") and not from_file:
            times[name] = Submitted(parse_moment(student.column("submitted_at"), zone), FROM_ROSTER)
    unplaced = []
    for key, when in submitted_at.items():
        folded = key.strip().casefold()
        fits = [n for n in names if n.casefold() in (folded, folded + ".zip")] or \
               [n for n, student in owner.items() if student is not None and student.id.casefold() == folded]
        if not fits:
            unplaced.append(key)
        for name in fits:
            times[name] = Submitted(parse_moment(when, zone), FROM_FILE)
    book = Gradebook(out / "gradebook.sqlite")
    try:
        book.set_submitted(times)
    finally:
        book.close()
    return unplaced


# In the gradebook's settings: what the stored pairs were compared from (_comparison_key).
SIMILARITY_INPUT = "similarity_input"


def _comparison_key(course: Course, submissions) -> str:
    """A digest of everything the comparison reads: each exercise's file name and stub, each submission's name and
    content hash (which decides its files), and the comparing code and copydetect's version."""
    import importlib.metadata

    import grader.review.similarity

    h = hashlib.sha256(Path(grader.review.similarity.__file__).read_bytes())
    h.update(importlib.metadata.version("copydetect").encode())
    for ex in course.exercises:
        h.update(f"\0{ex.id}\0{ex.file}\0".encode() + course.stub(ex).read_bytes())
    for s in submissions:
        h.update(f"\0{s.name}\0{s.content_hash}".encode())
    return h.hexdigest()


def compare_class(course: Course, out: Path) -> Text | None:
    """Compare the code of every submission with a verdict (grader.review.similarity) and store the pairs found alike;
    the reason when the comparison could not be made (the class page then has no pairs, and says why)."""
    from grader.batch.gradebook import graded_lines
    from grader.review.similarity import Submission, SimilarityFailed, compare_in_child

    book = Gradebook(out / "gradebook.sqlite")
    try:
        key = grader_key(course)
        sources = book.sources()
        judged = [line.submission for line in graded_lines(course, book, key)
                  if line.grade is not None and line.submission is not None]
        submissions = [Submission(s["submission"], s["content_hash"], sources[s["submission"]][1])
                       for s in judged if s["submission"] in sources
                       and sources[s["submission"]][0] == s["content_hash"]]
        compared = _comparison_key(course, submissions)
        if book.setting(SIMILARITY_INPUT) == compared and book.setting("similarity_failed") is None:
            return None   # the same files of the same submissions, compared by the same code: the same pairs
        try:
            pairs = compare_in_child(course, submissions) if len(submissions) > 1 else []
        except SimilarityFailed as exc:
            book.store_similar([])
            book.set_settings({"similarity_failed": exc.said.texts(), SIMILARITY_INPUT: None})
            return exc.said
        book.store_similar(pairs)
        book.set_settings({"similarity_failed": None, SIMILARITY_INPUT: compared})
        return None
    finally:
        book.close()


def publish(course: Course, out: Path, lang: str, roster: list[Student] | None, excel: bool,
            formats: tuple[str, ...], written: frozenset[str] = frozenset()) -> dict:
    """Everything `out` shows, from the gradebook alone: each student's report with its grade (overrides, lateness)
    in `lang`, grades.csv, the --format files, similarity.csv and class.html; the settings they were written with
    are kept, so that a command changing one grade (grader override) writes them again the same way. `written`:
    the submissions whose reports this process wrote just now (write_student_pages)."""
    book = Gradebook(out / "gradebook.sqlite")
    try:
        book.set_settings({"lang": lang, "excel": excel, "formats": list(formats),
                           "roster": [s.record() for s in roster] if roster is not None else None})
    finally:
        book.close()
    rendered, regraded = write_student_pages(course, out, lang, roster, written)
    summary = _write_class_files(course, out, lang, roster, excel, formats)
    return {"rendered": rendered, "regraded": regraded,
            "stale": [line for line in summary.overrides if line.graded is None]}


def stored_settings(out: Path) -> dict:
    """What the last `grader batch` into `out` wrote its class files with: lang, excel, formats, roster."""
    from grader.batch.roster import Student

    book = Gradebook(out / "gradebook.sqlite")
    try:
        roster = book.setting("roster")
        return {"lang": book.setting("lang", "en"), "excel": book.setting("excel", False),
                "formats": tuple(book.setting("formats", [])),
                "roster": [Student.from_record(r) for r in roster] if roster is not None else None}
    finally:
        book.close()


# In a student's report folder: the language its report.html and scorecard.md were written in.
RENDERED_LANG = ".lang"
RERENDERED = ("html", "md")   # what a student's folder holds besides report.json, the record they are made from


def render_students(course: Course, out: Path, lang: str, roster: list[Student] | None = None) -> int:
    """write_student_pages: how many students' pages were written again (for their language or their grade)."""
    return sum(write_student_pages(course, out, lang, roster))


def write_student_pages(course: Course, out: Path, lang: str, roster: list[Student] | None = None,
                        written: frozenset[str] = frozenset()) -> tuple[int, int]:
    """Bring every student's report.json, report.html and scorecard.md the gradebook holds up to date, with no
    grading: the report's `grade` (overrides, lateness: grader.batch.grades) as the gradebook now says, and the pages in
    `lang` (one in another language, or in one not recorded, is written again from the student's report.json).
    `written` names submissions whose report.json this process wrote just now, with no grade in it (as every grading
    and re-judging writes one): one of those whose grade is none and whose pages are in `lang` is not read back.
    Returns (how many were written again for their language only, how many for their grade)."""
    from grader.batch.gradebook import graded_lines
    from grader.report.build import stored_report, with_grade
    from grader.render.files import FORMATS

    book = Gradebook(out / "gradebook.sqlite")
    try:
        grades = {line.name: line.grade for line in graded_lines(course, book, grader_key(course), roster)
                  if line.submission is not None and line.submission["report_dir"]}
    finally:
        book.close()
    relang = regraded = 0
    for name, grade in grades.items():
        folder = out / "students" / name
        try:
            same_lang = (folder / RENDERED_LANG).read_text(encoding="utf-8").strip() == lang
        except OSError:
            same_lang = False
        wanted = grade.record() if grade is not None and grade.adjusted else None
        if same_lang and wanted is None and name in written:
            continue
        try:
            data = json.loads((folder / "report.json").read_text(encoding="utf-8"))
            if same_lang and data.get("grade") == wanted:
                continue
            report = with_grade(stored_report(data), wanted)   # the written answers as the grade says
            if data.get("grade") != wanted:
                write_atomic(folder / "report.json", report.to_json() + "\n")
            pages = {FORMATS[fmt][0]: FORMATS[fmt][1](report, course.templates, lang) for fmt in RERENDERED}
            for file_name, text in pages.items():
                write_atomic(folder / file_name, text)
        # No record to render from, a full disk, a bug of ours on one report: that student's files stay as they
        # are, unmarked, so the next run tries again; the class's pages are still written.
        except Exception:  # noqa: BLE001
            continue
        _mark_rendered(folder, lang)
        if data.get("grade") != wanted:
            regraded += 1
        else:
            relang += 1
    return relang, regraded


def _mark_rendered(folder: Path, lang: str) -> None:
    """Record the language of the folder's reports; unrecorded (a full disk, a crash before the disk had it), the
    next run writes them again: no wait for the disk."""
    try:
        write_atomic(folder / RENDERED_LANG, lang + "\n", durable=False)
    except OSError:
        with suppress(OSError):
            (folder / RENDERED_LANG).unlink(missing_ok=True)


def _write_class_files(course: Course, out: Path, lang: str, roster: list[Student] | None, excel: bool,
                       formats: tuple[str, ...] = ()):
    """grades.csv, the --format files, similarity.csv and class.html, from the whole gradebook (submissions graded
    by earlier runs included)."""
    from grader.classroom.lms import canvas_csv, moodle_csv
    from grader.render.templated import render_class

    bom = EXCEL_BOM if excel else ""
    book = Gradebook(out / "gradebook.sqlite")
    try:
        key = grader_key(course)
        write_atomic(out / "grades.csv", bom + grades_csv(course, book, key, roster, lang))
        exports = {"canvas": lambda: canvas_csv(course, book, roster), "moodle": lambda: moodle_csv(course, book,
                                                                                                   roster, lang)}
        for fmt in formats:
            write_atomic(out / LMS_FILES[fmt], bom + exports[fmt]())
        summary = class_summary(course, book, key, roster, _criteria(course, book))
        write_atomic(out / SIMILARITY_FILE, bom + similarity_csv(summary))
        write_atomic(out / "class.html", render_class(summary, course, course.templates, lang))
        return summary
    finally:
        book.close()


# In the gradebook's settings: each exercise's criteria as the class page lists them, with the judge versions (which
# hold the criteria's code) they were read under.
CRITERIA_SETTING = "criteria"


def _criteria(course: Course, book: Gradebook) -> dict[str, list]:
    """Each exercise's criteria, kept in the gradebook while the exercises' judge versions are the same: writing the
    class files then imports no criteria module (nor torch with them), which costs a re-judging of points alone more
    than the rest of its class files."""
    from grader.judge.channel import meta_from_json, meta_to_json
    from grader.grading.rejudge import judge_versions

    versions = judge_versions(course)
    kept = book.setting(CRITERIA_SETTING)
    if isinstance(kept, dict) and kept.get("versions") == versions:
        return {ex: [meta_from_json(m) for m in metas] for ex, metas in kept["criteria"].items()}
    from grader.judge.listing import criteria_of   # read from the criteria's source: no torch, no pytest

    criteria = {ex.id: criteria_of(ex.id, course.solutions) for ex in course.exercises}
    book.set_settings({CRITERIA_SETTING: {"versions": versions, "criteria": {
        ex: [meta_to_json(m) for m in metas] for ex, metas in criteria.items()}}})
    return criteria


def similarity_csv(summary) -> str:
    """The pairs of near-identical code class.html shows: exercise, the two submissions (and their students), the
    similarity (the lesser share) and each one's share of code the other holds."""
    from grader.render.safe_text import csv_text

    return csv_text([["exercise", "first", "first_student", "second", "second_student", "similarity", "first_share",
                      "second_share"],
                     *[[pair.exercise, pair.first.submission, pair.first.student, pair.second.submission,
                        pair.second.student, pair.similarity, pair.first_share, pair.second_share]
                       for pair in summary.similar]])


def _grade_class(course: Course, submissions: Path, out: Path, jobs: int, regrade: bool, sandbox: str,
                 lang: str, progress: BatchProgress, cluster: str | None, cluster_options: dict,
                 rejudge: bool = False) -> dict:
    from grader.batch.rows import _parsed_report
    from grader.grading.rejudge import STORE, judge_versions, prepare_judge, stale, with_outcomes

    book = Gradebook(out / "gradebook.sqlite")
    key = grader_key(course)
    entries = discover(submissions, out / "unpacked", {ex.id for ex in course.exercises})
    todo, skipped = [], 0
    stored: list[tuple[Entry, str, dict]] = []   # re-judged from what their grading kept
    afresh: list[tuple[str, Text]] = []          # asked to be re-judged, graded from scratch: why
    before: dict[str, list[dict]] = {}           # each re-judged or regraded submission's rows before this run
    versions = judge_versions(course)
    prepared = False   # the judge started on what it will judge again, while the records are read
    for e in entries:
        chash = content_hash(course, e.folder) if e.folder else e.fingerprint or e.status
        if e.folder is not None:   # what each submission is compared with the others on
            book.store_sources(e.name, chash, exercise_sources(course, e.folder))
        if rejudge and e.folder is not None:
            before[e.name] = book.latest_rows(e.name)
            record = book.observed(e.name, chash)
            changed = stale(course, record)
            if record is not None and not changed:
                stored.append((e, chash, record))
                prepared = prepared or prepare_judge(course, record, versions)
                continue
            afresh.append((e.name, t("no observations of these files were kept") if record is None else
                           t("the probes of {exercises} changed since it was graded", exercises=", ".join(changed))))
            todo.append((e, chash))
        elif not regrade and book.is_graded(e.name, chash, key):
            skipped += 1
        else:
            todo.append((e, chash))
    gradable = [((e, chash), e.folder) for e, chash in todo if e.folder is not None]
    progress.begin(len(entries), skipped, len(gradable) + len(stored))

    together: list[tuple[Entry, str, dict, list[dict], dict | None]] = []   # re-judged, stored in one transaction
    written: set[str] = set()   # the submissions whose reports this run wrote (publish need not read them back)

    def record(entry: Entry, chash: str, summary: dict, rows: list[dict], kept: dict | None = None,
               reply: dict | None = None) -> None:
        report = _parsed_report((reply or {}).get("files", {}).get("report.json")) if kept is not None else None
        if kept is not None and report is not None and summary["status"] != GRADER_ERROR:
            kept = with_outcomes(kept, report, versions)   # what the judge concluded, for the re-judgings after
        together.append((entry, chash, summary, rows, kept))
        stored_together()

    def stored_together(at_least: int = 1) -> None:
        if len(together) < at_least:
            return
        book.store_many([(entry.name, chash, key, summary, rows, kept) for entry, chash, summary, rows, kept
                         in together])
        for entry, _, summary, _, _ in together:
            if summary.get("report_dir"):   # its reports were rendered in the batch's language
                _mark_rendered(Path(summary["report_dir"]), lang)
                written.add(entry.name)
            progress.finished(entry.name, summary, graded=entry.folder is not None)
        together.clear()

    for entry, chash in todo:
        if entry.folder is None:   # nothing to grade: the entry's own verdict
            record(entry, chash, *failure_rows(course, entry.status, entry.problem, now()))
    with closing(_rejudged(course, out / STORE, stored, jobs, lang, progress, versions, out / "students")) as again:
        for (entry, chash, kept), reply in again:
            _rejudged_reply(course, out, entry, chash, kept, reply, afresh, gradable, together)
            stored_together(STORE_TOGETHER)
    stored_together()
    if gradable:
        # Observations are kept where this machine's grading processes can write them (not from a cluster's).
        engine = _engine(course, jobs, sandbox, lang, cluster, cluster_options, out / STORE)
        replies = engine.replies(gradable, lambda tag: progress.started(tag[0].name))
        try:
            for (entry, chash), reply in replies:
                record(entry, chash, *_reply_rows(course, out, entry, reply), reply.get("kept"), reply)
        except BaseException:
            # A signal, a full disk: the grading processes end now, with what they started; what was in flight is
            # graded by the next run.
            engine.abort()
            raise
        finally:
            replies.close()
            engine.close()
    tallies = {"total": len(entries), "graded": len(todo) + len(stored), "skipped": skipped,
               "names": [e.name for e in entries], "written": frozenset(written)}
    if rejudge:
        tallies.update(_diff(book, out, before, {e.name for e, _, _ in stored} - {name for name, _ in afresh},
                             afresh))
    book.close()
    return tallies


def _reply_rows(course: Course, out: Path, entry: Entry, reply: dict) -> tuple[dict, list[dict]]:
    """The summary and rows of a grading's reply (its reports written into the student's folder); a failure of
    ours on that one submission is its grader error, a fault of the machine (a full disk) the batch's."""
    try:
        return reply_rows(course, reply, out / "students" / entry.name, now())
    except Exception as exc:  # noqa: BLE001 - a bug of ours on one submission must not stop the class
        fault = machine_fault(exc, out)
        if fault is not None:
            raise fault from exc
        return failure_rows(course, GRADER_ERROR, t("the batch could not grade it: {error}", error=repr(exc)), now())


def _rejudged_reply(course: Course, out: Path, entry: Entry, chash: str, kept: dict, reply: dict | None,
                    afresh: list, gradable: list, together: list) -> None:
    """A re-judged submission's reply, put with those stored together; one whose kept observations could not be
    read goes to those graded from scratch."""
    if reply is None:   # what was kept is gone or damaged: graded from scratch
        afresh.append((entry.name, t("its kept observations could not be read")))
        gradable.append(((entry, chash), entry.folder))
        return
    summary, rows = _reply_rows(course, out, entry, reply)
    # The reply's record holds what the judge concluded already; a killed run loses at most STORE_TOGETHER
    # re-judgings, done again by the next run.
    together.append((entry, chash, summary, rows, reply.get("kept") or kept))


STORE_TOGETHER = 25   # re-judged submissions stored in one transaction (a re-judging costs no commit each)


def _rejudged(course: Course, store: Path, stored: list[tuple[Entry, str, dict]], jobs: int, lang: str,
              progress: BatchProgress, versions: dict[str, str], students: Path):
    """(item, reply) for each stored submission, in order: what its exercises of a changed judge version conclude,
    judged again `jobs` at a time (each submission in a child process of the judging server, under its limits), and
    its reports built, rendered and written (into its folder under `students`) in `jobs` processes of their own (the
    kept outcomes make a change of points alone cost that only); reply None when what was kept cannot be read. The
    reply's `kept` is the record with what the judge concluded."""
    from collections import deque
    from concurrent.futures import ThreadPoolExecutor

    from grader.grading.rejudge import NotKept, judged_again

    def judged(item: tuple[Entry, str, dict]) -> dict | None:
        entry, _, kept = item
        progress.started(entry.name)
        try:
            return {"judged": judged_again(course, kept, store, versions)}
        except (NotKept, OSError, KeyError):
            return None
        except Exception as exc:  # noqa: BLE001 - the grader's failure is this submission's grader_error
            return {"error": f"{type(exc).__name__}: {exc}"}

    if not stored:
        return
    pool = _report_pool(jobs) if len(stored) > jobs else None
    if pool is not None:   # each report process readies itself while the judging server starts
        for _ in range(max(1, jobs)):
            pool.submit(ready_to_report, course.templates)
    threads = ThreadPoolExecutor(max_workers=max(1, jobs))
    stopping = False
    try:
        waiting: deque = deque()
        for item, got in zip(stored, threads.map(judged, stored), strict=True):
            if got is None or "error" in got:
                waiting.append((item, got))
            else:
                args = (course, item[0].name, item[2], versions, got["judged"], lang, students / item[0].name)
                waiting.append((item, pool.submit(rejudged_files, *args) if pool else rejudged_files(*args)))
            while waiting and not _pending(waiting[0][1]):
                yield _settled(*waiting.popleft())
        while waiting:
            yield _settled(*waiting.popleft())
    except BaseException:   # a signal, a full disk, or the batch left the loop: its helpers end now
        stopping = True
        raise
    finally:
        threads.shutdown(wait=not stopping, cancel_futures=True)
        if stopping:
            from grader.grading.pipeline import judge_for

            judge_for(course).close()   # what is being judged again ends with it
        if pool is not None and stopping:
            pool.abort()
        elif pool is not None:
            pool.shutdown()


def _pending(reply) -> bool:
    return hasattr(reply, "done") and not reply.done()


def _settled(item, reply):
    """(item, the reply), a rendering process's reply waited for; a process that died leaves that submission a
    grader error (graded again by the next run), never the class's."""
    if hasattr(reply, "result"):
        try:
            reply = reply.result()
        except Exception as exc:  # noqa: BLE001 - BrokenProcessPool, or a reply that could not be sent back
            reply = {"error": f"{type(exc).__name__}: {exc}"}
    return item, reply


def _report_pool(jobs: int):
    """`jobs` processes that build and render re-judged reports off this process's interpreter lock (a dead one
    costs the reports it held their rendering, asked again of a fresh pool: grader.batch.pool.ReportPool), started
    from a fork server that has imported the reporting code once."""
    from grader.batch.pool import ReportPool

    return ReportPool(jobs, ["grader.grading.rejudge", "grader.grading.pipeline", "grader.render.files"])


def ready_to_report(templates: Path) -> None:
    """What a report process does once, at its first report otherwise (the message catalogs parsed, the report
    templates compiled, the report modules imported: about 85 ms), done before any report is asked of
    it: a re-judging's report processes are otherwise idle while the judging server starts."""
    import grader.batch.warm  # noqa: F401 - imported here, as rejudged_files imports it
    import grader.report.build  # noqa: F401
    from grader.i18n import LANGS, catalog
    from grader.render.templated import compile_report_templates

    for lang in LANGS:
        catalog(lang)
    compile_report_templates(templates)


def rejudged_files(course: Course, name: str, kept: dict, versions: dict[str, str], judged: dict[str, list],
                   lang: str, report_dir: Path) -> dict:
    """A re-judged submission's reply, as a grading process's, its report's files in `lang` written to `report_dir`
    already (`WRITTEN_TO`: here, in a report process, off the batch's own process and its waits for the disk; none
    when the folder holds those very files, as a report the re-judging left as it was does: `pages_current`), with
    the summary and rows made of the report (`ROWS`, the time of grading left to the batch), and `kept`, the record
    with what the judge concluded, encoded as the gradebook stores it."""
    from grader.grading.rejudge import pages_current, report_from, stamped, with_outcomes
    from grader.render.files import FORMATS
    from grader.report.model import indented_json
    from grader.batch.warm import REPORT_FILES

    try:
        report = report_from(course, name, kept, versions, judged)
        data = report.to_dict()   # what report.json is written from, and what the outcomes are kept from
        text = indented_json(data) + "\n"
        templates = course.templates
        names = [FORMATS[fmt][0] for fmt in REPORT_FILES]
        if not pages_current(report_dir, names, text, lang, templates):
            # a report left by an earlier run must not be read as this one's
            (report_dir / "report.json").unlink(missing_ok=True)
            files = {FORMATS[fmt][0]: text if fmt == "json" else FORMATS[fmt][1](report, templates, lang)
                     for fmt in REPORT_FILES}
            for file_name, page in stamped(files, lang, templates).items():
                write_atomic(report_dir / file_name, page)
        # The summary, the rows and the record made here, of the report held here: the batch's own process (busy
        # with the judging's replies and the gradebook) neither reads report.json back nor encodes the record.
        return {WRITTEN_TO: str(report_dir), ROWS: report_rows(data, report_dir, ""),
                "kept": EncodedRecord(encoded_record(with_outcomes(kept, data, versions)))}
    except Exception as exc:  # noqa: BLE001 - the grader's failure is this submission's grader_error
        return {"error": f"{type(exc).__name__}: {exc}"}


def _diff(book: Gradebook, out: Path, before: dict[str, list[dict]], rejudged: set[str],
          afresh: list[tuple[str, Text]]) -> dict:
    """The grade diff of a re-judging, written to DIFF_FILE: each criterion whose points or status changed."""
    from grader.grading.rejudge import DIFF_FILE, diff_csv, grade_diff

    lines = []
    for name in sorted(before):
        lines += grade_diff(name, before[name], book.latest_rows(name), "rejudged" if name in rejudged else "regraded")
    write_atomic(out / DIFF_FILE, diff_csv(lines))
    return {"rejudged": len(rejudged), "afresh": afresh, "diff": lines, "diff_file": out / DIFF_FILE,
            "totals": {name: (sum(r["points"] for r in before[name]), sum(r["points"] for r in book.latest_rows(name)))
                       for name in before}}


def exercise_sources(course: Course, folder: Path) -> dict[str, str]:
    """The code each exercise of a submission is graded on, as text, whichever file it came from (its .py file or
    a notebook: grader/sandbox/staging.py's `graded_code`); an exercise with nothing graded is left out."""
    from grader.sandbox.staging import graded_code

    found = {}
    for ex in course.exercises:
        try:
            graded = graded_code(folder, ex.id, ex.file, course.stub(ex))
        except OSError:
            continue
        if graded.data is not None:   # valid UTF-8: staging refuses a file that is not
            found[ex.id] = graded.data.decode("utf-8", errors="replace")
    return found


def _engine(course: Course, jobs: int, sandbox: str, lang: str, cluster: str | None, cluster_options: dict,
            keep: Path | None = None):
    """Warm grading processes on this machine (keeping each submission's observations in `keep`), or Dask workers
    wherever `cluster` says."""
    if cluster is None:
        from grader.batch.pool import WarmPool

        return WarmPool(course, jobs, sandbox, lang, keep)
    from grader.batch.cluster import DaskEngine

    return DaskEngine(course, jobs, sandbox, lang, cluster, cluster_options)
