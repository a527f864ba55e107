"""Written answers: what a student writes to an exercise's questions (course.toml's `[[exercise.question]]`).

Two places, read in this order and joined when both hold text for a question:
- `<exercise>/answers.md`: each answer under a level-2 heading that is exactly its question's id (`## tensor_flow`).
  Text before the first heading is not an answer; a heading that names no question of the exercise (and the text
  under it) is not either, and `grader check` says so. The template the handout ships quotes each prompt (`> ...`)
  and holds HTML comments: both are taken out, so an untouched template answers nothing.
- notebook Markdown cells tagged `<exercise>:<question>`, in the exercise's own notebook or in one at the top level
  of the submission: read by grader/grading/notebooks.py's capped, time-limited child, never in this process.

Student text stays text, as the notebook reader keeps it: a lone surrogate, or a byte that is not UTF-8, is written
out as its escape (`\\ud800`, `\\xff`), so the record, the report and every page hold the same valid text. answers.md
is read like an exercise's .py file: no link followed, at most MAX_ANSWERS_BYTES.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from grader.course import ExerciseConfig
from grader.grading.notebooks import FromNotebook, notebook_cells, notebook_paths, valid_text
from grader.i18n import Text, t, verbatim
from grader.nolinks import LINK, NOT_REGULAR, REGULAR, read_without_links
from grader.sandbox.staging import MAX_SOURCE_BYTES

ANSWERS_FILE = "answers.md"
MAX_ANSWERS_BYTES = MAX_SOURCE_BYTES   # an answers file is read like the exercise's code
TAG_SEPARATOR = ":"                    # a notebook cell's tag `<exercise>:<question>`

_HEADING = re.compile(r"^ {0,3}##(?!#)[ \t]+(.*?)(?:[ \t]+#+)?[ \t]*$")   # a level-2 ATX heading and its words
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_COMMENT = re.compile(r"<!--.*?-->", re.DOTALL)   # closed ones only: a stray `<!--` leaves the answer whole


@dataclass(frozen=True)
class Answers:
    """An exercise's written answers: every question's id with its text ("" when unanswered), and what the student
    should be told (a heading or tag that names no question, a file that could not be read)."""

    texts: dict[str, str]
    problems: tuple[Text, ...] = ()

    def empty(self) -> list[str]:
        """The questions still unanswered, in the course's order."""
        return [qid for qid, text in self.texts.items() if not text]


def read_answers(submission: Path, ex: ExerciseConfig) -> Answers:
    """The exercise's answers in the submission folder (an exercise with no question has none)."""
    if not ex.questions:
        return Answers({})
    found: dict[str, list[str]] = {q.id: [] for q in ex.questions}
    problems: list[Text] = []
    from_file(submission, ex, found, problems)
    from_notebooks(submission, ex, found, problems)
    return Answers({qid: "\n\n".join(parts) for qid, parts in found.items()}, tuple(problems))


def from_file(submission: Path, ex: ExerciseConfig, found: dict[str, list[str]], problems: list[Text]) -> None:
    shown = f"{ex.id}/{ANSWERS_FILE}"
    try:
        read = read_without_links(submission, (ex.id, ANSWERS_FILE), MAX_ANSWERS_BYTES + 1)
    except OSError as exc:
        problems.append(t("{file} cannot be read: {error}", file=shown, error=verbatim(exc.strerror)))
        return
    if read.kind == LINK:
        problems.append(t("`{link}` is a symbolic link: submit plain files", link=read.link))
    elif read.kind == NOT_REGULAR:
        problems.append(t("{file} is not a regular file", file=shown))
    elif read.kind == REGULAR and len(read.data) > MAX_ANSWERS_BYTES:
        problems.append(t("{file} is larger than {most:,} bytes; answers may be at most that", file=shown,
                          most=MAX_ANSWERS_BYTES))
    elif read.kind == REGULAR:
        text = read.data.decode("utf-8", "backslashreplace").removeprefix("\ufeff")
        for heading, body in sections(text):
            if heading in found:
                answer = answer_text(body, ex)
                if answer:
                    found[heading].append(answer)
            else:
                problems.append(t("{file}: the heading `## {heading}` names no question of {exercise} (its "
                                  "questions: {known})", file=shown, heading=verbatim(heading), exercise=ex.id,
                                  known=", ".join(found)))


def sections(text: str) -> list[tuple[str, str]]:
    """The level-2 headings of a Markdown text, each with the text under it up to the next one (a `##` line inside a
    fenced code block is code, not a heading); the text before the first heading is left out."""
    found: list[tuple[str, list[str]]] = []
    fence = None
    for line in text.splitlines():
        opening = _FENCE.match(line)
        if opening and (fence is None or opening.group(1).startswith(fence)):
            fence = opening.group(1)[:3] if fence is None else None
        heading = _HEADING.match(line) if fence is None else None
        if heading:
            found.append((heading.group(1).strip(), []))
        elif found:
            found[-1][1].append(line)
    return [(heading, "\n".join(lines)) for heading, lines in found]


def answer_text(body: str, ex: ExerciseConfig) -> str:
    """What the student wrote under a heading: without HTML comments and without the template's quoted prompts
    (a quoted line that is a prompt of the exercise, in any language, or an empty quoted line)."""
    prompts = {" ".join(text.split()) for q in ex.questions for text in q.prompt.values()}
    kept = []
    for line in _COMMENT.sub("", body).splitlines():
        quoted = line.strip()
        if quoted.startswith(">") and " ".join(quoted.lstrip(">").split()) in prompts | {""}:
            continue
        kept.append(line.rstrip())
    return "\n".join(kept).strip("\n").strip()


def from_notebooks(submission: Path, ex: ExerciseConfig, found: dict[str, list[str]], problems: list[Text]) -> None:
    """Markdown cells tagged `<exercise>:<question>` in the notebooks the grader reads (an unreadable notebook
    is said only when it could hold them: staging says it too when it is the exercise's own)."""
    prefix = ex.id + TAG_SEPARATOR
    for relative in notebook_paths(submission, [ex.id]):
        try:
            cells = notebook_cells(submission, relative)
        except OSError:
            continue
        if cells is None or isinstance(cells, FromNotebook):
            if isinstance(cells, FromNotebook) and cells.problem is not None and relative.startswith(ex.id + "/"):
                problems.append(cells.problem)
            continue
        for number, cell in enumerate(cells, start=1):
            tags = [tag for tag in cell["tags"] if tag.startswith(prefix)]
            for tag in tags:
                question = tag[len(prefix):]
                if question not in found:
                    problems.append(t("{file}, cell {cell}: the tag `{tag}` names no question of {exercise} (its "
                                      "questions: {known})", file=valid_text(relative), cell=number,
                                      tag=verbatim(tag), exercise=ex.id, known=", ".join(found)))
                elif cell["cell_type"] != "markdown":
                    problems.append(t("{file}, cell {cell}: the tag `{tag}` is on a code cell; write the answer in "
                                      "a Markdown cell", file=valid_text(relative), cell=number, tag=verbatim(tag)))
                elif text := answer_text(cell["source"], ex):
                    found[question].append(text)


def answers_template(ex: ExerciseConfig) -> str:
    """The `answers.md` an exercise's folder ships: a heading per question with its prompt quoted in each language.
    Read back, it answers nothing (`answer_text` drops the quoted prompts and the comment)."""
    lines = [f"# Written answers: {ex.id} · 书面回答", "",
             "<!-- Write each answer under its question's heading, below the quoted question. Keep the headings as",
             "     they are: the grader finds your answers by them. This comment and the quoted questions are not part",
             "     of your answer.",
             "     在每个问题的标题下、引用的题目之后作答。请保持标题不变：评分程序按标题找到你的回答。",
             "     本注释和引用的题目不算作回答。 -->", ""]
    for q in ex.questions:
        lines += [f"## {q.id}", "", f"> {q.prompt['en']}", ">", f"> {q.prompt['zh']}", "", ""]
    return "\n".join(lines).rstrip("\n") + "\n"
