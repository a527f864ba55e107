"""Deadlines, late work and extensions: course.toml's `[policy]`, a student's extension, and what the time a
submission arrived makes of its grade.

    [policy]
    due = "2026-12-01T23:59:59+08:00"      # on time up to this moment
    late_penalty_percent = 10              # of the maximum points, taken off per day (or hour) late
    per = "day"                            # "day" or "hour"; each one begun counts whole
    max_penalty_percent = 50               # the penalty grows no further
    cutoff = "2026-12-08T23:59:59+08:00"   # after this nothing counts: the final grade is 0

Theory of operation. A lateness is made of three facts, each from one source:

1. when the work was submitted (`Submitted`: a time and how it is known): a roster's `submitted_at` column or a
   `--submitted-at` file in `grader batch`, when the push reached GitHub in `grader classroom sync`, Gradescope's
   `created_at` in `grader gradescope-run`. Never a file's modification time, which is whatever the instructor's copy
   says: a submission whose time is not known is not penalised, and says so (`UNKNOWN`);
2. the student's own due date and cutoff: the course's, moved by the roster's `extension` (a new due date, or a
   number of days); the cutoff moves by as much as the due date does;
3. the policy's rate and cap.

Nothing here reads a grade: `grader.batch.grades` applies the penalty to the points the work earned.
"""

from __future__ import annotations

import datetime as dt
import math
import re
import tomllib
from dataclasses import dataclass

from grader.course import COURSE_FILE, Course
from grader.i18n import Text, t, verbatim

# A lateness's state.
ON_TIME, LATE, TOO_LATE, UNKNOWN = "on_time", "late", "too_late", "unknown"
# How a submission's time is known.
FROM_ROSTER = "roster"           # the roster's submitted_at column
FROM_FILE = "file"               # grader batch --submitted-at
FROM_PUSH = "push"               # GitHub's record of the push that left the branch at the commit
FROM_SEEN = "seen"               # the commit reached GitHub after a sync saw the branch without it: that time
FROM_GRADESCOPE = "gradescope"   # Gradescope's created_at
UNITS = {"day": dt.timedelta(days=1), "hour": dt.timedelta(hours=1)}
KEYS = ("due", "late_penalty_percent", "per", "max_penalty_percent", "cutoff")
# The times a policy reckons with: one outside is a typo or made up (no work is handed in before 1970 or in the
# year 3000), and inside them every date an extension moves stays a date Python holds (datetime ends in 9999).
EARLIEST = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
LATEST = dt.datetime(3000, 1, 1, tzinfo=dt.UTC)
MAX_EXTENSION_DAYS = 3650   # ten years: a longer extension is a typo (1e10 would overflow every date)
RANGE_SAID = t("a time from {earliest} to {latest}", earliest=EARLIEST.year, latest=LATEST.year - 1)


class PolicyError(Exception):
    """course.toml's [policy], an extension or a submission time that cannot be read; `said` names the value."""

    def __init__(self, said: Text):
        super().__init__(str(said))
        self.said = said


class OutOfRange(ValueError):
    """A time outside EARLIEST..LATEST, or an extension of more than MAX_EXTENSION_DAYS: read, but not reckoned
    with. `said` is the range, for the message of whoever read it (which names the file, line and value)."""

    def __init__(self, said: Text):
        super().__init__(str(said))
        self.said = said


def in_range(when: dt.datetime) -> dt.datetime:
    """`when` itself, or OutOfRange outside EARLIEST..LATEST."""
    if not EARLIEST <= when < LATEST:
        raise OutOfRange(RANGE_SAID)
    return when


@dataclass(frozen=True)
class Policy:
    """The course's late-work rules. With no `due` nothing is late (Gradescope brings its own due dates)."""

    due: dt.datetime | None = None
    late_penalty_percent: float = 0.0     # 0: late work is shown as late, and loses nothing
    per: str = "day"                      # a key of UNITS
    max_penalty_percent: float = 100.0    # the cap
    cutoff: dt.datetime | None = None     # None: late work counts however late (with the capped penalty)

    def record(self) -> dict:
        return {"due": iso(self.due), "late_penalty_percent": self.late_penalty_percent, "per": self.per,
                "max_penalty_percent": self.max_penalty_percent, "cutoff": iso(self.cutoff)}


def iso(when: dt.datetime | None) -> str | None:
    return when.isoformat(timespec="seconds") if when else None


def parse_moment(text: str, zone: dt.tzinfo | None = None, time_of_day: dt.time | None = None) -> dt.datetime:
    """An ISO 8601 time ("2026-12-01T23:59:59+08:00", "...Z"); one without a zone is in `zone` (UTC without one). A
    date alone ("2026-12-04") is at `time_of_day` that day (the end of the day without one)."""
    text = text.strip()
    if re.fullmatch(r"\d{4}-\d{2}-\d{2}", text):
        when = dt.datetime.combine(dt.date.fromisoformat(text), time_of_day or dt.time(23, 59, 59))
    else:
        when = dt.datetime.fromisoformat(text)   # ValueError for anything else
    return when if when.tzinfo else when.replace(tzinfo=zone or dt.UTC)


def load_policy(course: Course) -> Policy | None:
    """course.toml's [policy]; None when it has none."""
    data = tomllib.loads((course.root / COURSE_FILE).read_text(encoding="utf-8")).get("policy")
    if data is None:
        return None
    if not isinstance(data, dict):
        raise PolicyError(t("course.toml: [policy] must be a table"))
    unknown = sorted(set(data) - set(KEYS))
    if unknown:
        raise PolicyError(t("course.toml: [policy] has no setting {names} (it has {known})",
                            names=", ".join(unknown), known=", ".join(KEYS)))

    def moment(key: str) -> dt.datetime | None:
        if key not in data:
            return None
        try:
            return in_range(parse_moment(str(data[key])))
        except OutOfRange as exc:
            raise PolicyError(t("course.toml: [policy] {key} = {value} is out of range ({range})", key=key,
                                value=repr(data[key]), range=exc.said)) from None
        except ValueError:
            raise PolicyError(t("course.toml: [policy] {key} = {value} is not an ISO 8601 time such as "
                                "2026-12-01T23:59:59+08:00", key=key, value=repr(data[key]))) from None

    def percent(key: str, default: float) -> float:
        value = data.get(key, default)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not (0 <= value <= 100):
            raise PolicyError(t("course.toml: [policy] {key} = {value} is not a percentage from 0 to 100",
                                key=key, value=repr(value)))
        return float(value)

    per = data.get("per", "day")
    if per not in UNITS:
        raise PolicyError(t("course.toml: [policy] per = {value}: choose \"day\" or \"hour\"", value=repr(per)))
    policy = Policy(moment("due"), percent("late_penalty_percent", 0.0), per, percent("max_penalty_percent", 100.0),
                    moment("cutoff"))
    if policy.cutoff is not None and (policy.due is None or policy.cutoff < policy.due):
        raise PolicyError(t("course.toml: [policy] cutoff comes with a due date, and not before it"))
    return policy


def check_extension(text: str) -> None:
    """Raise ValueError unless `text` is an extension: empty, a number of days (at least 0), or a time; OutOfRange
    (a ValueError) for more than MAX_EXTENSION_DAYS days or a time outside EARLIEST..LATEST."""
    text = text.strip()
    if not text:
        return
    try:
        days = float(text)
    except ValueError:
        in_range(parse_moment(text))
        return
    if not (math.isfinite(days) and days >= 0):
        raise ValueError(text)
    if days > MAX_EXTENSION_DAYS:
        raise OutOfRange(t("at most {days} days", days=MAX_EXTENSION_DAYS))


@dataclass(frozen=True)
class Dates:
    """One student's due date and cutoff: the course's, moved by their extension."""

    due: dt.datetime
    cutoff: dt.datetime | None
    extension: str = ""   # as the roster wrote it ("" for none)


def student_dates(policy: Policy, extension: str = "") -> Dates | None:
    """The course's dates moved by `extension` (a number of days, or a new due date: a date alone keeps the due
    date's time of day, a time without a zone takes the due date's); None when the policy sets no due date. An
    extension never moves a date earlier, nor past LATEST (a roster is checked when read; one kept from before its
    extensions were bounded moves the dates as far as a policy reckons, never out of what a date can hold)."""
    if policy.due is None:
        return None
    extension = extension.strip()
    if not extension:
        return Dates(policy.due, policy.cutoff)
    try:
        moved = policy.due + dt.timedelta(days=float(extension))
    except OverflowError:   # more days than a date holds, either way
        moved = LATEST if float(extension) > 0 else policy.due
    except ValueError:
        moved = parse_moment(extension, policy.due.tzinfo, policy.due.timetz().replace(tzinfo=None))
    shift = min(max(moved - policy.due, dt.timedelta(0)), max(LATEST - policy.due, dt.timedelta(0)))
    return Dates(policy.due + shift, policy.cutoff + shift if policy.cutoff else None, extension)


@dataclass(frozen=True)
class Submitted:
    """When a submission arrived, and how that is known (one of the FROM_* words)."""

    at: dt.datetime
    how: str


@dataclass(frozen=True)
class Lateness:
    """What a submission's time makes of its grade under one student's dates."""

    state: str                       # ON_TIME, LATE, TOO_LATE or UNKNOWN
    dates: Dates
    policy: Policy
    submitted: Submitted | None
    units: int = 0                   # days or hours late (policy.per), each begun counting whole
    penalty_percent: float = 0.0     # of the maximum points: what LATE costs (TOO_LATE costs everything)

    def penalty(self, earned: float, max_score: float) -> float:
        """The points the lateness takes from `earned`: never more than it."""
        if self.state == TOO_LATE:
            return earned
        return min(earned, round(max_score * self.penalty_percent / 100, 4))

    def record(self) -> dict:
        """What report.json (3.1) holds of it."""
        late_by = (self.submitted.at - self.dates.due).total_seconds() if self.submitted else None
        return {"state": self.state, "submitted_at": iso(self.submitted.at) if self.submitted else None,
                "how": self.submitted.how if self.submitted else None, "due": iso(self.dates.due),
                "cutoff": iso(self.dates.cutoff), "extension": self.dates.extension or None,
                "late_by_s": max(0.0, late_by) if late_by is not None else None, "units": self.units,
                "per": self.policy.per, "penalty_percent": self.penalty_percent}

    def said(self) -> Text:
        """The lateness in words, each time shown in the due date's own zone."""
        zone = self.dates.due.tzinfo

        def shown(when: dt.datetime | None) -> Text:
            if when is None:
                return verbatim("")
            try:
                when = when.astimezone(zone)
            except OverflowError:   # a time at the ends of what a date holds: shown in its own zone
                pass
            return verbatim(when.isoformat(timespec="minutes"))

        due = shown(self.dates.due)
        if self.dates.extension:
            due = t("{due}, with an extension ({extension})", due=due, extension=verbatim(self.dates.extension))
        if self.submitted is None:
            return t("no submission time is known (due {due}): no late penalty applied", due=due)
        when = t("submitted {at} ({how})", at=shown(self.submitted.at), how=HOW_SAID[self.submitted.how])
        if self.state == UNKNOWN:   # a time that is known and still unknown: one out of range (see lateness)
            return t("{when}: out of range ({range}), so not reckoned with (due {due}): no late penalty applied",
                     when=when, range=RANGE_SAID, due=due)
        if self.state == ON_TIME:
            return t("{when}: on time (due {due})", when=when, due=due)
        if self.state == TOO_LATE:
            return t("{when}: after the cutoff {cutoff} (due {due}): nothing counts", when=when,
                     cutoff=shown(self.dates.cutoff), due=due)
        late = (t("{count} days late", count=self.units) if self.policy.per == "day"
                else t("{count} hours late", count=self.units))
        return t("{when}: {late} (due {due}): {percent:g}% of the maximum points off", when=when, late=late, due=due,
                 percent=self.penalty_percent)


HOW_SAID = {FROM_ROSTER: t("the roster's submitted_at"), FROM_FILE: t("the --submitted-at file"),
            FROM_PUSH: t("GitHub's record of the push"),
            FROM_SEEN: t("the last sync that saw the branch without it"),
            FROM_GRADESCOPE: t("Gradescope's submission time")}


def lateness(policy: Policy, dates: Dates, submitted: Submitted | None) -> Lateness:
    """How late `submitted` is for `dates`: each `policy.per` begun after the due date costs
    `late_penalty_percent` of the maximum points, up to `max_penalty_percent`; after the cutoff nothing counts."""
    if submitted is None:
        return Lateness(UNKNOWN, dates, policy, None)
    try:
        in_range(submitted.at)
    except OutOfRange:   # a time no one hands work in at: not known, and said so with the time itself
        return Lateness(UNKNOWN, dates, policy, submitted)
    if submitted.at <= dates.due:
        return Lateness(ON_TIME, dates, policy, submitted)
    if dates.cutoff is not None and submitted.at > dates.cutoff:
        return Lateness(TOO_LATE, dates, policy, submitted, penalty_percent=100.0)
    units = math.ceil((submitted.at - dates.due) / UNITS[policy.per])
    percent = min(policy.max_penalty_percent, units * policy.late_penalty_percent)
    return Lateness(LATE, dates, policy, submitted, units, round(percent, 4))


def read_submission_times(path) -> dict[str, str]:
    """A --submitted-at file: a CSV whose header names `submitted_at` and `submission` (an entry of the class
    folder, with or without .zip) or `id` (a roster's student); name -> time as written (checked here)."""
    import csv

    try:
        text = path.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as exc:
        raise PolicyError(t("cannot read {path}: {error}", path=str(path), error=verbatim(exc))) from None
    reader = csv.reader(text.splitlines())
    header = [h.strip().casefold() for h in next(reader, [])]
    key = next((h for h in ("submission", "id") if h in header), None)
    if key is None or "submitted_at" not in header:
        raise PolicyError(t("{path}: the first row must name the columns submission (or id) and submitted_at",
                            path=str(path)))
    at, name = header.index("submitted_at"), header.index(key)
    times = {}
    for line, row in enumerate(reader, start=2):
        if not any(cell.strip() for cell in row):
            continue
        who = row[name].strip() if name < len(row) else ""
        when = row[at].strip() if at < len(row) else ""
        try:
            in_range(parse_moment(when))
        except OutOfRange as exc:
            raise PolicyError(t("{path}, line {line}: {column} {value} is out of range ({range})", path=str(path),
                                line=line, column="submitted_at", value=repr(when), range=exc.said)) from None
        except ValueError:
            raise PolicyError(t("{path}, line {line}: submitted_at {value} is not a time such as "
                                "2026-12-01T20:15:00+08:00", path=str(path), line=line, value=repr(when))) from None
        if not who:
            raise PolicyError(t("{path}, line {line}: no {column}", path=str(path), line=line, column=key))
        times[who] = when
    return times


def gradescope_lateness(policy: Policy, metadata: dict) -> Lateness | None:
    """The lateness of a Gradescope submission (its /autograder/submission_metadata.json): submitted at its
    `created_at` (the upload's time, the same when the autograder runs again), due at the submitting users' own
    `assignment.due_date` (an extension included; for a group the latest of its members'), else the assignment's,
    the cutoff their `late_due_date` likewise (none: late work counts, with the policy's capped penalty). The rate
    and cap are the policy's. None when Gradescope sets no due date. KeyError, TypeError or ValueError when the file
    is not in Gradescope's shape."""
    assignment = metadata.get("assignment") or {}
    own = [u.get("assignment") or {} for u in metadata.get("users") or []]

    def latest(key: str) -> dt.datetime | None:
        found = [parse_moment(a[key]) for a in own if a.get(key)]
        if not found and assignment.get(key):
            found = [parse_moment(assignment[key])]
        return max(found) if found else None

    due = latest("due_date")
    if due is None:
        return None
    cutoff = latest("late_due_date")
    general = parse_moment(assignment["due_date"]) if assignment.get("due_date") else None
    extension = due.isoformat(timespec="minutes") if general is not None and due != general else ""
    dates = Dates(due, cutoff if cutoff is None or cutoff >= due else due, extension)
    return lateness(policy, dates, Submitted(parse_moment(metadata["created_at"]), FROM_GRADESCOPE))
