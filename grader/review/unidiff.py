"""Unified diffs of one file: made with difflib, applied here, exactly.

`make_diff` is `difflib.unified_diff` plus the "\\ No newline at end of file" marker difflib leaves out, so that
applying a diff reproduces the new text byte for byte. `apply_diff` applies such a diff the way `patch --fuzz=0`
does: every hunk's context and removed lines must match the text exactly, at the line the hunk names or, when
unrelated edits above it moved the code, at the nearest place where they match; a hunk that matches nowhere
raises PatchError. There is no fuzz: a diff whose surroundings changed fails, it is never half applied.
"""

from __future__ import annotations

import difflib
import re

NO_NEWLINE = "\\ No newline at end of file"
HUNK_HEADER = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


def lines_of(text: str) -> list[str]:
    """The lines of `text`, each with its "\\n" (str.splitlines would also split at form feeds and other
    separators that are no line end to a diff)."""
    parts = text.split("\n")
    return [p + "\n" for p in parts[:-1]] + ([parts[-1]] if parts[-1] else [])


class PatchError(ValueError):
    """A diff that is malformed or does not apply to the text it is applied to."""


def make_diff(old: str, new: str, old_name: str, new_name: str, context: int = 3) -> str:
    """The unified diff that turns `old` into `new` ("" when they are equal)."""
    lines = []
    for line in difflib.unified_diff(lines_of(old), lines_of(new),
                                     old_name, new_name, n=context):
        lines.append(line)
        if not line.endswith("\n"):   # the last line of a text without a final newline
            lines.append("\n" + NO_NEWLINE + "\n")
    return "".join(lines)


def _hunks(diff: str) -> list[tuple[int, int, list[str], list[str]]]:
    """(old start, old length, old lines, new lines) for each hunk, the lines with their line ends."""
    hunks: list[tuple[int, int, list[str], list[str]]] = []
    lines = lines_of(diff)
    i = 0
    while i < len(lines) and not lines[i].startswith("@@"):
        i += 1   # the --- / +++ header (and anything before it)
    if i == len(lines):
        raise PatchError("the diff has no hunk")
    while i < len(lines):
        header = HUNK_HEADER.match(lines[i])
        if not header:
            raise PatchError(f"line {i + 1} of the diff is not a hunk header: {lines[i].rstrip()!r}")
        start, old_len = int(header[1]), int(header[2] if header[2] is not None else 1)
        new_len = int(header[4] if header[4] is not None else 1)
        old: list[str] = []
        new: list[str] = []
        i += 1
        while i < len(lines) and (len(old) < old_len or len(new) < new_len or lines[i].startswith("\\")):
            line = lines[i]
            tag, text = line[:1], line[1:]
            if line.startswith("\\"):   # the line before has no newline in the side(s) it belongs to
                last = lines[i - 1][:1]
                if last in (" ", "-"):
                    old[-1] = old[-1].rstrip("\n")
                if last in (" ", "+"):
                    new[-1] = new[-1].rstrip("\n")
            elif tag == " ":
                old.append(text)
                new.append(text)
            elif tag == "-":
                old.append(text)
            elif tag == "+":
                new.append(text)
            elif line == "\n":   # an empty context line whose leading space an editor stripped
                old.append(line)
                new.append(line)
            else:
                raise PatchError(f"line {i + 1} of the diff is no hunk line: {line.rstrip()!r}")
            i += 1
        if len(old) != old_len or len(new) != new_len:
            raise PatchError(f"a hunk at line {start} says {old_len} old and {new_len} new lines, and holds "
                             f"{len(old)} and {len(new)}")
        hunks.append((start, old_len, old, new))
    return hunks


def apply_diff(text: str, diff: str) -> str:
    """`text` with the diff applied; PatchError when a hunk does not match it exactly."""
    lines = lines_of(text)
    out: list[str] = []
    done = 0   # lines of `lines` already copied or replaced
    offset = 0   # how far the code has moved from where the diff found it, by the hunks so far
    for number, (start, old_len, old, new) in enumerate(_hunks(diff), 1):
        wanted = (start if old_len == 0 else start - 1) + offset   # an insertion's start is the line before it
        at = _nearest_match(lines, old, wanted, done)
        if at is None:
            shown = "".join(old).strip().splitlines()[:1] or ["(an insertion)"]
            raise PatchError(f"hunk {number} (line {start}) no longer applies: the text it changes is not there "
                             f"(it starts {shown[0].strip()!r})")
        out += lines[done:at] + new
        done = at + len(old)
        offset = at - (start - 1 if old_len else start)
    return "".join(out + lines[done:])


def _nearest_match(lines: list[str], block: list[str], wanted: int, lowest: int) -> int | None:
    """The index nearest to `wanted` (not below `lowest`) where `block` occurs in `lines`, or None."""
    highest = len(lines) - len(block)
    for distance in range(max(wanted - lowest, highest - wanted, 0) + 1):
        for at in (wanted - distance, wanted + distance):
            if lowest <= at <= highest and lines[at:at + len(block)] == block:
                return at
    return None
