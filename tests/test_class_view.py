"""class.html says why, not only who: a student table that fits 1280 px and 400 px, "not attempted" apart from an
attempted 0, the reason on every row without a verdict, identical submissions flagged, a "needs help" list (lowest
first, with what each has not started), and under each criterion failed most often the students who failed it,
linked to that criterion in their report. A batch resumed with --lang zh speaks Chinese everywhere: every student's
report is written again from its report.json, with no grading.

The first half reads a gradebook written by hand (no grading); the second grades, once for the module, a class like
the one an instructor meets (tests/sample_class.py) and looks at its pages in Chromium."""

from __future__ import annotations

import html.parser
import re
import shutil
import sqlite3
import struct
import urllib.parse
from pathlib import Path

import pytest

from browser import dump_dom, parse_dom, screenshot, spilling, text_of, with_class
from conftest import ROOT
from grader.course import load_course
from grader.batch.gradebook import GRADER_ERROR, NOT_JUDGED, UNREADABLE, Gradebook, class_summary
from grader.judge.session import criteria_of
from grader.render.labels import CLASS_LABELS
from grader.render.templated import render_class
from grader.batch.roster import Student
from sample_class import BROKEN_ZIP, IDENTICAL, build_class

COURSE = load_course(ROOT)
LANGS = ("en", "zh")


# --- A gradebook written by hand -------------------------------------------------------------------------------

def said(en: str) -> dict:
    return {"en": en, "zh": f"中文：{en}"}


def store(book: Gradebook, name: str, status: str = "graded", failed=(), skipped=(), chash: str | None = None,
          message: dict | None = None, key: str = "key") -> None:
    """A submission whose criteria all pass but those `failed` names (0 points) and the exercises `skipped`
    (not attempted)."""
    rows = []
    for ex in COURSE.exercises:
        for meta in criteria_of(ex.id):
            st = "not_attempted" if ex.id in skipped else "failed" if meta.id in failed else "passed"
            rows.append({"exercise": ex.id, "criterion": meta.id, "kind": meta.kind, "status": st,
                         "points": ex.points[meta.id] if st == "passed" else 0.0, "max_points": ex.points[meta.id],
                         "message": said(f"{name} {meta.id} {st}")})
    if status in (UNREADABLE, GRADER_ERROR):
        rows = [{**r, "status": "error", "points": 0.0} for r in rows]
    score, max_score = sum(r["points"] for r in rows), sum(r["max_points"] for r in rows)
    book.store(name, chash or f"hash-{name}", key, {
        "score": score, "max_score": max_score, "percent": round(100 * score / max_score, 2), "status": status,
        "message": message or said("m"), "graded_at": "t",
        "report_dir": None if status == UNREADABLE else f"/out/students/{name}"}, rows)


IDS = [ex.id for ex in COURSE.exercises]
HEADS = [m.id for m in criteria_of("heads")]


@pytest.fixture
def summary(tmp_path):
    book = Gradebook(tmp_path / "gradebook.sqlite")
    store(book, "ann")                                                               # full marks
    store(book, "bo", failed=HEADS, skipped=IDS[6:])                                 # heads tried for 0; 6 not begun
    store(book, "cy", failed=HEADS[:1], chash="same")
    store(book, "di", failed=HEADS[:1], chash="same")                                # cy's files, byte for byte
    store(book, "ed", skipped=IDS)                                                   # nothing attempted
    store(book, "fay.zip", status=UNREADABLE, message=said("fay.zip could not be unpacked: BadZipFile"))
    store(book, "gus", status=GRADER_ERROR, message=said("the grader failed on heads"))
    store(book, "hy", skipped=IDS, chash="same-empty")
    roster = [Student(n, n.capitalize(), "") for n in ("ann", "bo", "cy", "di", "ed", "fay", "gus", "hy", "ivy")]
    yield class_summary(COURSE, book, "key", roster)
    book.close()


def line(summary, name: str):
    return next(s for s in summary.students if s.submission == name or s.student.startswith(name.capitalize()))


def test_not_attempted_is_not_an_attempted_zero(summary):
    bo = line(summary, "bo")
    states = {c.exercise: c.state for c in bo.cells}
    assert states["heads"] == "failed" and bo.cells[IDS.index("heads")].points == 0   # tried, no point
    assert [ex for ex, state in states.items() if state == "not_attempted"] == IDS[6:]
    assert {states[ex] for ex in IDS[:6] if ex != "heads"} == {"passed"}
    assert bo.cells[0].link == "students/bo/report.html#embedding"


def test_every_row_without_a_verdict_says_why(summary):
    reasons = {s.standing: s.reason for s in summary.students if s.reason}
    assert set(reasons) == set(NOT_JUDGED) - {"killed_workers"}
    assert reasons["unreadable"] == said("fay.zip could not be unpacked: BadZipFile")   # the gradebook's words
    assert reasons["grader_error"] == said("the grader failed on heads")
    assert "unchanged stub" in reasons["empty"]["en"] and "模板" in reasons["empty"]["zh"]
    assert reasons["missing"] == {"en": "no submission", "zh": "没有提交"}
    assert all(s.reason is None for s in summary.students if s.standing not in NOT_JUDGED)


def test_identical_files_are_flagged_and_only_with_a_verdict(summary):
    """cy and di hand in the same files; ed and hy too, but no files at all (the stubs) is nobody's copy."""
    flags = {s.submission: s.flags for s in summary.students if s.flags}
    assert set(flags) == {"cy", "di"}
    assert [(f.kind, f.others) for f in flags["cy"]] == [("identical", [("Di (di)", line(summary, "di").anchor)])]
    anchors = [s.anchor for s in summary.students]
    assert len(set(anchors)) == len(anchors) and all(re.fullmatch(r"student-[0-9a-f]{12}", a) for a in anchors)


def test_who_needs_help_comes_lowest_first_with_what_they_have_not_started(summary):
    order = [(s.shown, len(s.not_started)) for s in summary.needs_help]
    # at 0%, in the class's order, each with every exercise not started: the empty folders, the unreadable zip, the
    # missing student; then bo (all from the seventh on not started), cy and di. The grader error is the grader's to
    # finish, not listed; ann has full marks.
    every, bo = len(IDS), len(IDS[6:])
    assert order == [("Ed (ed)", every), ("Fay (fay)", every), ("Hy (hy)", every), ("Ivy (ivy)", every),
                     ("Bo (bo)", bo), ("Cy (cy)", 0), ("Di (di)", 0)]
    assert [c.exercise for c in line(summary, "bo").not_started] == IDS[6:]
    assert not any(s.standing in ("complete", "grader_error") for s in summary.needs_help)


def test_each_criterion_lists_who_failed_it_linked_to_its_row(summary):
    split = next(r for r in summary.most_failed if r.criterion == HEADS[0])
    assert split.failed == 3 and [f.student for f in split.failed_by] == ["Bo (bo)", "Cy (cy)", "Di (di)"]
    assert split.failed_by[0].link == f"students/bo/report.html#heads--{HEADS[0]}"
    assert split.failed_by[0].message == said(f"bo {HEADS[0]} failed")


@pytest.mark.parametrize("lang", LANGS)
def test_the_page_lays_out_what_the_summary_says(summary, lang):
    words = CLASS_LABELS[lang]
    dom = parse_dom(render_class(summary, COURSE, ROOT / "templates", lang))
    assert text_of(next(dom.iter("title"))) == f"{COURSE.name_in(lang)} · {words['class_report']}"
    rows = {r.get("data-standing") + ":" + text_of(r).split()[0]: r for r in with_class(dom, "tr", "student")}
    for s in summary.students:
        row = next(r for r in with_class(dom, "tr", "student") if r.get("id") == s.anchor)
        reason = with_class(row, "td", "reason")
        cells = with_class(row, "td", "cell")
        if s.reason:
            assert len(reason) == 1 and text_of(reason[0]) == s.reason[lang] and not cells
        else:
            assert not reason and [c.get("data-exercise") for c in cells] == IDS
            for c, cell in zip(cells, s.cells, strict=True):
                assert cell.state in c.get("class").split()
                assert text_of(c) == ("–" if cell.state == "not_attempted" else f"{cell.points:g}")
    assert rows, "the table lists the students"
    bo = next(r for r in with_class(dom, "tr", "student") if r.get("id") == line(summary, "bo").anchor)
    assert "failed" in with_class(bo, "td", "cell")[IDS.index("heads")].get("class").split()
    cy = next(r for r in with_class(dom, "tr", "student") if r.get("id") == line(summary, "cy").anchor)
    flag = with_class(cy, "span", "identical")[0]
    assert words["identical"] in text_of(flag) and flag.find("a").get("href") == "#" + line(summary, "di").anchor
    help_items = [li for li in dom.iter("li") if li.get("data-needs-help")]
    assert [li.get("data-row") for li in help_items] == [s.anchor for s in summary.needs_help]
    bo_help = next(li for li in help_items if li.get("data-row") == line(summary, "bo").anchor)
    assert [a.get("href") for a in bo_help.iter("a")][1:] == [f"students/bo/report.html#{ex}" for ex in IDS[6:]]


def test_writing_reports_again_skips_one_it_cannot_read_and_goes_on(tmp_path):
    """A report.json that is no report costs its student's pages nothing (they stay as they were, to be tried
    again) and the others' nothing at all."""
    from hostile_report import hostile_report

    from grader.batch.run import RENDERED_LANG, render_students
    from grader.batch.gradebook import grader_key

    book = Gradebook(tmp_path / "gradebook.sqlite")
    for name in ("ann", "bo"):
        store(book, name, key=grader_key(COURSE))
        (tmp_path / "students" / name).mkdir(parents=True)
    book.close()
    (tmp_path / "students" / "ann" / "report.json").write_text(hostile_report().to_json(), encoding="utf-8")
    (tmp_path / "students" / "bo" / "report.json").write_text("{", encoding="utf-8")
    (tmp_path / "students" / "bo" / "report.html").write_text("as it was", encoding="utf-8")
    assert render_students(COURSE, tmp_path, "zh") == 1
    assert '<html lang="zh-CN">' in (tmp_path / "students" / "ann" / "report.html").read_text(encoding="utf-8")
    assert (tmp_path / "students" / "ann" / RENDERED_LANG).read_text() == "zh\n"
    assert (tmp_path / "students" / "bo" / "report.html").read_text(encoding="utf-8") == "as it was"
    assert not (tmp_path / "students" / "bo" / RENDERED_LANG).exists()
    assert render_students(COURSE, tmp_path, "zh") == 0 and render_students(COURSE, tmp_path, "en") == 1



def test_a_report_this_run_wrote_is_not_read_back_for_its_grade(tmp_path):
    """The reports a batch wrote itself hold no grade and its language: publishing reads them back only when the
    gradebook gives them a grade. The positive control: one not written by this run, holding a grade the gradebook
    no longer gives, is read and written again."""
    import json

    from hostile_report import hostile_report

    from grader.batch.run import RENDERED_LANG, write_student_pages
    from grader.batch.gradebook import grader_key

    book = Gradebook(tmp_path / "gradebook.sqlite")
    store(book, "ann", key=grader_key(COURSE))
    book.close()
    folder = tmp_path / "students" / "ann"
    folder.mkdir(parents=True)
    data = json.loads(hostile_report().to_json())
    data["grade"] = {"final": 0.0, "percent": 0.0}   # a grade the gradebook does not give
    (folder / "report.json").write_text(json.dumps(data), encoding="utf-8")
    (folder / RENDERED_LANG).write_text("en\n", encoding="utf-8")
    assert write_student_pages(COURSE, tmp_path, "en", written=frozenset({"ann"})) == (0, 0)
    assert "grade" in json.loads((folder / "report.json").read_text(encoding="utf-8"))
    assert write_student_pages(COURSE, tmp_path, "en") == (0, 1)
    assert "grade" not in json.loads((folder / "report.json").read_text(encoding="utf-8"))


# --- A real class, graded once ---------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """`grader batch --roster` of the class in English, as an instructor first runs it."""
    from conftest import run_grader

    folder = tmp_path_factory.mktemp("class-view")
    room, roster = build_class(COURSE, folder)
    out = folder / "out"
    done = run_grader("batch", str(room), "--out", str(out), "--jobs", "2", "--sandbox", "basic",
                      "--roster", str(roster), "--excel", timeout=1800)
    assert done.returncode == 0, done.stderr[-3000:]
    return out, done


@pytest.fixture(scope="module")
def resumed(graded, tmp_path_factory):
    """The same gradebook (a copy), the batch started again with --lang zh: nothing is graded, the grading engine
    is never even built, and every student's report is written again in Chinese."""
    import contextlib
    import io

    import grader.batch.run
    from grader.cli import main

    out = tmp_path_factory.mktemp("resumed") / "out"
    shutil.copytree(graded[0], out, symlinks=True)
    room = graded[0].parent / "class"
    before = {p.relative_to(out): p.read_bytes() for p in (out / "students").rglob("report.json")}

    def no_grading(*args, **kwargs):
        raise AssertionError("a resumed batch with nothing new graded something")

    stdout, stderr = io.StringIO(), io.StringIO()
    original, grader.batch.run._engine = grader.batch.run._engine, no_grading
    try:
        with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
            status = main(["batch", str(room), "--out", str(out), "--jobs", "2", "--sandbox", "basic",
                           "--roster", str(graded[0].parent / "roster.csv"), "--lang", "zh"])
    finally:
        grader.batch.run._engine = original
    assert status == 0, stderr.getvalue()[-3000:]
    return out, stdout.getvalue(), stderr.getvalue(), before


REPORTED = ["sample", "sol_ution", "stubs", "li_si.zip", "张三"]   # the entries that were graded: each has a report


@pytest.mark.slow
def test_the_class_is_graded_as_its_entries_say(graded):
    out = graded[0]
    db = sqlite3.connect(out / "gradebook.sqlite")
    statuses = dict(db.execute("SELECT submission, status FROM submissions"))
    assert set(statuses) == {*REPORTED, BROKEN_ZIP}
    assert statuses[BROKEN_ZIP] == UNREADABLE
    assert sorted(p.parent.name for p in (out / "students").glob("*/report.json")) == sorted(REPORTED)
    assert all((out / "students" / name / ".lang").read_text().strip() == "en" for name in REPORTED)


@pytest.mark.slow
def test_resuming_with_lang_zh_writes_every_report_again_without_grading(graded, resumed):
    out, stdout, stderr, before = resumed
    # no grading: the engine was never built (the fixture), and every report.json is the one graded in English
    assert {p.relative_to(out): p.read_bytes() for p in (out / "students").rglob("report.json")} == before
    assert "共 6 份提交：本次评分 0 份，6 份已在成绩册中" in stdout
    assert "已按所选语言根据 report.json 重新生成 5 名学生的报告（未重新评分）" in stdout
    assert "[6/6]" in stderr and not re.search(r"ETA|grading:|unreadable|submissions", stderr)
    for name in REPORTED:
        folder = out / "students" / name
        page, card = (folder / "report.html").read_text(), (folder / "scorecard.md").read_text()
        english = (graded[0] / "students" / name / "report.html").read_text()
        assert '<html lang="zh-CN">' in page and '<html lang="en">' in english, name
        assert page.startswith("<!DOCTYPE html>") and "评分报告" in page and "Grading report" not in page, name
        assert card.startswith("### 评分报告") and "Where to look" not in card, name
        assert (folder / ".lang").read_text().strip() == "zh"
    title = re.search(r"<title>(.*)</title>", (out / "class.html").read_text()).group(1)
    assert title == "亲手搭建仅解码器 Transformer · 班级报告"
    assert re.search(r"<title>(.*)</title>", (graded[0] / "class.html").read_text()).group(1) == \
        "Build a decoder-only Transformer · Class report"


@pytest.mark.slow
def test_a_report_in_the_language_asked_is_not_written_again(resumed):
    from grader.batch.run import render_students

    out = resumed[0]
    stamps = {p: p.stat().st_mtime_ns for p in (out / "students").rglob("report.html")}
    assert render_students(COURSE, out, "zh") == 0
    assert {p: p.stat().st_mtime_ns for p in stamps} == stamps


def pages(graded, resumed) -> dict[str, Path]:
    return {"en": graded[0] / "class.html", "zh": resumed[0] / "class.html"}


@pytest.mark.slow
@pytest.mark.parametrize("lang", LANGS)
@pytest.mark.parametrize("width", [1280, 400])
def test_nothing_on_the_class_page_scrolls_sideways(graded, resumed, tmp_path, lang, width):
    """At 1280 px every column of the student table (11 exercises) is in the window, and at 400 px each student is
    a block: no box reaches past the window and no cell's content spills out of it."""
    page = tmp_path / "class.html"
    page.write_text(pages(graded, resumed)[lang].read_text(encoding="utf-8"), encoding="utf-8")
    assert spilling(page, tmp_path / "profile", width) == []


@pytest.mark.slow
@pytest.mark.parametrize("lang", LANGS)
def test_every_row_without_a_verdict_says_why_in_the_page(graded, resumed, tmp_path, lang):
    dom, console = dump_dom(pages(graded, resumed)[lang], tmp_path / "profile")
    assert console == []
    rows = with_class(parse_dom(dom), "tr", "student")
    assert len(rows) == 7   # six entries and the roster's student with none
    silent = [r.get("data-standing") for r in rows if r.get("data-standing") in NOT_JUDGED
              and not any(text_of(td).strip() for td in with_class(r, "td", "reason"))]
    assert silent == []
    standings = sorted(r.get("data-standing") for r in rows if with_class(r, "td", "reason"))
    assert standings == ["empty", "missing", "unreadable"]
    broken = next(r for r in rows if r.get("data-standing") == "unreadable")
    assert BROKEN_ZIP in text_of(with_class(broken, "td", "reason")[0])
    assert ("could not be unpacked" if lang == "en" else "无法解压") in text_of(broken)


@pytest.mark.slow
@pytest.mark.parametrize("lang", LANGS)
def test_the_most_failed_criteria_link_each_student_who_failed_them(graded, resumed, tmp_path, lang):
    """Each criterion failed most often lists its students, each linked to that criterion's row in their own
    report.html (an anchor that exists); the sample and the two identical submissions fail the causal mask."""
    out = pages(graded, resumed)[lang].parent
    dom = parse_dom(dump_dom(out / "class.html", tmp_path / "profile")[0])
    items = [li for li in dom.iter("li") if li.get("data-criterion")]
    assert items
    for li in items:
        exercise, criterion = li.get("data-criterion").split("/")
        links = [a for div in with_class(li, "div", "failed-by") for a in div.iter("a")]
        assert links, li.get("data-criterion")
        assert len(links) == int(li.get("data-failed")) > 0
        for a in links:
            assert a.get("href").endswith(f"/report.html#{exercise}--{criterion}")
    causal = next(li for li in items if li.get("data-criterion") == "masks/causal_mask_direction")
    assert sorted(text_of(a) for a in causal.iter("a")) == sorted(["Sam Ple (2024001)", "Li Si (2024004)",
                                                                   "张三 (2024006)"])


class _Ids(html.parser.HTMLParser):
    def __init__(self, text: str):
        super().__init__()
        self.ids: set[str] = set()
        self.hrefs: list[str] = []
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if attrs.get("id"):
            self.ids.add(attrs["id"])
        if tag == "a" and attrs.get("href"):
            self.hrefs.append(attrs["href"])


@pytest.mark.slow
@pytest.mark.parametrize("lang", LANGS)
def test_every_link_of_the_class_page_reaches_an_anchor_that_exists(graded, resumed, lang):
    out = pages(graded, resumed)[lang].parent
    page = _Ids((out / "class.html").read_text(encoding="utf-8"))
    reached = 0
    for href in page.hrefs:
        path, _, fragment = href.partition("#")
        target = out / urllib.parse.unquote(path) if path else out / "class.html"
        assert target.is_file(), href
        ids = page.ids if not path else _Ids(target.read_text(encoding="utf-8")).ids
        assert not fragment or urllib.parse.unquote(fragment) in ids, href
        reached += bool(path and fragment)
    assert reached > 20   # cells, the "needs help" list and the students under each criterion


@pytest.mark.slow
def test_identical_submissions_and_who_needs_help(graded):
    dom = parse_dom((graded[0] / "class.html").read_text(encoding="utf-8"))
    rows = {text_of(r).split()[0]: r for r in with_class(dom, "tr", "student")}
    flagged = {text_of(with_class(r, "a", "submission")[0]) for r in rows.values()
               if with_class(r, "span", "identical")}
    assert flagged == set(IDENTICAL)
    order = [li.get("data-needs-help") for li in dom.iter("li") if li.get("data-needs-help")]
    # lowest first: stubs (empty), the broken zip, Wang Wu (missing), then li_si and 张三; then the sample
    assert order == ["empty", "unreadable", "missing", "partial", "partial", "partial"]
    zhang = next(r for name, r in rows.items() if name == "张三")
    states = {td.get("data-exercise"): td.get("class").split()[1] for td in with_class(zhang, "td", "cell")}
    assert (states["embedding"], states["heads"], states["masks"], states["rope"]) == (
        "passed", "failed", "partial", "not_attempted")


def png_size(png: Path) -> tuple[int, int]:
    header = png.read_bytes()[:24]
    assert header[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", header[16:24])


@pytest.mark.slow
@pytest.mark.parametrize("lang", LANGS)
@pytest.mark.parametrize("width, height", [(1280, 1300), (400, 2000)])
def test_screenshots_of_the_class_page(graded, resumed, tmp_path, lang, width, height):
    png = screenshot(pages(graded, resumed)[lang], tmp_path / f"class-{lang}-{width}.png", tmp_path / "profile",
                     width, height)
    assert png_size(png) == (width, height)
    empty = tmp_path / "empty.html"
    empty.write_text("<!DOCTYPE html><html><body></body></html>")
    blank = screenshot(empty, tmp_path / "empty.png", tmp_path / "profile", width, height)
    assert png.stat().st_size > 4 * blank.stat().st_size   # the table, its colours and text, not an empty page


@pytest.mark.slow
def test_the_grades_csv_is_the_same_whatever_the_language(graded, resumed):
    """The resumed run rewrote grades.csv from the same gradebook: the grades did not move; only the `reason` column,
    which says why a row has no grade, speaks the language asked."""
    import csv
    import io

    first = (graded[0] / "grades.csv").read_text(encoding="utf-8")
    assert first.startswith("\ufeff")   # --excel the first time, not the second
    english = list(csv.DictReader(io.StringIO(first[1:])))
    chinese = list(csv.DictReader(io.StringIO((resumed[0] / "grades.csv").read_text(encoding="utf-8"))))
    assert [{k: v for k, v in r.items() if k != "reason"} for r in chinese] == \
        [{k: v for k, v in r.items() if k != "reason"} for r in english]
    reasons = [(r["reason"], c["reason"]) for r, c in zip(english, chinese, strict=True) if r["reason"]]
    assert len(reasons) == 3 and all(en != zh and re.search("[\u4e00-\u9fff]", zh) for en, zh in reasons)
    assert len(first.splitlines()) == 1 + 7   # the header, and the seven students of the roster
