"""The feedback policy: what a student is shown of a graded report, and when, on every route that shows one.

One source. Each criterion's visibility (course.toml's `visibility` tables and `visible` lists, see
`visibility`) says when its verdict, message and hint reach the student:

- `visible`: always;
- `hidden`: never (its points only, as Gradescope's `hidden`);
- `after_due_date`: once the due date has passed ([policy] due, else [classroom] deadline), or once published;
- `after_published`: once the instructor publishes the feedback (`grader classroom publish`).

Until then a criterion is shown as its points only (its title, status and points: `[feedback] hidden = "points"`,
the default) or left out with its points (`hidden = "nothing"`: the scores are then those of the criteria shown).
`student_view` applies it to a report; the classroom sync's commit comment and status, the student's report.html
and scorecard.md handed out, and `grader check` read the report through it, and the Gradescope results carry each
criterion's `visibility` for Gradescope to apply.

The attempt policy (`[feedback] attempts`, `per`, `past_cap`) caps the graded pushes of each student per day or per
hour (UTC windows); past the cap a commit is graded and shown nothing of the criteria not visible (`withheld`), or
waits for the next window (`queued`).
"""

from __future__ import annotations

import copy
import datetime as dt
import tomllib
from dataclasses import dataclass
from pathlib import Path

from grader.course import COURSE_FILE, Course
from grader.i18n import LANGS, t
from grader.report.model import CriterionResult, Report

VISIBLE, HIDDEN, AFTER_DUE_DATE, AFTER_PUBLISHED = "visible", "hidden", "after_due_date", "after_published"
POINTS, NOTHING = "points", "nothing"                 # [feedback] hidden: how a criterion not shown yet appears
WITHHELD, QUEUED = "withheld", "queued"               # [feedback] past_cap: a commit past the attempt cap
WINDOWS = {"day": dt.timedelta(days=1), "hour": dt.timedelta(hours=1)}


@dataclass(frozen=True)
class Attempts:
    """At most `limit` graded pushes per student per `per` (a UTC day or hour); past it, `past_cap`."""

    limit: int
    per: str = "day"            # a key of WINDOWS
    past_cap: str = WITHHELD    # WITHHELD: graded, nothing of the criteria not visible shown; QUEUED: graded later

    def window(self, now: dt.datetime) -> tuple[dt.datetime, dt.datetime]:
        """The window `now` falls in: its start and its end (the next one's start), in UTC."""
        now = now.astimezone(dt.UTC)
        start = now.replace(minute=0, second=0, microsecond=0)
        if self.per == "day":
            start = start.replace(hour=0)
        return start, start + WINDOWS[self.per]

    def used(self, graded: list[dt.datetime], now: dt.datetime) -> int:
        """How many of the attempts `graded` (when each was graded) fall in `now`'s window."""
        start, end = self.window(now)
        return sum(start <= when < end for when in graded)


@dataclass(frozen=True)
class Feedback:
    """course.toml's `[feedback]` table, with the due date it reads from [policy] or [classroom]."""

    hidden: str = POINTS                  # POINTS or NOTHING: a criterion not shown yet
    due: dt.datetime | None = None        # when `after_due_date` criteria are shown
    attempts: Attempts | None = None      # None: every push is graded and shown


def load_feedback(course: Course) -> Feedback:
    """The course's feedback policy. The due date is [policy] due, else [classroom] deadline (course.toml has one
    of them: grader classroom sync refuses both); the schema checked the values already."""
    data = tomllib.loads((course.root / COURSE_FILE).read_text(encoding="utf-8"))
    table = data.get("feedback", {})
    due_text = data.get("policy", {}).get("due") or data.get("classroom", {}).get("deadline")
    due = None
    if due_text:
        due = dt.datetime.fromisoformat(str(due_text))
        due = due if due.tzinfo else due.replace(tzinfo=dt.UTC)
    attempts = Attempts(int(table["attempts"]), table.get("per", "day"), table.get("past_cap", WITHHELD)) \
        if "attempts" in table else None
    return Feedback(table.get("hidden", POINTS), due, attempts)


def visibility(course: Course, exercise_id: str, criterion_id: str, kind: str) -> str:
    """When a criterion is shown (VISIBLE, HIDDEN, AFTER_DUE_DATE, AFTER_PUBLISHED): as the exercise's `visibility`
    table (over the defaults' one) sets it by id, else by kind, else VISIBLE for the criteria `visible` names and
    AFTER_PUBLISHED for the others."""
    return course.exercise(exercise_id).gradescope_visibility(criterion_id, kind)


def is_shown(when: str, feedback: Feedback, now: dt.datetime, published: bool) -> bool:
    """Whether a criterion of visibility `when` is shown whole at `now`."""
    if when == VISIBLE or (published and when != HIDDEN):
        return True
    return when == AFTER_DUE_DATE and feedback.due is not None and now >= feedback.due


def student_view(report: Report, course: Course, now: dt.datetime, published: bool,
                 feedback: Feedback | None = None, capped: bool = False) -> Report:
    """A copy of `report` as the student may see it at `now`: each criterion shown whole, shown as its points only
    (its message saying when more comes, no hint, no evidence), or left out with its points (`feedback.hidden`).
    `capped`: past the attempt cap, every criterion not visible is left out, whatever the policy says, until
    published. What the report says beyond its criteria (an exercise's message and output) stays: the student's
    own code's."""
    feedback = feedback or load_feedback(course)
    view = copy.deepcopy(report)
    changed = False
    for ex in view.exercises:
        kept: list[CriterionResult] = []
        for c in ex.criteria:
            when = visibility(course, ex.id, c.id, c.kind)
            if is_shown(when, feedback, now, published) and not (capped and when != VISIBLE and not published):
                kept.append(c)
                continue
            changed = True
            if feedback.hidden == POINTS and not capped:
                later = t("shown after the due date") if when == AFTER_DUE_DATE else \
                    t("not shown to students") if when == HIDDEN else t("shown once the feedback is published")
                c.message = {lang: later.render(lang) for lang in LANGS}
                c.hint = dict.fromkeys(LANGS, "")
                c.evidence = {}
                kept.append(c)
        if len(kept) != len(ex.criteria):
            ex.criteria = kept
            ex.score = sum(c.points for c in kept)
            ex.max_score = sum(c.max_points for c in kept)
    if changed and (feedback.hidden == NOTHING or capped):
        view.score = sum(e.score for e in view.exercises)
        view.max_score = sum(e.max_score for e in view.exercises)
        view.percent = round(100 * view.score / view.max_score, 2) if view.max_score else 0.0
        view.grade = None   # a grade after a penalty or an override would give the points left out away
    return view


# The gradebook's setting holding when `grader classroom publish` released the feedback (absent: not yet).
PUBLISHED = "published"


def published_at(out: Path) -> str | None:
    """When the feedback of the class graded into `out` was published (ISO 8601), or None."""
    from grader.batch.gradebook import Gradebook   # instructor side only: the checker ships no batch/

    if not (out / "gradebook.sqlite").is_file():
        return None
    book = Gradebook(out / "gradebook.sqlite")
    try:
        return book.setting(PUBLISHED)
    finally:
        book.close()


def mark_published(out: Path, when: dt.datetime) -> str:
    """Record the release (once: a second publish keeps the first time); returns its time."""
    from grader.batch.gradebook import Gradebook

    book = Gradebook(out / "gradebook.sqlite")
    try:
        first = book.setting(PUBLISHED)
        if first is None:
            first = when.astimezone(dt.UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
            book.set_settings({PUBLISHED: first})
        return first
    finally:
        book.close()


def handed_out(course: Course, out: Path, submission: str, lang: str,
               now: dt.datetime | None = None) -> dict[str, str]:
    """A graded student's report.html and scorecard.md (by name) as the policy shows them at `now` (default: the
    present), rendered in `lang` from the report.json the gradebook folder `out` holds for `submission` (its grade
    included) and the release recorded there; the pages beside it stay the instructor's."""
    import json

    from grader.render.templated import render_html, render_markdown
    from grader.report.build import stored_report

    report = stored_report(json.loads((out / "students" / submission / "report.json").read_text(encoding="utf-8")))
    view = student_view(report, course, now or dt.datetime.now(dt.UTC), published_at(out) is not None)
    templates = course.templates
    return {"report.html": render_html(view, templates, lang), "scorecard.md": render_markdown(view, templates, lang)}


def write_handed_out(course: Course, out: Path, target: Path, lang: str, now: dt.datetime | None = None) -> list[str]:
    """Every graded student's pages (`handed_out`) under `target/<submission>/`; returns the submissions written."""
    from grader.render.files import write_atomic

    written = []
    for folder in sorted((out / "students").iterdir()) if (out / "students").is_dir() else []:
        if (folder / "report.json").is_file():
            for name, text in handed_out(course, out, folder.name, lang, now).items():
                write_atomic(target / folder.name / name, text)
            written.append(folder.name)
    return written
