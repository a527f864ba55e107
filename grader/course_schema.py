"""course.toml checked against grader/course.schema.json, each problem said with its line.

The schema is the one list of the keys course.toml may hold (their types, ranges and descriptions); this module
turns what jsonschema finds into sentences an instructor can act on: the file, the line of the offending key, and
for an unknown key the nearest known one. tomllib keeps no positions, so `key_lines` finds each key's line by
reading the text the way TOML lays it out: table headers, then `key = value` lines under them.
"""

from __future__ import annotations

import ast
import difflib
import functools
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

SCHEMA_PATH = Path(__file__).with_name("course.schema.json")

Where = tuple[str | int, ...]   # a value's place in the parsed document: table and key names, array indices

# A key as TOML writes it: bare, "basic" or 'literal', dotted parts joined by dots.
_PART = r'(?:[A-Za-z0-9_-]+|"(?:[^"\\]|\\.)*"|\'[^\']*\')'
_KEY = rf"{_PART}(?:\s*\.\s*{_PART})*"
_HEADER = re.compile(rf"^\s*(\[\[?)\s*({_KEY})\s*\]\]?")
_KEY_LINE = re.compile(rf"^\s*({_KEY})\s*=(.*)$")
_MULTILINE = re.compile(r'"""|\'\'\'')
_TYPES = {"string": "a text in quotes", "integer": "a whole number", "number": "a number",
          "boolean": "true or false", "array": "a list [...]", "object": "a table", "null": "nothing"}


@functools.cache
def schema() -> dict[str, Any]:
    return json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))


def _parts(key: str) -> list[str]:
    parts = re.findall(_PART, key)
    return [json.loads(p) if p.startswith('"') else p.strip("'") for p in parts]


def key_lines(text: str) -> dict[Where, int]:
    """The line (from 1) of every table header and every `key = value` in a TOML text, by its place in the parsed
    document: `[[exercise]]` tables are counted, so the third one's `timeout_s` is ("exercise", 2, "timeout_s").
    A key inside an inline table or a list has no entry: its place is on the line of the key holding it."""
    lines: dict[Where, int] = {}
    table: Where = ()
    arrays: dict[tuple[str, ...], int] = {}   # an array of tables' names -> the index of its last table
    closing = None                            # the delimiter of the multi-line string being read
    for number, line in enumerate(text.splitlines(), start=1):
        if closing is not None:
            if closing in line:
                closing = None
            continue
        header = _HEADER.match(line)
        if header:
            names = _parts(header[2])
            if header[1] == "[[":
                arrays[tuple(names)] = arrays.get(tuple(names), -1) + 1
            table = _place(names, arrays)
            lines.setdefault(table, number)
            continue
        pair = _KEY_LINE.match(line)
        if pair:
            lines.setdefault(table + tuple(_parts(pair[1])), number)
            strings = _MULTILINE.findall(pair[2])
            if len(strings) % 2:
                closing = strings[-1]
    return lines


def _place(names: list[str], arrays: dict[tuple[str, ...], int]) -> Where:
    """A header's names as a place: after each name that is an array of tables, the index of its current table."""
    place: list[str | int] = []
    for i, name in enumerate(names):
        place.append(name)
        if tuple(names[:i + 1]) in arrays:
            place.append(arrays[tuple(names[:i + 1])])
    return tuple(place)


def line_of(lines: dict[Where, int], where: Where) -> int | None:
    """The line of `where`, else of the nearest key or table that holds it."""
    for end in range(len(where), 0, -1):
        if where[:end] in lines:
            return lines[where[:end]]
    return None


def problems(path: Path, text: str, data: dict) -> list[str]:
    """What is wrong with the parsed course.toml `data` (read from `text` at `path`), one sentence a problem, in the
    order of the file's lines; empty when it is valid."""
    from jsonschema import Draft202012Validator

    errors = list(Draft202012Validator(schema()).iter_errors(data))
    lines = key_lines(text) if errors else {}
    found: list[tuple[int, str]] = []
    for error in errors:
        for where, said in _explain(error, data):
            line = line_of(lines, where)
            found.append((line or 0, f"{path}, line {line}: {said}" if line else f"{path}: {said}"))
    return [said for _, said in sorted(found)]


def problem_at(path: Path, text: str, where: Where, said: str) -> str:
    """One problem found by a check the schema cannot state (a range's ends in order, a folder that exists)."""
    line = line_of(key_lines(text), where)
    return f"{path}, line {line}: {said}" if line else f"{path}: {said}"


def _explain(error, data: dict) -> Iterator[tuple[Where, str]]:
    where: Where = tuple(error.absolute_path)
    rule = error.schema if isinstance(error.schema, dict) else {}
    if error.validator == "additionalProperties" and isinstance(error.instance, dict):
        known = list(rule.get("properties", {}))
        for key in error.instance:
            if key not in known:
                yield where + (key,), _unknown(key, known, where, data, error.instance[key])
        return
    if "propertyNames" in error.schema_path:   # a name outside the table's list: checked by an enum
        yield where + (error.instance,), _unknown(str(error.instance), list(rule.get("enum", ())), where, data,
                                                  _value_at(data, where)[error.instance])
        return
    if error.validator == "required":
        # one error for each missing key, its message "'<key>' is a required property"
        missing = ast.literal_eval(error.message.removesuffix(" is a required property"))
        key, table = _key(where + (missing,), data)
        yield where, f"{table} has no `{key}`" if table else f"no `{key}`"
        return
    key, table = _key(where, data)
    subject = f"`{key}` under {table}" if table else f"`{key}`"
    got = _toml(error.instance)
    if "x-expected" in rule:
        yield where, f"{subject} must be {rule['x-expected']}, not {got}"
    elif error.validator == "type":
        wanted = error.validator_value if isinstance(error.validator_value, list) else [error.validator_value]
        yield where, f"{subject} must be {' or '.join(_TYPES.get(str(w), str(w)) for w in wanted)}, not {got}"
    elif error.validator == "enum":
        yield where, f"{subject} must be one of {', '.join(_toml(v) for v in error.validator_value)}, not {got}"
    elif error.validator in ("minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"):
        bound = {"minimum": "at least", "exclusiveMinimum": "more than", "maximum": "at most",
                 "exclusiveMaximum": "less than"}[error.validator]
        yield where, f"{subject} must be {bound} {error.validator_value}, not {got}"
    elif error.validator in ("minItems", "maxItems"):
        count = schema_items(rule)
        yield where, f"{subject} must hold {count} items, not {len(error.instance)}"
    else:
        yield where, f"{subject}: {error.message}"


def schema_items(rule: dict) -> str:
    low, high = rule.get("minItems"), rule.get("maxItems")
    if low == high:
        return str(low)
    return f"at least {low}" if high is None else f"{low or 0} to {high}"


def _unknown(key: str, known: list[str], where: Where, data: dict, value: Any) -> str:
    close = difflib.get_close_matches(key, known, n=1)
    tables = isinstance(value, dict) or (isinstance(value, list) and value and all(isinstance(v, dict) for v in value))
    what = "unknown table" if tables else "unknown key"
    place = f"under {_table(where, data)}" if where else "in the file"
    hint = f"did you mean `{close[0]}`?" if close else f"known: {', '.join(f'`{k}`' for k in known)}"
    return f"`{key}`: {what} {place}; {hint}"


def _value_at(data: Any, where: Where) -> Any:
    for part in where:
        data = data[part]
    return data


def _key(where: Where, data: dict) -> tuple[str, str]:
    """A value's key as course.toml writes it (`title.en`, `uids[1]`) and the table it sits in."""
    split = _table_length(where)
    key = ""
    for part in where[split:]:
        name = part if re.fullmatch(r"[A-Za-z0-9_-]+", str(part)) else json.dumps(part, ensure_ascii=False)
        key += f"[{part}]" if isinstance(part, int) else (f".{name}" if key else str(name))
    return key or str(where[-1]), _table(where[:split], data)


def _table_length(where: Where) -> int:
    """How much of `where` names a table: [exercise.points] and [cluster.<kind>] go two names deep (the exercise's
    index between), every other table one."""
    if where[:1] == ("exercise",) and len(where) > 1 and isinstance(where[1], int):
        return 3 if len(where) > 3 and where[2] == "points" else 2
    if where[:1] == ("cluster",) and len(where) > 2:
        return 2
    return min(1, len(where) - 1) if len(where) > 1 else 0


def _table(where: Where, data: dict) -> str:
    if not where:
        return ""
    if where[0] == "exercise" and len(where) > 1 and isinstance(where[1], int):
        raw = data.get("exercise", [])[where[1]]
        named = raw.get("id") if isinstance(raw, dict) else None
        exercise = f'"{named}"' if isinstance(named, str) else f"#{where[1] + 1}"
        return f"[exercise.points] of exercise {exercise}" if where[2:3] == ("points",) else f"[[exercise]] {exercise}"
    return "[" + ".".join(str(part) for part in where) + "]"


def _toml(value: Any) -> str:
    """A value as course.toml writes it."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{k} = {_toml(v)}" for k, v in value.items()) + " }" if value else "{}"
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    return str(value)
