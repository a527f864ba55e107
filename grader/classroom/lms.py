"""Grades into learning management systems: the CSV files Canvas and Moodle import as they are, and a push of each
student's grade and scorecard to a Canvas assignment.

Theory of operation. Everything starts from the class's lines (grader.batch.gradebook.graded_lines: the roster's
students in its order, each with their final grade or none) and from the roster's columns, which decide how the
system finds each student; a grade is never placed by a guess. Where there is no grade (no submission, no verdict
on the student's work, two submissions of one student) the cell is blank: an importer leaves a blank alone, while
a 0 would be recorded.

- Canvas's gradebook import (`canvas.csv`) reads a header `Student, ID, SIS User ID, SIS Login ID, Section`, then
  one column per assignment, and a `Points Possible` row. It finds each student by `ID` (Canvas's own user id),
  else `SIS User ID`, else `SIS Login ID`, else by name. The roster's `canvas_id`, `sis_user_id` and
  `sis_login_id` columns fill them; at least one is required, so no grade is placed by a name. An assignment
  column named `Title (123)` is Canvas's assignment 123, so the column carries the course's name alone and its
  points go in the `Points Possible` row: Canvas matches an assignment of that title, or makes one.
- Moodle's grade import (Grades > Import > CSV file) reads any columns and lets the instructor map one to a user
  field (`ID number` to useridnumber, `Email address` to useremail, `Username` to username) and the others to
  a grade item or its feedback. `moodle.csv` has the student's `Full name`, the identifiers the roster holds
  (`idnumber`, else its `id`, as `ID number`; `email`; `username`), the final grade named after the course, and
  `Feedback` (why a cell is blank, the late penalty, the instructor's overrides).
- The Canvas push (`grader lms canvas`) sends, with canvasapi, one PUT per student with a grade to
  `/api/v1/courses/:course/assignments/:assignment/submissions/:user` carrying `submission[posted_grade]` (the
  final points) and `comment[text_comment]` (the student's scorecard). The user is addressed as the CSV finds
  them (`123`, `sis_user_id:...`, `sis_login_id:...`). What was sent is recorded in the gradebook, so a run
  again sends only what changed (or everything, with --force).
"""

from __future__ import annotations

import hashlib
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from grader.course import Course
from grader.batch.gradebook import Gradebook, GradedLine, graded_lines, grader_key
from grader.batch.grades import course_max
from grader.batch.manual import written_count
from grader.i18n import LANGS, Text, join, rendered, t, verbatim
from grader.render.safe_text import csv_text
from grader.batch.roster import Student

CANVAS_COLUMNS = ("Student", "ID", "SIS User ID", "SIS Login ID", "Section")
CANVAS_IDENTIFIERS = ("canvas_id", "sis_user_id", "sis_login_id")   # the roster columns that fill ID, SIS...
POINTS_POSSIBLE = "Points Possible"
MOODLE_IDENTIFIERS = {"idnumber": "ID number", "email": "Email address", "username": "Username"}
TOKEN_VARIABLE = "CANVAS_TOKEN"
URL_VARIABLE = "CANVAS_URL"
TIMEOUT_S = 60


class LmsError(Exception):
    """An export or a push that cannot be made as asked; `said` says why, in each language."""

    def __init__(self, said: Text):
        super().__init__(str(said))
        self.said = said


class RedirectRefused(LmsError):
    """Canvas's address answered with a redirect to another scheme, host or port: the push stops there, since the
    request would carry a grade and a scorecard to whoever answers at that address."""


@dataclass(frozen=True)
class Placed:
    """A roster's student as a system gets them: their grade, or why there is none."""

    student: Student
    line: GradedLine | None     # the submission graded for them (None: none, or more than one)
    final: float | None         # None: the cell stays blank
    why: Text | None            # why it is blank


def placed(course: Course, book: Gradebook, roster: list[Student]) -> tuple[list[Placed], list[str]]:
    """Each roster student's grade, in the roster's order, and the submissions no student of the roster holds (an
    LMS cannot place them)."""
    lines = graded_lines(course, book, grader_key(course), roster)
    by_student: dict[str, list[GradedLine]] = {}
    strangers = []
    for line in lines:
        if line.student is None:
            strangers.append(line.name)
        elif line.submission is not None:
            by_student.setdefault(line.student.id, []).append(line)
    result = []
    for student in roster:
        theirs = by_student.get(student.id, [])
        if not theirs:
            result.append(Placed(student, None, None, t("no submission")))
        elif len(theirs) > 1:
            result.append(Placed(student, None, None, t("{count} submissions ({names}): grade one by hand",
                                                        count=len(theirs),
                                                        names=", ".join(line.name for line in theirs))))
        elif theirs[0].grade is None:
            result.append(Placed(student, theirs[0], None, rendered(theirs[0].reason or dict.fromkeys(LANGS, ""))))
        else:
            result.append(Placed(student, theirs[0], theirs[0].grade.final, None))
    return result, strangers


def canvas_csv(course: Course, book: Gradebook, roster: list[Student] | None) -> str:
    """Canvas's gradebook import: the roster's students, each found by the identifiers the roster holds, and one
    assignment column named after the course, its points in the Points Possible row."""
    roster = _needs_roster(roster, "canvas")
    present = [c for c in CANVAS_IDENTIFIERS if any(s.column(c) for s in roster)]
    if not present:
        raise LmsError(t("Canvas finds a student by ID, SIS User ID or SIS Login ID: the roster needs a column "
                         "canvas_id, sis_user_id or sis_login_id (a grade is never placed by a name)"))
    max_score = course_max(course, written_count(book, course))
    title = course.name.replace("(", "[").replace(")", "]")   # "Title (123)" would name Canvas's assignment 123
    grades, _ = placed(course, book, roster)
    return csv_text([[*CANVAS_COLUMNS, title], [POINTS_POSSIBLE, "", "", "", "", max_score],
                     *[[p.student.name, p.student.column("canvas_id"), p.student.column("sis_user_id"),
                        p.student.column("sis_login_id"), p.student.column("section"), p.final] for p in grades]])


def moodle_csv(course: Course, book: Gradebook, roster: list[Student] | None, lang: str = "en") -> str:
    """Moodle's grade import: the student's name, every identifier the roster holds, the final grade, feedback."""
    roster = _needs_roster(roster, "moodle")
    columns = [c for c in MOODLE_IDENTIFIERS if c == "idnumber" or any(_moodle_id(s, c) for s in roster)]
    grades, _ = placed(course, book, roster)
    rows: list[list[str | float | None]] = [["Full name", *[MOODLE_IDENTIFIERS[c] for c in columns], course.name,
                                             "Feedback"]]
    for p in grades:
        feedback = p.why if p.why is not None else (p.line.grade.said() if p.line and p.line.grade else None)
        rows.append([p.student.name, *[_moodle_id(p.student, c) for c in columns], p.final,
                     feedback.render(lang) if feedback is not None else ""])
    return csv_text(rows)


def _moodle_id(student: Student, column: str) -> str:
    if column == "idnumber":
        return student.column("idnumber") or student.id
    return student.email if column == "email" else student.column(column)


def _needs_roster(roster: list[Student] | None, system: str) -> list[Student]:
    if not roster:
        raise LmsError(t("--format {system} needs --roster: the roster says who each student is to {system}",
                         system=system))
    return roster


# --- the push to Canvas -------------------------------------------------------------------------------------------

def canvas_user(student: Student) -> str | None:
    """How Canvas's API addresses the student in a URL: its own id, else `sis_user_id:...`, else
    `sis_login_id:...` (escaped; a period too, which Canvas would read as a format suffix)."""
    def escaped(value: str) -> str:
        return urllib.parse.quote(value, safe="").replace(".", "%2E")

    if student.column("canvas_id"):
        return escaped(student.column("canvas_id"))
    for column in ("sis_user_id", "sis_login_id"):
        if student.column(column):
            return f"{column}:{escaped(student.column(column))}"
    return None


@dataclass
class Sent:
    """One roster student in a push: what was (or would be) sent, or why nothing was."""

    student: Student
    user: str | None           # the URL's user part
    grade: str | None          # posted_grade
    comment: str | None
    status: str                # SENT, SKIPPED (nothing to send), UNCHANGED (sent before as it is), FAILED, DRY
    said: Text


SENT, SKIPPED, UNCHANGED, FAILED, DRY = "sent", "skipped", "unchanged", "failed", "dry run"
STATUS_SAID = {SENT: t("sent"), SKIPPED: t("not sent"), UNCHANGED: t("unchanged"), FAILED: t("failed"),
               DRY: t("would send")}


def canvas_push(course: Course, out: Path, roster: list[Student] | None, canvas_course: str, assignment: str,
                url: str | None, token: str | None, dry_run: bool = False, force: bool = False,
                progress: Callable[[Sent], None] = lambda sent: None, lang: str = "en") -> list[Sent]:
    """Send each roster student's final grade and scorecard to Canvas assignment `assignment` of course
    `canvas_course` at `url`, one PUT per student; with `dry_run` send nothing and say what would be sent."""
    roster = _needs_roster(roster, "canvas")
    book = Gradebook(out / "gradebook.sqlite")
    try:
        grades, _ = placed(course, book, roster)
        target = f"canvas {url or ''} {canvas_course} {assignment}"
        already = book.sent(target)
        plan: list[Sent] = []
        for p in grades:
            user = canvas_user(p.student)
            if user is None:
                plan.append(Sent(p.student, None, None, None, SKIPPED,
                                 t("the roster gives no canvas_id, sis_user_id or sis_login_id")))
            elif p.final is None:
                plan.append(Sent(p.student, user, None, None, SKIPPED, t("no grade: {why}", why=p.why)))
            else:
                comment = _scorecard(course, out, p.line.name if p.line else "", lang)
                plan.append(Sent(p.student, user, f"{p.final:g}", comment, DRY, t("not sent: a dry run")))
        if dry_run:
            for sent in plan:
                progress(sent)
            return plan
        if not url or not token:
            raise LmsError(t("set {token} to a Canvas access token and pass --url (or set {url}) to push",
                             token=TOKEN_VARIABLE, url=URL_VARIABLE))
        submission_of = _canvas_assignment(course_max(course, written_count(book, course)), url, token,
                                           canvas_course, assignment)
        for sent in plan:
            if sent.grade is None:
                progress(sent)
                continue
            digest = hashlib.sha256(f"{sent.user}\0{sent.grade}\0{sent.comment}".encode()).hexdigest()
            if not force and already.get(_key(sent)) == digest:
                sent.status, sent.said = UNCHANGED, t("sent before as it is")
                progress(sent)
                continue
            try:
                submission_of(sent.user).edit(submission={"posted_grade": sent.grade},
                                              comment={"text_comment": sent.comment})
            except RedirectRefused:
                sent.status, sent.said = FAILED, t("not sent: Canvas redirected it to another host")
                progress(sent)
                raise
            except Exception as exc:  # noqa: BLE001 - canvasapi's and requests' errors alike: this student's row
                sent.status, sent.said = FAILED, t("Canvas refused it: {error}",
                                                   error=verbatim(f"{type(exc).__name__}: {exc}"))
            else:
                from grader.batch.grades import now

                sent.status, sent.said = SENT, t("sent to Canvas")
                book.mark_sent(target, _key(sent), digest, now())
            progress(sent)
        return plan
    finally:
        book.close()


def _key(sent: Sent) -> str:
    return sent.student.id


def _scorecard(course: Course, out: Path, submission: str, lang: str) -> str:
    """The student's scorecard as the course's feedback policy shows it now (grader.feedback.handed_out: the grade's
    overrides and penalty included, criteria not shown yet as the policy says). Without the student's report.json
    there is no comment: the scorecard.md beside it is the instructor's, whole."""
    from grader.feedback import handed_out

    if not (out / "students" / submission / "report.json").is_file():
        return ""
    return handed_out(course, out, submission, lang)["scorecard.md"]


def _canvas_assignment(max_score: float, url: str, token: str, canvas_course: str, assignment: str):
    """A function from a user's URL part to a canvasapi Submission of the assignment, once the assignment is found
    and is worth the course's points (posted_grade is points: another maximum would scale every grade wrongly)."""
    import functools
    import warnings

    from canvasapi import Canvas
    from canvasapi.exceptions import CanvasException
    from canvasapi.submission import Submission

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")   # canvasapi warns of http:// addresses, which a test's fake server uses
        canvas = Canvas(url.rstrip("/"), token)
    requester = canvas._Canvas__requester   # noqa: SLF001 - canvasapi sets no timeout of its own
    requester._session.request = functools.partial(requester._session.request, timeout=TIMEOUT_S)
    requester._session.hooks["response"].append(_refuse_other_origins(requester._session, url))
    try:
        found = canvas.get_course(canvas_course).get_assignment(assignment)
    except (CanvasException, OSError) as exc:
        raise LmsError(t("Canvas: course {course}, assignment {assignment}: {error}", course=canvas_course,
                         assignment=assignment, error=verbatim(f"{type(exc).__name__}: {exc}"))) from None
    points = getattr(found, "points_possible", None)
    if points is None or abs(float(points) - max_score) > 1e-9:
        raise LmsError(t("Canvas's assignment {assignment} is worth {points} points and the course {max_score:g}: "
                         "make them the same in Canvas, so that the points sent mean the same there",
                         assignment=assignment, points=points, max_score=max_score))

    def submission_of(user: str) -> Submission:
        return Submission(found._requester, {"course_id": found.course_id, "assignment_id": found.id,
                                             "user_id": user})

    return submission_of


def _origin(url: str) -> tuple[str, str, int | None]:
    """An address's scheme, host and port (the scheme's own port where none is written)."""
    parts = urllib.parse.urlsplit(url)
    scheme = parts.scheme.lower()
    try:
        port = parts.port
    except ValueError:   # not a port at all: an origin no address shares
        port = -1
    return scheme, (parts.hostname or "").lower(), port or {"http": 80, "https": 443}.get(scheme)


def _refuse_other_origins(session, url: str) -> Callable:
    """A requests response hook that raises RedirectRefused for a redirect away from `url`'s origin. Hooks run on
    each response before requests follows its redirect, so nothing (a 307 or 308 would repeat the body) is sent
    to the other address; a redirect within Canvas's own origin is followed as before."""
    origin = _origin(url)

    def refuse(response, *args, **kwargs):
        target = session.get_redirect_target(response)
        if target is not None and _origin(urllib.parse.urljoin(response.url, target)) != origin:
            request = response.request
            raise RedirectRefused(t("Canvas at {url} answered {method} {path} with a redirect to another host "
                                    "({target}): nothing was sent there and the push stopped; pass the address "
                                    "Canvas answers at itself as --url",
                                    url=verbatim(url), method=verbatim(request.method),
                                    path=verbatim(urllib.parse.urlsplit(request.url).path),
                                    target=verbatim(urllib.parse.urljoin(response.url, target))))
        return response

    return refuse


def said_of(sent: Sent) -> Text:
    """One line of the push's output."""
    who = verbatim(f"{sent.student.name or sent.student.id} ({sent.student.id})")
    if sent.grade is None:
        return t("{who}: {status}: {said}", who=who, status=STATUS_SAID[sent.status], said=sent.said)
    line = t("{who}: {status}: PUT submissions/{user} posted_grade={grade}, a comment of {size} characters",
             who=who, status=STATUS_SAID[sent.status], user=verbatim(sent.user), grade=verbatim(sent.grade),
             size=len(sent.comment or ""))
    return join((line, sent.said), t("; ")) if sent.status in (FAILED, UNCHANGED) else line
