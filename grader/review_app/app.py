"""The review app: Starlette routes over the gradebook's written answers (grader/batch/manual.py stores them).

Every page lives under a TA's token (`/<token>/...`); a path with any other token is 404, so the address is the key,
and the token says who made each change. The pages carry no inline script or style: the Content-Security-Policy
below refuses both, and review.js (a static file) does the keyboard, the saving and the conflicts.

Students are named in a page by an opaque id (an HMAC of their name under a key made at start): an anonymised page
shows neither a name nor anything derived from one until the answer's grade is saved.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import math
import secrets
import sqlite3
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import jinja2
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, PlainTextResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from grader.course import Course, ExerciseConfig, Question
from grader.i18n import LANGS, Text, t, verbatim
from grader.render.labels import LABELS
from grader.review_app.answer_html import answer_html
from grader.review_app.labels import REVIEW_LABELS

PACKAGE = Path(__file__).resolve().parent
# script and style from this app's static files only; no inline script or style, no frame, no form posted elsewhere,
# nothing loaded from another site (an answer's image is shown as text)
CONTENT_SECURITY_POLICY = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
                           "connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'")
SECURITY_HEADERS = {
    "content-security-policy": CONTENT_SECURITY_POLICY,
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",   # a student's link followed must not carry the token to another site
    "cache-control": "no-store",
}
MAX_COMMENT_CHARS = 20_000    # a TA's comment: a long paragraph, not a file
MAX_BODY_BYTES = 1_000_000    # what one save or edit may post
FILTER_UNGRADED = "ungraded"


@dataclass
class ReviewSettings:
    """What `grader review` serves: the gradebook folder, its course, and who may grade (token -> TA's name)."""

    out: Path
    course: Course
    tas: dict[str, str]
    anonymise: bool = False
    lang: str = "en"
    key: bytes = field(default_factory=lambda: secrets.token_bytes(32))   # students' opaque ids in the pages
    # one rewrite of the reports at a time: two TAs saving at once would write the class files together
    rewriting: threading.Lock = field(default_factory=threading.Lock)


def new_token() -> str:
    return secrets.token_urlsafe(24)


# ----------------------------------------------------------------------------------------------------- storage


@contextlib.contextmanager
def opened(settings: ReviewSettings) -> Iterator[Any]:
    """The gradebook, open for one request (a connection per request: requests run on several threads)."""
    from grader.batch.gradebook import Gradebook

    book = Gradebook(settings.out / "gradebook.sqlite")
    try:
        yield book
    finally:
        book.close()


def student_id(settings: ReviewSettings, student: str) -> str:
    return hmac.new(settings.key, student.encode("utf-8", "surrogatepass"), hashlib.sha256).hexdigest()[:24]


def ordered(settings: ReviewSettings, rows: list) -> list:
    """A question's answers in the pages' stable order: by name, or, anonymised, by a digest of the name (the same
    at every start, and not alphabetical: a position says nothing of the name)."""
    if settings.anonymise:
        return sorted(rows, key=lambda r: hashlib.sha256(r.student.encode("utf-8", "surrogatepass")).hexdigest())
    return sorted(rows, key=lambda r: (r.student.casefold(), r.student))


def question_of(course: Course, exercise: str, question: str) -> tuple[ExerciseConfig, Question]:
    for ex in course.exercises:
        if ex.id == exercise:
            for q in ex.questions:
                if q.id == question:
                    return ex, q
    raise HTTPException(404)


def full_name(course: Course, book, submission: str) -> str:
    """A submission as a TA knows its student: the roster's name with the submission's, or the submission alone
    (no roster, or one that does not name it)."""
    from grader.batch.gradebook import grader_key, with_roster
    from grader.batch.roster import Student

    roster = book.setting("roster")
    if not roster:
        return submission
    matched = with_roster([s for s in book.submissions(grader_key(course)) if s["submission"] == submission],
                          [Student.from_record(r) for r in roster])
    names = [student.name for student, _, s in matched if student is not None and s is not None and student.name]
    return f"{names[0]} ({submission})" if len(names) == 1 and names[0] != submission else submission


def rewrite(settings: ReviewSettings, students: list[str]) -> Text | None:
    """Write the students' reports and the class files again after a change; what went wrong, if anything (the
    change is stored either way, and the next `grader batch` or review writes them)."""
    from grader.batch import manual

    if not students:
        return None
    from grader.batch.run import BatchBusy

    with settings.rewriting:
        try:
            manual.rewrite_after_review(settings.out, settings.course, sorted(set(students)))
        except BatchBusy:
            return t("a grader batch is writing this folder; it writes them with this grade when it ends")
        except Exception as exc:  # noqa: BLE001 - a full disk, a report that cannot be read: said on the page
            return verbatim(str(exc) or type(exc).__name__)
    return None


# ------------------------------------------------------------------------------------------------------ pages


class Guarded:
    """Every response with the CSP and its companions (404s and static files too); and a gradebook that cannot be
    read or written now (held too long by a batch, a full disk, a damaged file) answers 503 with the sentence, the
    server going on, nothing stored by that request."""

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def with_headers(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                headers = list(message.get("headers", []))
                present = {name.lower() for name, _ in headers}
                headers += [(k.encode(), v.encode()) for k, v in SECURITY_HEADERS.items() if k.encode() not in present]
                message = {**message, "headers": headers}
            await send(message)

        try:
            await self.app(scope, receive, with_headers)
        except (sqlite3.Error, OSError) as exc:
            if started:
                raise
            said = t("the gradebook could not be used: {error}", error=str(exc) or type(exc).__name__).render("en")
            print(f"grader review: {said}", file=sys.stderr, flush=True)
            await PlainTextResponse(said, status_code=503)(scope, receive, with_headers)


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.PackageLoader("grader.review_app", "templates"),
                             autoescape=True, undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    env.filters["points"] = lambda x: f"{x:g}"
    return env


class Review:
    """The routes, bound to one `grader review`'s settings."""

    def __init__(self, settings: ReviewSettings):
        self.settings = settings
        self.env = _environment()

    # -- request helpers

    def ta(self, request: Request) -> str:
        """The TA whose token the path holds; anything else is a page that does not exist."""
        given = request.path_params.get("token", "")
        for token, name in self.settings.tas.items():
            if hmac.compare_digest(token.encode(), given.encode()):
                return name
        raise HTTPException(404)

    def lang(self, request: Request) -> str:
        asked = request.query_params.get("lang")
        return asked if asked in LANGS else self.settings.lang

    def link(self, request: Request, path: str, **params: str | None) -> str:
        """An address in the app under this request's token, keeping a language asked for in the query."""
        query = {k: v for k, v in params.items() if v}
        if "lang" in request.query_params and request.query_params["lang"] in LANGS:
            query.setdefault("lang", request.query_params["lang"])
        base = f"/{request.path_params['token']}/{path}"
        return base + ("?" + urlencode(query) if query else "")

    def page(self, request: Request, template: str, status_code: int = 200, **context: Any) -> HTMLResponse:
        lang = self.lang(request)
        other = "zh" if lang == "en" else "en"
        html = self.env.get_template(template).render(
            lang=lang, L=REVIEW_LABELS[lang], ta=self.ta(request), other_lang=other,
            other_lang_link=f"{request.url.path}?{urlencode({**request.query_params, 'lang': other})}",
            home=self.link(request, ""), **context)
        return HTMLResponse(html, status_code=status_code)

    def rows(self, book, exercise: str, question: str) -> list:
        from grader.batch import manual

        return ordered(self.settings, manual.answers_to_review(book, self.settings.course, exercise, question))

    # -- index

    def index(self, request: Request) -> Response:
        from grader.batch import manual

        self.ta(request)
        lang = self.lang(request)
        course = self.settings.course
        asked = [(ex, q) for ex in course.exercises for q in ex.questions]
        with opened(self.settings) as book:
            # every submission answers every question (an empty answer too): the students are the first question's,
            # the graded ones those with a review; no other question's answers are read for a count
            students = {r.student for r in manual.answers_to_review(book, course, asked[0][0].id, asked[0][1].id)} \
                if asked else set()
            reviewed = manual.graded_answers(book, course)
        questions = []
        for ex, q in asked:
            key = f"{ex.id}/{q.id}"
            questions.append({
                "key": key, "exercise": ex.title_zh if lang == "zh" else ex.title_en, "id": q.id,
                "prompt": q.prompt.get(lang) or q.prompt.get("en", ""), "points": q.points,
                "graded": sum(1 for s in students if (ex.id, q.id) in reviewed.get(s, {})), "total": len(students),
                "link": self.link(request, f"q/{key}/0"),
                "ungraded_link": self.link(request, f"q/{key}/0", filter=FILTER_UNGRADED),
                "rubric_link": self.link(request, f"rubric/{key}")})
        return self.page(request, "index.html", questions=questions)

    # -- grading page

    def filtered(self, request: Request, rows: list, items: list) -> tuple[list, str | None, str | None]:
        wanted = request.query_params.get("filter")
        item = request.query_params.get("item")
        if wanted == FILTER_UNGRADED:
            rows = [r for r in rows if r.review is None]
        else:
            wanted = None
        if item and any(i.id == item for i in items):
            rows = [r for r in rows if r.review is not None and item in r.review.items]
        else:
            item = None
        return rows, wanted, item

    def grading(self, request: Request) -> Response:
        from grader.batch import manual

        self.ta(request)
        lang = self.lang(request)
        exercise, question = request.path_params["exercise"], request.path_params["question"]
        ex, q = question_of(self.settings.course, exercise, question)
        n = request.path_params["n"]
        with opened(self.settings) as book:
            items = manual.rubric_items(book, self.settings.course, exercise, question)
            everyone = self.rows(book, exercise, question)
            shown, wanted, item = self.filtered(request, everyone, items)
            row = shown[n] if 0 <= n < len(shown) else None
            failing = [r for r in book.latest_rows(row.student) if r["exercise"] == exercise
                       and r["status"] != "passed"] if row is not None else []
            name = self.shown_name(book, row, everyone.index(row), lang) if row is not None else ""
        key = f"{exercise}/{question}"
        context: dict[str, Any] = {
            "key": key, "exercise": ex.title_zh if lang == "zh" else ex.title_en, "question": q,
            "prompt": q.prompt.get(lang) or q.prompt.get("en", ""), "items": items, "filter": wanted, "item": item,
            "all_link": self.link(request, f"q/{key}/0"),
            "ungraded_link": self.link(request, f"q/{key}/0", filter=FILTER_UNGRADED),
            "item_links": [(i, self.link(request, f"q/{key}/0", item=i.id)) for i in items],
            "rubric_link": self.link(request, f"rubric/{key}"), "total": len(shown), "n": n,
        }
        if row is None:
            return self.page(request, "grading.html", row=None, **context)
        alike = [r for r in everyone if r is not row and r.digest == row.digest]   # the same text, or all empty
        review = row.review
        sid = student_id(self.settings, row.student)
        steps = {"filter": wanted, "item": item}
        context.update(
            row=row, sid=sid, answer=answer_html(row.text), empty=not row.text.strip(),
            name=name, review=review,
            applied=set(review.items) if review else set(),
            points=manual.question_points(self.settings.course, items, review) if review else None,
            autograde=autograde_view(row.autograde, failing, lang),
            alike=t("{count} answers alike", count=len(alike) + 1).render(lang) if alike else "",
            group_versions={student_id(self.settings, r.student): (r.review.version if r.review else None)
                            for r in alike},
            save_link=self.link(request, f"save/{key}"),
            next_link=self.link(request, f"q/{key}/next/{sid}", **steps),
            prev_link=self.link(request, f"q/{key}/prev/{sid}", **steps),
            status=t("graded by {author} at {at}", author=review.author,
                     at=shown_time(review.at)).render(lang) if review
            else REVIEW_LABELS[lang]["not_saved"])
        return self.page(request, "grading.html", **context)

    def shown_name(self, book, row, position: int, lang: str) -> str:
        """The student's name, or, anonymised and not yet graded, "Student <position + 1>"."""
        if self.settings.anonymise and row.review is None:
            return f"{REVIEW_LABELS[lang]['student']} {position + 1}"
        return full_name(self.settings.course, book, row.student)

    def step(self, request: Request) -> Response:
        """Next or previous from a student: their neighbour in the filtered list as it is now (another TA's saves,
        or this one's under `ungraded`, change it)."""
        self.ta(request)
        exercise, question = request.path_params["exercise"], request.path_params["question"]
        question_of(self.settings.course, exercise, question)
        direction = request.path_params["direction"]
        if direction not in ("next", "prev"):
            raise HTTPException(404)
        from grader.batch import manual

        with opened(self.settings) as book:
            items = manual.rubric_items(book, self.settings.course, exercise, question)
            everyone = self.rows(book, exercise, question)
        shown, wanted, item = self.filtered(request, everyone, items)
        sid = request.path_params["sid"]
        at = next((i for i, r in enumerate(everyone) if student_id(self.settings, r.student) == sid), None)
        if at is None:
            n = 0
        else:
            before = [i for i, r in enumerate(shown) if everyone.index(r) < at]
            after = [i for i, r in enumerate(shown) if everyone.index(r) > at]
            if direction == "next":
                n = after[0] if after else len(shown)   # past the end: the page says there is nothing left
            else:
                n = before[-1] if before else 0
        return RedirectResponse(self.link(request, f"q/{exercise}/{question}/{n}", filter=wanted, item=item),
                                status_code=303)

    # -- saving

    async def save(self, request: Request) -> Response:
        from starlette.concurrency import run_in_threadpool

        author = self.ta(request)
        if request.headers.get("content-type", "").split(";")[0].strip() != "application/json":
            return JSONResponse({"error": "a save is posted as JSON"}, status_code=415)
        body = b""
        async for chunk in request.stream():
            body += chunk
            if len(body) > MAX_BODY_BYTES:
                return JSONResponse({"error": "too large"}, status_code=413)
        try:
            posted = json.loads(body)
        except ValueError:
            return JSONResponse({"error": "not JSON"}, status_code=400)
        return await run_in_threadpool(self.store, request, author, posted)

    def store(self, request: Request, author: str, posted: Any) -> Response:
        from grader.batch import manual

        lang = self.lang(request)
        exercise, question = request.path_params["exercise"], request.path_params["question"]
        _, q = question_of(self.settings.course, exercise, question)
        with opened(self.settings) as book:
            items = manual.rubric_items(book, self.settings.course, exercise, question)
            asked = read_decision(posted, items, q)
            if isinstance(asked, str):
                return JSONResponse({"error": asked}, status_code=400)
            everyone = self.rows(book, exercise, question)
            by_id = {student_id(self.settings, r.student): r for r in everyone}
            row = by_id.get(asked.student)
            if row is None:
                return JSONResponse({"error": "no such answer"}, status_code=404)
            alike = [r for r in everyone if r is not row and r.digest == row.digest]
            group = {r.student: (asked.group or {})[sid] for r in alike
                     if (sid := student_id(self.settings, r.student)) in (asked.group or {})}
            try:
                saved = manual.save_reviews(book, self.settings.course, students={row.student: asked.expected_version,
                                                                                 **group},
                                            exercise=exercise, question=question, items=asked.items,
                                            adjustment=asked.adjustment, comment=asked.comment, author=author,
                                            answer_digest=row.digest)[0]
            except manual.Conflict as conflict:
                now = {r.student: r.review for r in self.rows(book, exercise, question)}
                return self.conflicted(conflict, row, full_name(self.settings.course, book, row.student), alike, now,
                                       items, lang)
            name = full_name(self.settings.course, book, row.student)
        changed = [row.student, *group]
        trouble = rewrite(self.settings, changed)
        said = [t("saved").render(lang)]
        if group:
            said.append(t("alike answers given the same grade: {count}", count=len(group)).render(lang))
        if trouble:
            said.append(t("the reports were not written again: {error}", error=trouble).render(lang))
        return JSONResponse({"status": "; ".join(said), "student": name, "written": trouble is None,
                             "review": review_json(saved, self.settings.course, items, lang),
                             "group_saved": len(group)})

    def conflicted(self, conflict, row, name: str, alike: list, now: dict, items: list, lang: str) -> JSONResponse:
        """409: nothing was saved, as another TA saved this answer (or an alike one the save was to grade too)
        meanwhile. The reply holds their review and every version as it is now, for Overwrite to save on."""
        def version(student: str) -> int | None:
            return now[student].version if now.get(student) else None

        theirs = conflict.current
        reply = {"conflict": True, "student": name, "version": version(row.student),
                 "group": {student_id(self.settings, r.student): version(r.student) for r in alike},
                 "mine": theirs is None or theirs.student == row.student,
                 "current": review_json(theirs, self.settings.course, items, lang) if theirs else None}
        if theirs is None:   # the page showed a review no longer stored
            reply["status"] = t("this answer's grade was taken away meanwhile: save again to grade it").render(lang)
        elif reply["mine"]:
            reply["status"] = t("{author} saved this answer at {at} meanwhile: their grade is below, yours is still "
                                "on the page", author=theirs.author, at=shown_time(theirs.at)).render(lang)
            reply["kept"] = t("{author}'s grade kept", author=theirs.author).render(lang)
        else:
            reply["status"] = t("{author} graded an alike answer at {at} meanwhile: nothing was saved; their grade "
                                "is below, yours is still on the page", author=theirs.author,
                                at=shown_time(theirs.at)).render(lang)
            reply["kept"] = t("{author}'s grade is on the page: save to give it to these answers",
                              author=theirs.author).render(lang)
        return JSONResponse(reply, status_code=409)

    # -- rubric

    def rubric(self, request: Request) -> Response:
        from grader.batch import manual

        self.ta(request)
        lang = self.lang(request)
        exercise, question = request.path_params["exercise"], request.path_params["question"]
        ex, q = question_of(self.settings.course, exercise, question)
        with opened(self.settings) as book:
            items = manual.rubric_items(book, self.settings.course, exercise, question)
            rows = self.rows(book, exercise, question)
        used = {i.id: sum(1 for r in rows if r.review is not None and i.id in r.review.items) for i in items}
        result = None
        edited = request.query_params.get("edited")
        changed = request.query_params.get("changed", "")
        if edited and changed.isdigit():
            result = t("item {item} changed; graded answers it changes: {count}", item=edited,
                       count=int(changed)).render(lang)
        elif request.query_params.get("added"):
            result = t("item {item} added", item=request.query_params["added"]).render(lang)
        elif request.query_params.get("refused"):
            result = t("not changed: {reason}", reason=request.query_params["refused"][:200]).render(lang)
        if result and request.query_params.get("unwritten"):
            result += "; " + request.query_params["unwritten"][:500]
        key = f"{exercise}/{question}"
        return self.page(request, "rubric.html", key=key, question=q, items=items, used=used, result=result,
                         exercise=ex.title_zh if lang == "zh" else ex.title_en,
                         prompt=q.prompt.get(lang) or q.prompt.get("en", ""),
                         post_link=self.link(request, f"rubric/{key}"),
                         grade_link=self.link(request, f"q/{key}/0"))

    async def change_rubric(self, request: Request) -> Response:
        from starlette.concurrency import run_in_threadpool

        author = self.ta(request)
        async with request.form(max_files=0, max_fields=10, max_part_size=MAX_BODY_BYTES) as form:
            fields = {k: v for k, v in form.items() if isinstance(v, str)}
        return await run_in_threadpool(self.store_item, request, author, fields)

    def store_item(self, request: Request, author: str, fields: dict[str, str]) -> Response:
        from grader.batch import manual

        lang = self.lang(request)
        exercise, question = request.path_params["exercise"], request.path_params["question"]
        question_of(self.settings.course, exercise, question)
        key = f"{exercise}/{question}"
        points = read_points(fields.get("points", ""))
        if points is None:
            return RedirectResponse(self.link(request, f"rubric/{key}",
                                              refused=t("points must be a number").render(lang)), status_code=303)
        text_en = fields.get("text_en", "").strip()
        text_zh = fields.get("text_zh", "").strip()
        with opened(self.settings) as book:
            items = {i.id: i for i in manual.rubric_items(book, self.settings.course, exercise, question)}
            item = fields.get("item", "")
            if item and item not in items:
                raise HTTPException(404)
            if not item:
                if not text_en:
                    return RedirectResponse(self.link(request, f"rubric/{key}",
                                                      refused=t("an item needs its text").render(lang)),
                                            status_code=303)
                added = manual.add_item(book, self.settings.course, exercise, question, points=points,
                                        text_en=text_en, text_zh=text_zh or text_en, author=author)
                return RedirectResponse(self.link(request, f"rubric/{key}", added=added.id), status_code=303)
            users = [r.student for r in self.rows(book, exercise, question)
                     if r.review is not None and item in r.review.items]
            now = items[item]
            count = manual.edit_item(book, self.settings.course, exercise, question, item,
                                     points=points if points != now.points else None,
                                     text_en=text_en if text_en and text_en != now.text.get("en") else None,
                                     text_zh=text_zh if text_zh and text_zh != now.text.get("zh") else None,
                                     author=author)
        trouble = rewrite(self.settings, users)
        extra = {"unwritten": t("the reports were not written again: {error}", error=trouble).render(lang)} \
            if trouble else {}
        return RedirectResponse(self.link(request, f"rubric/{key}", edited=item, changed=str(count), **extra),
                                status_code=303)


@dataclass(frozen=True)
class Decision:
    """A save as posted: whose answer (their opaque id), the items applied, the adjustment and comment, the version
    the page was showing, and the alike answers to give the same grade (id -> the version shown)."""

    student: str
    items: list[str]
    adjustment: float
    comment: str
    expected_version: int | None
    group: dict[str, int | None] | None


def read_decision(posted: Any, items: list, q: Question) -> Decision | str:
    """The posted save, checked; or what is wrong with it."""
    if not isinstance(posted, dict):
        return "a save is a JSON object"
    student, chosen = posted.get("student"), posted.get("items", [])
    known = {i.id for i in items}
    if not isinstance(student, str):
        return "student: the answer's id"
    if not isinstance(chosen, list) or not all(isinstance(i, str) and i in known for i in chosen):
        return "items: ids of the question's rubric items"
    adjustment = posted.get("adjustment", 0)
    if isinstance(adjustment, str):
        adjustment = read_points(adjustment or "0")
    if isinstance(adjustment, bool) or not isinstance(adjustment, int | float) or not math.isfinite(adjustment) \
            or abs(adjustment) > max(q.points, 1) * 10:
        return "adjustment: a number of points"
    comment = posted.get("comment", "")
    if not isinstance(comment, str) or len(comment) > MAX_COMMENT_CHARS:
        return f"comment: text of at most {MAX_COMMENT_CHARS} characters"
    version = posted.get("expected_version")
    if version is not None and (isinstance(version, bool) or not isinstance(version, int)):
        return "expected_version: the version the page showed, or null"
    group = posted.get("group")
    if group is not None and not (isinstance(group, dict) and all(
            isinstance(k, str) and (v is None or (isinstance(v, int) and not isinstance(v, bool)))
            for k, v in group.items())):
        return "group: alike answers' ids and versions"
    return Decision(student, list(dict.fromkeys(chosen)), float(adjustment), comment.strip(), version, group)


def shown_time(at: str) -> str:
    """A stored time (ISO 8601, UTC) as a reader takes it in: `2026-12-07 18:12 UTC`."""
    return at[:16].replace("T", " ") + " UTC" if at.endswith("+00:00") and len(at) >= 16 else at


def read_points(given: str) -> float | None:
    try:
        points = float(given.strip())
    except ValueError:
        return None
    return points if math.isfinite(points) else None


def review_json(review, course: Course, items: list, lang: str) -> dict:
    """A stored review as the page's script shows it: the TA, when, the items (ids and words), comment, points."""
    from grader.batch import manual

    texts = {i.id: i.text.get(lang) or i.text.get("en", "") for i in items}
    return {"author": review.author, "at": review.at, "version": review.version, "items": list(review.items),
            "item_texts": [texts.get(i, i) for i in review.items], "adjustment": review.adjustment,
            "comment": review.comment, "points": manual.question_points(course, items, review)}


def autograde_view(autograde, failing: list[dict], lang: str) -> dict | None:
    """The exercise's autograded result beside the answer: score, status and the criteria it did not pass (each with
    its status); None when the exercise has no graded criterion."""
    if autograde is None or not autograde.total:
        return None
    words = LABELS[lang]
    return {"score": autograde.score, "max_score": autograde.max_score,
            "status": words.get(autograde.status, autograde.status),
            "passed": autograde.passed, "total": autograde.total,
            "failing": [f"{r['criterion']} ({words.get(r['status'], r['status'])})" for r in failing]}


def create_app(settings: ReviewSettings) -> Starlette:
    review = Review(settings)
    routes = [
        Mount("/static", app=StaticFiles(directory=PACKAGE / "static"), name="static"),
        Route("/favicon.ico", lambda request: Response(status_code=204)),   # a browser asks; there is none
        Route("/{token}/", review.index),
        Route("/{token}/q/{exercise}/{question}/{n:int}", review.grading),
        Route("/{token}/q/{exercise}/{question}/{direction}/{sid}", review.step),
        Route("/{token}/save/{exercise}/{question}", review.save, methods=["POST"]),
        Route("/{token}/rubric/{exercise}/{question}", review.rubric),
        Route("/{token}/rubric/{exercise}/{question}", review.change_rubric, methods=["POST"]),
    ]
    return Starlette(routes=routes, middleware=[Middleware(Guarded)])
