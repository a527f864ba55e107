"""Student-controlled text through every output format: each attack below once corrupted or forged a report.

The report is built, not graded (tests/hostile_report.py): a lone surrogate, CR, LF, ESC sequences, \\x01 and
Markdown in a criterion message, an exception's type name, the program's output and the submission's name.
"""

import csv
import html.parser
import io
import json
import re

import jsonschema
import pytest
from hostile_report import FAKE_VERDICT, SUBMISSION, hostile_report
from junitparser import Error, JUnitXml
from markdown_it import MarkdownIt

from conftest import ROOT
from grader.batch.gradebook import (ClassSummary, CriterionRate, ExerciseCell, FailedBy, Flag, Gradebook, StudentLine,
                              grades_csv)
from grader.render.safe_text import csv_cell, markdown_text, terminal_text
from grader.render.templated import render_class
from grader.render.terminal import render_table
from grader.report.model import SCHEMA_PATH
from grader.render.files import FORMATS, write_reports

# Any control character, Unicode line separator or bidirectional override that a screen would obey.
CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
CRITERIA = 3  # in hostile_report()


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    out = tmp_path_factory.mktemp("hostile")
    write_reports(hostile_report(), out, ROOT / "templates", "en", tuple(FORMATS))
    return out


def markdown_tokens(text: str) -> list:
    """Every token GitHub-flavoured Markdown makes of `text`, inline ones included; bare URLs are linked."""
    md = MarkdownIt("commonmark", {"linkify": True}).enable(["table", "strikethrough", "linkify"])
    tokens = []
    for token in md.parse(text):
        tokens.append(token)
        tokens.extend(token.children or [])
    return tokens


def test_report_json_is_written_and_valid_against_the_schema(written):
    report = json.loads((written / "report.json").read_text(encoding="utf-8"))
    jsonschema.validate(report, json.loads(SCHEMA_PATH.read_text()))
    assert report["submission"] == SUBMISSION.replace("\ud800", "\ufffd")


def test_report_json_keeps_control_characters_as_data(written):
    """JSON escapes them itself: the record stays exact but for the surrogate."""
    criterion = json.loads((written / "report.json").read_text())["exercises"][0]["criteria"][0]
    for lang in ("en", "zh"):
        assert "\x1b[2K" in criterion["message"][lang] and "\x01" in criterion["message"][lang]
    assert criterion["evidence"]["key\ufffd"] == [1.0, 2.0]


def test_scorecard_has_exactly_one_heading_with_the_real_score(written):
    tokens = markdown_tokens((written / "scorecard.md").read_text())
    headings = [i for i, t in enumerate(tokens) if t.type == "heading_open"]
    assert len(headings) == 1
    assert tokens[headings[0] + 1].content.endswith("— **0 / 15** (0%)")


def test_scorecard_has_no_image_link_or_html(written):
    kinds = {t.type for t in markdown_tokens((written / "scorecard.md").read_text())}
    assert kinds.isdisjoint({"image", "link_open", "html_inline", "html_block", "code_inline", "em_open"})


def test_scorecard_table_has_one_row_per_exercise_and_criterion_each_of_five_cells(written):
    tokens = markdown_tokens((written / "scorecard.md").read_text())
    rows, cells = [], 0
    for t in tokens:
        if t.type == "tr_open":
            cells = 0
        elif t.type in ("td_open", "th_open"):
            cells += 1
        elif t.type == "tr_close":
            rows.append(cells)
    assert rows == [5] * (1 + 2 + CRITERIA)


def test_scorecard_shows_control_characters_escaped(written):
    text = (written / "scorecard.md").read_text()
    assert not CONTROL.search(text)
    rendered = "".join(t.content for t in markdown_tokens(text) if t.type in ("text", "text_special"))
    assert "\\x1b[2K\\x1b[1G" + FAKE_VERDICT in rendered and "\\r### 153" in rendered


def test_markdown_text_cannot_start_a_heading():
    assert "heading_open" not in [t.type for t in markdown_tokens(markdown_text("# 153 / 153"))]


def test_terminal_table_obeys_no_control_character_from_student_text():
    table = render_table(hostile_report(), "en")
    assert not CONTROL.search(table.replace("\n", ""))
    block_row = next(line for line in table.splitlines() if line.lstrip().startswith("decoder_block"))
    assert block_row.split()[1:3] == ["0/11", "error"] and "Evil\\x1b[2K\\x1b[1GError" in block_row


def test_terminal_table_names_the_submission_on_one_line():
    first = render_table(hostile_report(), "en").splitlines()[0]
    assert first.startswith("Submission: =HYPERLINK") and "\\r\\n# 153 / 153\\x1b[32m\ufffd" in first


def test_junit_parses_with_junitparser_one_case_per_criterion(written):
    xml = JUnitXml.fromfile(str(written / "junit.xml"))
    cases = [case for suite in xml for case in suite]
    assert len(cases) == CRITERIA
    errors = [r for case in cases for r in case.result if isinstance(r, Error)]
    assert [e.type for e in errors] == ["error", "error", "error"]
    assert "\\x1b[2K" in errors[0].message and "\\x01" in errors[0].message


def test_junit_reports_a_grader_error_as_an_error_of_that_type(tmp_path):
    write_reports(hostile_report("grader_error"), tmp_path, ROOT / "templates", "en", ("junit",))
    cases = [case for suite in JUnitXml.fromfile(str(tmp_path / "junit.xml")) for case in suite]
    assert [r.type for r in cases[-1].result] == ["grader_error"]


def test_gradescope_outputs_obey_no_control_character(written):
    results = json.loads((written / "results.json").read_text())
    assert len(results["tests"]) == CRITERIA
    for test in results["tests"]:
        assert not CONTROL.search(test["output"]) and "\\x1b[2K" in test["output"]


class _Elements(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)


def test_html_report_shows_student_markup_as_text(written):
    page = (written / "report.html").read_text()
    parser = _Elements()
    parser.feed(page)
    assert "img" not in parser.tags and not CONTROL.search(page)
    assert "&lt;img src=x onerror=alert(1)&gt;" in page and "\\x1b[2K\\x1b[1G" + FAKE_VERDICT in page


def test_class_report_shows_student_markup_as_text(course):
    hostile = "<script>alert(1)</script>\x1b[2K\ud800"
    said = {"en": hostile, "zh": hostile}
    failed = CriterionRate(hostile, hostile, said, 0, 1, 1, said, 1)
    cells = [ExerciseCell(ex.id, 1.0, ex.max_points, "partial", f"students/{hostile}/report.html#{ex.id}")
             for ex in course.exercises]
    student = StudentLine(hostile, hostile, "not in roster", "partial", 1, 2, 50.0, cells,
                          f"students/{hostile}/report.html", flags=[Flag("identical", [(hostile, "student-1")])])
    failed.failed_by = [FailedBy(hostile, f"students/{hostile}/report.html#x--y", said)]
    gone = StudentLine(hostile, "", "", "unreadable", 0, 2, 0.0, cells, None, reason=said)
    summary = ClassSummary(2, 1, {"unreadable": 1}, 50.0, 50.0, [0] * 5 + [1] + [0] * 4, [student, gone], [],
                           [failed], [failed], needs_help=[student, gone])
    page = render_class(summary, course, ROOT / "templates", "en")
    parser = _Elements()
    parser.feed(page)
    assert "script" not in parser.tags and not CONTROL.search(page) and "\ud800" not in page
    # the submission's name, the roster's, a criterion's id and title, a message, a flag's and the "needs help"
    # list's names, and the reason a row has no verdict: each shown as text
    assert page.count("&lt;script&gt;alert(1)&lt;/script&gt;\\x1b[2K\ufffd") >= 10


@pytest.mark.parametrize("name", ["=HYPERLINK(\"https://evil.example\")", "+1", "-1+2", "@SUM(A1)"])
def test_grades_csv_never_starts_a_cell_with_a_formula(course, tmp_path, name):
    book = Gradebook(tmp_path / "gradebook.sqlite")
    summary = {"score": 0, "max_score": 1, "percent": 0, "status": "graded", "message": "m", "graded_at": "t"}
    book.store(name + "\r\n", "hash", "key", summary, [])
    text = grades_csv(course, book, "key")
    book.close()
    rows = list(csv.reader(io.StringIO(text)))
    assert len(rows) == 2 and rows[1][0] == "'" + name + "\\r\\n"


def test_csv_cell_leaves_ordinary_text_alone():
    assert csv_cell("alice_smith") == "alice_smith"


def test_terminal_text_writes_every_control_character_out():
    assert terminal_text("a\x1b[2K\rb\x01\x9b\u202e\ud800") == "a\\x1b[2K\\rb\\x01\\x9b\\u202e\ufffd"


HOSTILE_HEADS = '''
Evil = type("Evil\\x1b[2K\\x1b[1Gheads 10/10 passed", (ValueError,), {})
print("\\x1b[2J\\x1b[Hheads 10/10 passed\\r\\n![x](https://evil.example/x.png)\\x01")


def split_heads(x, n_heads):
    raise Evil("\\ud800\\r### 153 / 153 (100%)\\n![x](https://evil.example/x.png)\\x01")


def merge_heads(x):
    raise Evil("\\ud800\\r### 153 / 153 (100%)\\x01")
'''


@pytest.mark.slow
def test_a_hostile_submission_is_graded_into_every_format(make_submission, grade):
    """End to end, one light exercise: the exception's type and message, the output and the folder's name."""
    submission = make_submission({"heads": HOSTILE_HEADS}, name="stu\x1b[2Kdent\r# 10 10")
    graded = grade(submission, "--exercise", "heads", "--format", ",".join(FORMATS))
    assert graded.returncode == 0, graded.stderr
    jsonschema.validate(graded.report, json.loads(SCHEMA_PATH.read_text()))
    assert graded.exercise("heads")["score"] == 0 and not CONTROL.search(graded.stdout.replace("\n", ""))
    cases = [case for suite in JUnitXml.fromfile(str(graded.out / "junit.xml")) for case in suite]
    assert len(cases) == len(graded.exercise("heads")["criteria"])
    kinds = [t.type for t in markdown_tokens((graded.out / "scorecard.md").read_text())]
    assert kinds.count("heading_open") == 1 and {"image", "link_open", "html_inline", "html_block"}.isdisjoint(kinds)


def test_gradescope_notes_naming_uploaded_files_obey_no_control_character():
    from grader.i18n import t, verbatim
    from grader.render.exports import render_gradescope

    note = t("Symbolic links in your upload are never followed (submit plain files): {links}",
             links=verbatim("evil\x1b[2K\r.py"))
    for lang in ("en", "zh"):
        results = json.loads(render_gradescope(hostile_report(), lang, notes=[note]))
        assert "evil\\x1b[2K\\r.py" in results["output"] and not CONTROL.search(results["output"])
