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
"""

from __future__ import annotations

import csv
import unicodedata
from dataclasses import dataclass
from pathlib import Path

COLUMNS = ("id", "name", "email")
AMBIGUOUS = "ambiguous"


class RosterError(Exception):
    """The roster file cannot be read or is malformed; the message says where."""


@dataclass(frozen=True)
class Student:
    id: str
    name: str
    email: str


def read_roster(path: Path) -> list[Student]:
    """The roster's students in file order; a missing id column, an empty id or an id given twice is an error."""
    try:
        text = path.read_text(encoding="utf-8-sig")   # spreadsheet programs save a BOM
    except (OSError, UnicodeDecodeError) as exc:
        raise RosterError(f"cannot read the roster {path}: {exc}") from None
    reader = csv.reader(text.splitlines())
    header = [h.strip().casefold() for h in next(reader, [])]
    if "id" not in header:
        found = ", ".join(header) or "nothing"
        raise RosterError(f"{path}: the first row must name the columns id, name, email (found: {found})")
    where = {column: header.index(column) for column in COLUMNS if column in header}
    students, seen = [], set()
    for line, row in enumerate(reader, start=2):
        if not any(cell.strip() for cell in row):
            continue

        def cell(column: str) -> str:
            i = where.get(column)
            return row[i].strip() if i is not None and i < len(row) else ""

        student = Student(cell("id"), cell("name"), cell("email"))
        if not student.id:
            raise RosterError(f"{path}, line {line}: no id")
        if student.id.casefold() in seen:
            raise RosterError(f"{path}, line {line}: id {student.id} is listed twice")
        seen.add(student.id.casefold())
        students.append(student)
    return students


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
