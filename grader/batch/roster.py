"""The class roster (`grader batch --roster`): who should have submitted, matched to the submissions' names.

A roster is a CSV file with a header row naming the columns `id`, `name` and `email` (in any order, any case;
other columns are ignored; only `id` is required). A submission's name (a folder, or a zip without its `.zip`)
is matched to one student, trying in turn:

1. the student's id (letter case ignored): `2024001/`, `2024001.zip`;
2. the student's email, whole or the part before `@` (letter case ignored): `alice@uni.edu/`, `alice/`;
3. the student's name, compared without letter case, spaces or punctuation: `Zhang San` matches `zhang_san/`
   and `zhangsan.zip`.

A name that fits two students is matched to neither (it is flagged `ambiguous`), since a grade given to the
wrong student is worse than one the instructor has to place by hand.

Other columns a roster may have (`EXTRA`), each optional, are kept with the student: the identifiers a learning
management system matches its students by (`canvas_id`, `sis_user_id`, `sis_login_id`, `section` for Canvas;
`idnumber`, `username` for Moodle; see grader.classroom.lms), a deadline `extension` (a new due date, or a number of
days; see grader.policy) and `submitted_at` (when the student's work was handed in). A header names them in any case,
with spaces for underscores (`SIS User ID`). Canvas's own gradebook export reads as a roster: its `Student` is the name,
its `ID` the Canvas id, and its `Points Possible` row is no student.
"""

from __future__ import annotations

import csv
import re
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path

from grader.i18n import Text, t, verbatim

COLUMNS = ("id", "name", "email")
EXTRA = ("canvas_id", "sis_user_id", "sis_login_id", "section", "idnumber", "username", "extension", "submitted_at")
# Other names of the columns above, as other systems' exports write them (Canvas's, Moodle's).
ALIASES = {"student": "name", "email_address": "email", "id_number": "idnumber"}
AMBIGUOUS = "ambiguous"


class RosterError(Exception):
    """The roster file cannot be read or is malformed; `said` says where, in each language."""

    def __init__(self, said: Text | str):
        super().__init__(str(said))
        self.said = said if isinstance(said, Text) else verbatim(said)


@dataclass(frozen=True)
class Student:
    id: str
    name: str
    email: str
    # EXTRA columns the roster has, by name ("" where a student's cell is empty); no part of a student's identity
    columns: dict[str, str] = field(default_factory=dict, compare=False, hash=False)

    def column(self, name: str) -> str:
        return self.columns.get(name, "")

    def record(self) -> dict:
        return {"id": self.id, "name": self.name, "email": self.email, "columns": dict(self.columns)}

    @classmethod
    def from_record(cls, data: dict) -> Student:
        return cls(data["id"], data["name"], data["email"], dict(data.get("columns") or {}))


def _column_name(header: str) -> str:
    name = re.sub(r"[\s-]+", "_", header.strip().casefold())
    return ALIASES.get(name, name)


def read_roster(path: Path) -> list[Student]:
    """The roster's students in file order; a missing id column, an empty id or an id given twice is an error."""
    try:
        text = path.read_text(encoding="utf-8-sig")   # spreadsheet programs save a BOM
    except (OSError, UnicodeDecodeError) as exc:
        raise RosterError(f"cannot read the roster {path}: {exc}") from None
    reader = csv.reader(text.splitlines())
    raw = next(reader, [])
    header = [_column_name(h) for h in raw]
    if "id" not in header:
        found = ", ".join(header) or "nothing"
        raise RosterError(f"{path}: the first row must name the columns id, name, email (found: {found})")
    # Canvas's gradebook export: Student, ID, [SIS User ID, SIS Login ID,] Section, then its assignments
    canvas_export = [h.strip() for h in raw[:2]] == ["Student", "ID"]
    where = {column: header.index(column) for column in (*COLUMNS, *EXTRA) if column in header}
    if canvas_export and "canvas_id" not in where:
        where["canvas_id"] = where["id"]
    students, seen = [], set()
    for line, row in enumerate(reader, start=2):
        if not any(cell.strip() for cell in row):
            continue
        if canvas_export and (row[0].strip().startswith("Points Possible") or all(
                re.fullmatch(r"\s*(Muted|Manual Posting.*)?\s*", cell, re.IGNORECASE) for cell in row)):
            continue   # the rows of Canvas's export that describe its assignments

        def cell(column: str, row: list[str] = row) -> str:   # bound now: called only in this iteration
            i = where.get(column)
            return row[i].strip() if i is not None and i < len(row) else ""

        student = Student(cell("id"), cell("name"), cell("email"),
                          {column: cell(column) for column in EXTRA if column in where})
        _check_times(path, line, student)
        if not student.id:
            raise RosterError(f"{path}, line {line}: no id")
        if student.id.casefold() in seen:
            raise RosterError(f"{path}, line {line}: id {student.id} is listed twice")
        seen.add(student.id.casefold())
        students.append(student)
    return students


def _check_times(path: Path, line: int, student: Student) -> None:
    """An extension is a number of days or a time, and a submission time a time: found out here, not later."""
    from grader.policy import OutOfRange, check_extension, in_range, parse_moment

    for column, check in (("extension", check_extension), ("submitted_at", lambda v: in_range(parse_moment(v)))):
        value = student.column(column)
        if not value:
            continue
        try:
            check(value)
        except OutOfRange as exc:
            raise RosterError(t("{path}, line {line}: {column} {value} is out of range ({range})", path=str(path),
                                line=line, column=column, value=repr(value), range=exc.said)) from None
        except ValueError:
            said = (t("{path}, line {line}: extension {value} is neither a number of days nor a time such as "
                      "2026-12-04T23:59:59+08:00", path=str(path), line=line, value=repr(value))
                    if column == "extension" else
                    t("{path}, line {line}: submitted_at {value} is not a time such as 2026-12-01T20:15:00+08:00",
                      path=str(path), line=line, value=repr(value)))
            raise RosterError(said) from None


def _plain_name(text: str) -> str:
    """A name as compared: compatibility-normalised, no letter case, only letters and digits."""
    return "".join(ch for ch in unicodedata.normalize("NFKC", text).casefold() if ch.isalnum())


def match(submission: str, students: list[Student]) -> tuple[Student | None, str]:
    """The student a submission belongs to and how it was matched ("id", "email" or "name"); (None, "") when no
    student fits, (None, AMBIGUOUS) when a rule fits more than one."""
    stem = submission[:-4] if submission.lower().endswith(".zip") else submission
    key = stem.strip().casefold()
    rules = (
        ("id", lambda s: s.id.casefold() == key),
        ("email", lambda s: bool(s.email) and key in (s.email.casefold(), s.email.casefold().partition("@")[0])),
        ("name", lambda s: bool(_plain_name(s.name)) and _plain_name(s.name) == _plain_name(stem)),
    )
    for how, fits in rules:
        found = [s for s in students if fits(s)]
        if len(found) == 1:
            return found[0], how
        if found:
            return None, AMBIGUOUS
    return None, ""
