"""Written answers: read from <exercise>/answers.md under a heading per question id, or from notebook Markdown cells
tagged <exercise>:<question>; the template the course ships answers nothing; student text stays valid text."""

from __future__ import annotations

import json
import os
from pathlib import Path

from conftest import ROOT
from grader.course import load_course
from grader.grading import answers as answers_module
from grader.grading.answers import ANSWERS_FILE, answers_template, read_answers

COURSE = load_course(ROOT)
LM = COURSE.exercise("transformer_lm")   # two questions: tensor_flow, reads_history


def written(tmp_path: Path, text: str | bytes, exercise: str = "transformer_lm") -> Path:
    folder = tmp_path / "sub"
    (folder / exercise).mkdir(parents=True, exist_ok=True)
    data = text.encode("utf-8") if isinstance(text, str) else text
    (folder / exercise / ANSWERS_FILE).write_bytes(data)
    return folder


def rendered(answers) -> list[str]:
    return [problem.render("en") for problem in answers.problems]


def test_answers_are_read_under_their_exact_headings(tmp_path):
    folder = written(tmp_path, "\n".join([
        "# My answers", "text before any heading is not an answer", "",
        "## tensor_flow", "", "> " + LM.questions[0].prompt["en"], ">", "> " + LM.questions[0].prompt["zh"], "",
        "tokens [B, T] -> embeddings [B, T, C]", "### a sub-heading stays in the answer", "> my own quote stays",
        "```python", "## not a heading: inside a fence", "```", "<!-- a comment is not an answer -->", "",
        "## Tensor_Flow", "a heading with other capitals is not the question",
        "## reads_history ##", "the query at `a` reads p or q", ""]))
    got = read_answers(folder, LM)
    assert got.texts == {
        "tensor_flow": "tokens [B, T] -> embeddings [B, T, C]\n### a sub-heading stays in the answer\n"
                       "> my own quote stays\n```python\n## not a heading: inside a fence\n```",
        "reads_history": "the query at `a` reads p or q"}
    assert rendered(got) == ["transformer_lm/answers.md: the heading `## Tensor_Flow` names no question of "
                             "transformer_lm (its questions: tensor_flow, reads_history)"]
    assert got.empty() == []


def test_a_stray_comment_opener_leaves_the_answer_whole(tmp_path):
    folder = written(tmp_path, "## tensor_flow\n<!-- closed -->before <!-- never closed\nafter\n")
    assert read_answers(folder, LM).texts["tensor_flow"] == "before <!-- never closed\nafter"


def test_the_shipped_template_is_every_questions_heading_and_answers_nothing(tmp_path):
    for ex in COURSE.exercises:
        shipped = (ROOT / "exercises" / ex.id / ANSWERS_FILE).read_text(encoding="utf-8")
        assert shipped == answers_template(ex), f"exercises/{ex.id}/answers.md differs from answers_template"
        assert [line[3:] for line in shipped.splitlines() if line.startswith("## ")] == [q.id for q in ex.questions]
        got = read_answers(ROOT / "exercises", ex)
        assert got.texts == {q.id: "" for q in ex.questions} and got.problems == ()
        assert got.empty() == [q.id for q in ex.questions]
    # the positive control: one line written into the template is an answer
    template = answers_template(LM)
    filled = template.replace("## reads_history\n", "## reads_history\nbecause attention reads earlier keys\n")
    assert read_answers(written(tmp_path, filled), LM).texts == {
        "tensor_flow": "", "reads_history": "because attention reads earlier keys"}


def test_no_file_no_answers_and_an_exercise_without_questions_has_none(tmp_path):
    (tmp_path / "sub").mkdir()
    assert read_answers(tmp_path / "sub", LM).texts == {"tensor_flow": "", "reads_history": ""}
    bare = type(LM)(**{**LM.__dict__, "questions": ()})
    assert read_answers(written(tmp_path, "## tensor_flow\nx\n"), bare).texts == {}


def test_student_text_stays_valid_text(tmp_path):
    """Bytes that are not UTF-8 are written out as escapes, never dropped or turned into surrogates."""
    folder = written(tmp_path, b"## tensor_flow\n<script>alert(1)</script> =1+1 \xff\xfe end\n")
    text = read_answers(folder, LM).texts["tensor_flow"]
    assert text == "<script>alert(1)</script> =1+1 \\xff\\xfe end"
    text.encode("utf-8")


def test_answers_md_is_capped_and_never_followed_through_a_link(tmp_path, monkeypatch):
    monkeypatch.setattr(answers_module, "MAX_ANSWERS_BYTES", 64)
    folder = written(tmp_path, "## tensor_flow\n" + "x" * 100 + "\n")
    got = read_answers(folder, LM)
    assert got.texts["tensor_flow"] == ""
    assert rendered(got) == ["transformer_lm/answers.md is larger than 64 bytes; answers may be at most that"]
    # the positive control: under the cap it is read
    assert read_answers(written(tmp_path, "## tensor_flow\nshort\n"), LM).texts["tensor_flow"] == "short"
    secret = tmp_path / "secret.md"
    secret.write_text("## tensor_flow\nsomeone else's answer\n")
    os.remove(folder / "transformer_lm" / ANSWERS_FILE)
    (folder / "transformer_lm" / ANSWERS_FILE).symlink_to(secret)
    got = read_answers(folder, LM)
    assert got.texts["tensor_flow"] == ""
    assert rendered(got) == ["`transformer_lm/answers.md` is a symbolic link: submit plain files"]


def notebook(cells: list[dict]) -> str:
    """A notebook's JSON (nbformat 4) holding `cells`: (type, tags, source)."""
    return json.dumps({"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": [
        {"cell_type": kind, "id": f"c{i}", "metadata": {"tags": tags}, "source": source,
         **({"outputs": [], "execution_count": None} if kind == "code" else {})}
        for i, (kind, tags, source) in enumerate(cells)]})


def test_notebook_markdown_cells_tagged_exercise_question_are_answers(tmp_path):
    folder = tmp_path / "sub"
    folder.mkdir()
    (folder / "work.ipynb").write_text(notebook([
        ("markdown", ["transformer_lm:tensor_flow"], "first part"),
        ("markdown", [], "an untagged cell is not an answer"),
        ("markdown", ["attention:tensor_flow"], "another exercise's answer"),
        ("code", ["transformer_lm:reads_history"], "print('code is not an answer')"),
        ("markdown", ["transformer_lm:tensorflow"], "a tag naming no question"),
        ("markdown", ["transformer_lm:tensor_flow"], ["second ", "part \\ud800"]),
    ]).replace("\\\\ud800", "\\ud800"), encoding="utf-8")   # a lone surrogate, as JSON may hold one
    got = read_answers(folder, LM)
    assert got.texts == {"tensor_flow": "first part\n\nsecond part \\ud800", "reads_history": ""}
    assert rendered(got) == [
        "work.ipynb, cell 4: the tag `transformer_lm:reads_history` is on a code cell; write the answer in a "
        "Markdown cell",
        "work.ipynb, cell 5: the tag `transformer_lm:tensorflow` names no question of transformer_lm (its "
        "questions: tensor_flow, reads_history)"]
    # answers.md and the notebook both hold text: the file's comes first, nothing is lost
    (folder / "transformer_lm").mkdir()
    (folder / "transformer_lm" / ANSWERS_FILE).write_text("## tensor_flow\nfrom the file\n", encoding="utf-8")
    assert read_answers(folder, LM).texts["tensor_flow"] == "from the file\n\nfirst part\n\nsecond part \\ud800"


def test_a_notebook_over_the_cap_is_refused_and_said(tmp_path, monkeypatch):
    """The notebook is read through grader/grading/notebooks.py's capped reader, its own exercise's refusal said."""
    from grader.grading import notebooks

    folder = tmp_path / "sub"
    (folder / "transformer_lm").mkdir(parents=True)
    data = notebook([("markdown", ["transformer_lm:tensor_flow"], "x")])
    assert len(data) > 100
    (folder / "transformer_lm" / "transformer_lm.ipynb").write_text(data, encoding="utf-8")
    assert read_answers(folder, LM).texts["tensor_flow"] == "x"   # the positive control
    monkeypatch.setattr(notebooks, "MAX_NOTEBOOK_BYTES", 100)
    got = read_answers(folder, LM)
    assert got.texts["tensor_flow"] == ""
    [said] = rendered(got)   # the reader reads one byte past the cap, and says the size it read
    assert said.startswith("transformer_lm/transformer_lm.ipynb is ") and said.endswith(
        " bytes; a notebook may be at most 100")


# --- Carried with the submission: report.json, report.html, scorecard.md -------------------------------------------

HOSTILE_ANSWER = "<script>alert(1)</script>\n=1+1\n[click](javascript:alert(2))\n<img src=x onerror=alert(3)>"


def graded_with_answers(tmp_path: Path):
    """A report of transformer_lm (its criteria the grader's error: no judge runs here) built as a grading builds
    it, from the answers read in the submission: a hostile answer in answers.md, a lone surrogate in a notebook."""
    from grader.grading.pipeline import build_report, unavailable_outcomes, written_answers

    folder = written(tmp_path, "## tensor_flow\n" + HOSTILE_ANSWER + "\n")
    (folder / "work.ipynb").write_text(notebook([("markdown", ["transformer_lm:reads_history"], "p or q \\ud800")])
                                       .replace("\\\\ud800", "\\ud800"), encoding="utf-8")
    answers = written_answers(folder, [LM])
    outcomes = unavailable_outcomes(COURSE, [LM], RuntimeError("no judge in this test"))
    return build_report(COURSE, "s", [LM], outcomes, {}, {"level": "none", "layers": {}, "note": ""},
                        "2026-01-01T00:00:00+00:00", 1.0, answers)


def test_answers_are_carried_in_report_json_as_text_awaiting_review(tmp_path):
    import jsonschema

    from grader.report.build import stored_report
    from grader.report.model import SCHEMA_PATH

    report = graded_with_answers(tmp_path)
    data = json.loads(report.to_json())
    jsonschema.validate(data, json.loads(SCHEMA_PATH.read_text(encoding="utf-8")))
    [exercise] = data["exercises"]
    assert exercise["answers"] == [
        {"id": "tensor_flow", "prompt": LM.questions[0].prompt, "text": HOSTILE_ANSWER, "points": 0.0,
         "max_points": 3.0, "status": "awaiting_review"},
        {"id": "reads_history", "prompt": LM.questions[1].prompt, "text": "p or q \\ud800", "points": 0.0,
         "max_points": 3.0, "status": "awaiting_review"}]
    # the score is the criteria's alone this round: the answers wait for a reviewer
    assert data["score"] == 0 and data["max_score"] == sum(LM.points.values())
    assert stored_report(data).to_json() == report.to_json()   # read back as written
    # a report written before answers were carried still reads, with none
    older = {**data, "schema_version": "3.1",
             "exercises": [{k: v for k, v in exercise.items() if k != "answers"}]}
    again = stored_report(older)
    assert again.schema_version == "3.3" and again.exercises[0].answers == []


def test_an_answer_is_text_in_report_html_and_scorecard_md(tmp_path):
    from grader.render.templated import render_html, render_markdown

    report = graded_with_answers(tmp_path)
    for lang, awaiting in (("en", "awaiting review"), ("zh", "待批阅")):
        html = render_html(report, ROOT / "templates", lang)
        assert "<script>alert" not in html and "<img src=x" not in html and 'href="javascript' not in html
        assert "&lt;script&gt;alert(1)&lt;/script&gt;\n=1+1\n[click](javascript:alert(2))" in html
        assert "p or q \\ud800" in html and awaiting in html
        card = render_markdown(report, ROOT / "templates", lang)
        row = next(line for line in card.splitlines() if "tensor" in line and awaiting in line)
        assert "<script>" not in card and "&lt;script&gt;alert(1)&lt;/script&gt;\\\\n=1+1\\\\n\\[click\\]" in row
        assert row.count("|") - row.count("\\|") == 6   # one table row: the answer's newlines cannot end it


def test_an_answer_written_changes_the_submissions_content_hash_and_the_template_does_not(tmp_path):
    """A batch resumes a submission whose hash it holds: an answer changed alone must be graded again (its text is
    in the report), while a submission with no answer keeps the hash it had before answers were read."""
    import shutil

    from grader.batch.gradebook import content_hash

    folder = tmp_path / "sub"
    shutil.copytree(ROOT / "examples" / "submissions" / "sample", folder)
    for stray in folder.glob("*/answers.md"):
        stray.unlink()
    before = content_hash(COURSE, folder)
    (folder / "heads" / ANSWERS_FILE).write_text(answers_template(COURSE.exercise("heads")), encoding="utf-8")
    assert content_hash(COURSE, folder) == before
    (folder / "heads" / ANSWERS_FILE).write_text("## tensor_flow\n[B, T, C] -> [B, H, T, D]\n", encoding="utf-8")
    answered = content_hash(COURSE, folder)
    assert answered != before
    (folder / "heads" / ANSWERS_FILE).write_text("## tensor_flow\n[B, T, C] -> [B, T, H, D]\n", encoding="utf-8")
    assert content_hash(COURSE, folder) not in (before, answered)


def test_answers_travel_with_a_submission_fetched_from_github_or_sent_to_a_cluster_worker(tmp_path):
    """The two places that copy a submission's files from elsewhere take answers.md beside the exercise's file."""
    from test_notebooks import _Tree

    from grader.batch.cluster import rebuild_submission, submission_files
    from grader.classroom.github import fetch_exercises

    github = _Tree({"exercises/heads/heads.py": b"x = 1\n", "exercises/heads/answers.md": b"## tensor_flow\nsplit\n",
                    "exercises/heads/notes.md": b"not taken"})
    fetched = tmp_path / "fetched"
    fetch_exercises(github, "org", "repo", "root", COURSE, fetched)
    assert sorted(p.relative_to(fetched).as_posix() for p in fetched.rglob("*") if p.is_file()) == [
        "heads/answers.md", "heads/heads.py"]
    rebuilt = tmp_path / "rebuilt"
    rebuild_submission(COURSE, submission_files(COURSE, fetched), rebuilt)
    assert read_answers(rebuilt, COURSE.exercise("heads")).texts == {"tensor_flow": "split"}
