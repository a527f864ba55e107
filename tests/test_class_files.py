"""What `grader batch` hands the instructor: class.html (a student table with links, each exercise, the criteria
failed most with their most common message, a distribution leaving out what has no verdict and counting it
apart), grades.csv ready for an LMS import (maxima in the headers, a roster, status words, --excel), and a
progress line with the submissions in flight and an ETA."""

import csv
import html.parser
import io
import json
import os
import subprocess
import sys

import pytest

from conftest import ROOT, course_copy
from grader.course import load_course
from grader.batch.gradebook import GRADER_ERROR, KILLED_WORKERS, UNREADABLE, Gradebook, class_summary, grades_csv
from grader.judge.session import criteria_of
from grader.batch.progress import BatchProgress, duration
from grader.batch.roster import AMBIGUOUS, RosterError, Student, match, read_roster

EXERCISES = ["heads", "masks"]   # light exercises the sample gets part of: complete, partial and empty all occur


@pytest.fixture(scope="module")
def course_dir(tmp_path_factory):
    return course_copy(tmp_path_factory.mktemp("course"), EXERCISES)


@pytest.fixture(scope="module")
def course(course_dir):
    return load_course(course_dir)


# --- The page and the CSV from a gradebook written by hand ------------------------------------------------------

def said(en: str) -> dict:
    return {"en": en, "zh": f"中文：{en}"}


def store(book: Gradebook, course, name: str, status: str = "graded", statuses: dict | None = None,
          messages: dict | None = None) -> None:
    """A submission whose criteria all pass but those `statuses` names (criterion id -> status), which score 0."""
    statuses, messages = statuses or {}, messages or {}
    rows = []
    for ex in course.exercises:
        for meta in criteria_of(ex.id):
            st = statuses.get(meta.id, "passed")
            rows.append({"exercise": ex.id, "criterion": meta.id, "kind": meta.kind, "status": st,
                         "points": ex.points[meta.id] if st == "passed" else 0.0, "max_points": ex.points[meta.id],
                         "message": messages.get(meta.id, said(f"{meta.id} {st}"))})
    if status in (UNREADABLE, GRADER_ERROR, KILLED_WORKERS):
        rows = [{**r, "status": "error", "points": 0.0} for r in rows]
    score, max_score = sum(r["points"] for r in rows), sum(r["max_points"] for r in rows)
    summary = {"score": score, "max_score": max_score, "percent": round(100 * score / max_score, 2),
               "status": status, "message": said("m"), "graded_at": "t",
               "report_dir": None if status == UNREADABLE else f"/out/students/{name}"}
    book.store(name, f"hash-{name}", "key", summary, rows)


EVERY_CRITERION = {m.id: "not_attempted" for ex in EXERCISES for m in criteria_of(ex)}


@pytest.fixture
def book(tmp_path, course):
    book = Gradebook(tmp_path / "gradebook.sqlite")
    store(book, course, "ann")                                                       # full marks
    store(book, course, "bo", statuses={"split_values": "failed", "causal_mask_direction": "failed"},
          messages={"split_values": said("head 1 holds the wrong columns")})
    store(book, course, "cy", statuses={"split_values": "failed", "round_trip": "error"},
          messages={"split_values": said("head 1 holds the wrong columns")})
    store(book, course, "di", statuses={"split_values": "crashed"}, messages={"split_values": said("it crashed")})
    store(book, course, "ed", statuses=EVERY_CRITERION)                              # an empty folder
    store(book, course, "fay", statuses={m.id: "not_attempted" for m in criteria_of("masks")})
    store(book, course, "gus.zip", status=UNREADABLE)
    store(book, course, "hal", status=GRADER_ERROR)
    store(book, course, "ivy", status=KILLED_WORKERS)
    yield book
    book.close()


def csv_table(text: str) -> list[dict]:
    return list(csv.DictReader(io.StringIO(text)))


def test_headers_carry_the_maxima(course, book):
    header = next(csv.reader(io.StringIO(grades_csv(course, book, "key"))))
    assert header == ["id", "name", "email", "submission", "status", "heads (10)", "masks (15)", "raw (25)", "penalty",
                      "total (25)", "percent", "late", "submitted_at", "reason", "roster", "content_hash"]


def test_status_words_say_what_each_submission_is(course, book):
    rows = {r["submission"]: r for r in csv_table(grades_csv(course, book, "key"))}
    assert {name: r["status"] for name, r in rows.items()} == {
        "ann": "complete", "bo": "partial", "cy": "partial", "di": "partial", "ed": "empty", "fay": "partial",
        "gus.zip": "unreadable", "hal": "grader error", "ivy": "killed workers"}
    assert rows["fay"]["heads (10)"] == "10" and rows["fay"]["masks (15)"] == "0" and rows["fay"]["total (25)"] == "10"
    assert rows["ann"]["id"] == "ann" and rows["ann"]["percent"] == "100"   # no roster: the id is the name


ROSTER = [Student("2024001", "Ann Lee", "ann@uni.edu"), Student("bo", "Bo Chen", "bchen@uni.edu"),
          Student("2024003", "Cy", "cy.w@uni.edu"), Student("2024004", "Missing Person", ""),
          Student("2024005", "Ed", "e1@uni.edu"), Student("2024006", "Ed", "e2@uni.edu")]


@pytest.mark.parametrize("submission, student, how", [
    ("2024001", "2024001", "id"), ("2024001.ZIP", "2024001", "id"), ("bo", "bo", "id"),
    ("ann@uni.edu", "2024001", "email"), ("ANN", "2024001", "email"), ("cy.w.zip", "2024003", "email"),
    ("ann_lee", "2024001", "name"), ("Ann Lee.zip", "2024001", "name"), ("missing-person", "2024004", "name"),
    ("ed", None, AMBIGUOUS), ("zoe", None, ""), ("", None, ""),
])
def test_roster_matching(submission, student, how):
    found, matched_by = match(submission, ROSTER)
    assert (found.id if found else None, matched_by) == (student, how)


def test_a_roster_lists_every_student_and_flags_the_rest(course, book):
    rows = csv_table(grades_csv(course, book, "key", ROSTER))
    listed = [(r["id"], r["submission"], r["status"], r["roster"]) for r in rows]
    assert listed[:6] == [("2024001", "ann", "complete", "email"), ("bo", "bo", "partial", "id"),
                          ("2024003", "cy", "partial", "name"), ("2024004", "", "missing", ""),
                          ("2024005", "", "missing", ""), ("2024006", "", "missing", "")]
    assert {r["submission"]: r["roster"] for r in rows[6:]} == {
        "di": "not in roster", "ed": AMBIGUOUS, "fay": "not in roster", "gus.zip": "not in roster",
        "hal": "not in roster", "ivy": "not in roster"}
    assert rows[0]["name"] == "Ann Lee" and rows[0]["email"] == "ann@uni.edu"
    # no submission: no grade, blank (an importer would record a 0), and the reason
    assert rows[3]["total (25)"] == "" and rows[3]["reason"] == "no submission" and all(r["id"] == "" for r in rows[6:])


def test_two_submissions_of_one_student_both_stay_and_say_so(course, book):
    store(book, course, "bo.zip")
    rows = [r for r in csv_table(grades_csv(course, book, "key", ROSTER)) if r["id"] == "bo"]
    assert [(r["submission"], r["roster"]) for r in rows] == [("bo", "id; one of 2 submissions"),
                                                              ("bo.zip", "id; one of 2 submissions")]


def test_roster_cells_are_never_formulas(course, book):
    rows = csv_table(grades_csv(course, book, "key", [Student("=1+1", "@SUM(A1)", "-x@uni.edu")]))
    assert (rows[0]["id"], rows[0]["name"], rows[0]["email"]) == ("'=1+1", "'@SUM(A1)", "'-x@uni.edu")


def test_a_roster_file_is_read_and_checked(tmp_path):
    roster = tmp_path / "roster.csv"
    roster.write_text("\ufeffEmail, ID ,Name,section\nzs@uni.edu,2024002,张三,A\n\n,2024003,,B\n", encoding="utf-8")
    assert read_roster(roster) == [Student("2024002", "张三", "zs@uni.edu"), Student("2024003", "", "")]
    for text, problem in [("name,email\nA,a@x\n", "must name the columns"), ("id\n1\n1\n", "listed twice"),
                          ("id,name\n,Ann\n", "line 2: no id")]:
        roster.write_text(text)
        with pytest.raises(RosterError, match=problem):
            read_roster(roster)


class Page(html.parser.HTMLParser):
    """The elements of class.html a test looks at: tags, and the text and attributes of those with a class."""

    def __init__(self, text: str):
        super().__init__()
        self.tags, self.open, self.found = [], [], []
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self.open.append({"tag": tag, **dict(attrs), "text": ""})

    def handle_endtag(self, tag):
        while self.open:
            element = self.open.pop()
            self.found.append(element)
            if self.open:
                self.open[-1]["text"] += element["text"]
            if element["tag"] == tag:
                break

    def handle_data(self, data):
        if self.open:
            self.open[-1]["text"] += data

    def all(self, tag: str, **attrs) -> list[dict]:
        """Elements of `tag` with these attributes (`class`: one of the element's classes)."""
        def has(e, k, v):
            return v in (e.get(k) or "").split() if k == "class" else e.get(k) == v
        return [e for e in self.found if e["tag"] == tag and all(has(e, k, v) for k, v in attrs.items())]


def page_of(course, book, lang: str, roster=None) -> Page:
    from grader.render.templated import render_class

    return Page(render_class(class_summary(course, book, "key", roster), course, ROOT / "templates", lang))


def test_the_distribution_leaves_out_and_counts_what_has_no_verdict(course, book):
    summary = class_summary(course, book, "key")
    assert summary.submissions == 9 and summary.counted == 5
    assert summary.left_out == {"empty": 1, "unreadable": 1, "grader_error": 1, "killed_workers": 1}
    page = page_of(course, book, "en")
    bins = [int(e["data-count"]) for e in page.all("rect", **{"class": "bin"})]
    # ann 100%, di 91.67%, bo 83.33%, cy 83.33%, fay 41.67%
    assert bins == [0, 0, 0, 0, 1, 0, 0, 0, 2, 2]
    left_out = {e["data-standing"]: e["text"].split()[-1] for e in page.all("li") if "data-standing" in e}
    assert left_out == {"empty": "1", "unreadable": "1", "grader_error": "1", "killed_workers": "1"}
    assert "Left out of the distribution" in next(e for e in page.found if e.get("class") == "note left-out")["text"]


def test_the_student_table_links_each_report(course, book):
    page = page_of(course, book, "en")
    rows = page.all("tr", **{"class": "student"})
    assert len(rows) == 9
    links = {e["text"]: e["href"] for e in page.all("a", **{"class": "submission"})}
    assert links["ann"] == "students/ann/report.html" and "gus.zip" not in links   # unreadable: no report
    standing = {e["text"].split()[0]: e["data-standing"] for e in rows}
    assert standing["ann"] == "complete" and standing["ed"] == "empty" and standing["hal"] == "grader_error"
    headers = [e["text"] for e in page.all("th")]
    assert headers[:2] == ["SubmissionStatus", "Total"] and "heads" in headers[2]


def test_the_most_failed_criteria_come_with_their_title_and_most_common_message(course, book):
    summary = class_summary(course, book, "key")
    first = summary.most_failed[0]
    assert (first.exercise, first.criterion, first.failed, first.total) == ("heads", "split_values", 3, 5)
    assert first.common_message == said("head 1 holds the wrong columns") and first.common_count == 2
    title = next(m.title for m in criteria_of("heads") if m.id == "split_values")
    for lang in ("en", "zh"):
        item = page_of(course, book, lang).all("li", **{"data-criterion": "heads/split_values"})[0]
        assert title[lang] in item["text"] and said("head 1 holds the wrong columns")[lang] in item["text"]


def test_each_exercise_has_its_mean_full_marks_and_not_attempted(course, book):
    heads, masks = class_summary(course, book, "key").exercises
    # over ann, bo, cy, di, fay: heads 10, 8, 6, 8, 10; masks 15, 13, 15, 15, 0 (fay left it)
    assert (heads.mean_points, heads.full_marks, heads.not_attempted) == (8.4, 2, 0)
    assert (masks.mean_points, masks.full_marks, masks.not_attempted) == (11.6, 3, 1)
    row = page_of(course, book, "zh").all("tr", **{"data-exercise": "masks"})[0]
    assert course.exercise("masks").title_zh in row["text"] and "11.6 / 15" in row["text"]


def test_the_page_speaks_the_language_asked_and_needs_no_network(course, book):
    zh = page_of(course, book, "zh", ROSTER)
    assert "学生" in zh.all("th")[0]["text"] and "缺交" in [e["text"] for e in zh.all("span")]
    assert "script" not in zh.tags and "link" not in zh.tags and "img" not in zh.tags
    style = zh.all("style")[0]["text"]
    assert all(font in style for font in ('"Noto Sans CJK SC"', '"Noto Sans SC"', '"PingFang SC"', '"Microsoft YaHei"'))
    missing = [e for e in zh.all("tr", **{"class": "student"}) if e["data-standing"] == "missing"]
    assert [e["text"].split()[0] for e in missing] == ["Missing", "Ed", "Ed"]


# --- A real batch: the sample, an empty folder, a bad zip, the solutions, a roster, --excel -------------------

@pytest.fixture(scope="module")
def batch(course, course_dir, tmp_path_factory):
    root = tmp_path_factory.mktemp("class-files")
    room = root / "class"
    for ex in course.exercises:
        (room / "2024003" / ex.id).mkdir(parents=True)
        (room / "2024003" / ex.id / ex.file).write_bytes(course.solution(ex).read_bytes())
        (room / "sample" / ex.id).mkdir(parents=True)
        (room / "sample" / ex.id / ex.file).write_bytes((ROOT / "examples" / "submissions" / "sample" / ex.id /
                                                          ex.file).read_bytes())
    (room / "empty").mkdir()
    (room / "bad.zip").write_bytes(b"PK\x03\x04 not a zip")
    (root / "roster.csv").write_text("id,name,email\n2024001,Sam Ple,sample@uni.edu\n2024002,张三,zs@uni.edu\n"
                                     "2024003,Sol Ution,sol@uni.edu\n", encoding="utf-8")
    out = root / "out"
    command = [sys.executable, "-m", "grader", "--course", str(course_dir), "batch", str(room), "--out", str(out),
               "--jobs", "2", "--sandbox", "basic", "--roster", str(root / "roster.csv"), "--lang", "zh"]
    first = subprocess.run([*command, "--excel"], capture_output=True, text=True, timeout=600)
    assert first.returncode == 0, first.stderr[-2000:]
    excel = (out / "grades.csv").read_bytes()
    again = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr[-2000:]
    return out, first, excel, again


@pytest.mark.slow
def test_excel_gets_a_bom_and_the_csv_module_reads_it_back(batch):
    out, _, excel, again = batch
    assert excel.startswith(b"\xef\xbb\xbf") and not (out / "grades.csv").read_bytes().startswith(b"\xef\xbb\xbf")
    assert excel[3:] == (out / "grades.csv").read_bytes(), "the same grades, with or without --excel"
    assert "共 4 份提交：本次评分 0 份，4 份已在成绩册中" in again.stdout   # the batch ran with --lang zh
    rows = csv_table(excel.decode("utf-8-sig"))
    # no grade (no submission, no verdict on the work) is a blank an importer leaves alone, and the reason says why
    assert [(r["id"], r["name"], r["submission"], r["status"], r["total (25)"], r["roster"]) for r in rows] == [
        ("2024001", "Sam Ple", "sample", "partial", "21", "email"),
        ("2024002", "张三", "", "missing", "", ""),
        ("2024003", "Sol Ution", "2024003", "complete", "25", "id"),
        ("", "", "bad.zip", "unreadable", "", "not in roster"),
        ("", "", "empty", "empty", "", "not in roster")]
    assert [r["reason"] for r in rows] == ["", "没有提交", "", rows[3]["reason"],
                                           "没有作答：每个练习的文件都缺失或仍是未改动的模板"]
    assert "bad.zip" in rows[3]["reason"]


@pytest.mark.slow
def test_the_batch_class_page_links_real_reports_and_names_the_failed_criteria(batch):
    out = batch[0]
    page = Page((out / "class.html").read_text())
    links = {e["text"]: e["href"] for e in page.all("a", **{"class": "submission"})}
    assert set(links) == {"sample", "2024003", "empty"}
    assert all((out / href).is_file() for href in links.values())
    report = json.loads((out / "students" / "sample" / "report.json").read_text())
    failed = [(e["id"], c) for e in report["exercises"] for c in e["criteria"] if c["status"] == "failed"]
    assert failed, "the sample must fail a criterion for this test to mean anything"
    exercise, criterion = failed[0]
    item = page.all("li", **{"data-criterion": f"{exercise}/{criterion['id']}"})[0]
    assert criterion["title"]["zh"] in item["text"] and criterion["message"]["zh"] in item["text"]
    bins = [int(e["data-count"]) for e in page.all("rect", **{"class": "bin"})]
    assert sum(bins) == 2   # sample and the solutions; empty, bad.zip and the missing student counted apart
    left_out = {e["data-standing"]: int(e["text"].split()[-1]) for e in page.all("li") if "data-standing" in e}
    assert left_out == {"empty": 1, "unreadable": 1, "missing": 1}


@pytest.mark.slow
@pytest.mark.parametrize("width, height", [(1280, 1100), (400, 1400)])
def test_the_class_page_in_a_browser(batch, tmp_path, width, height):
    """Chromium draws class.html (in Chinese, with the CJK font) at a desktop and a phone width; the page never
    scrolls sideways (tests/test_class_view.py checks every box on it)."""
    from browser import layout_width, screenshot

    page = tmp_path / "class.html"
    page.write_text((batch[0] / "class.html").read_text(encoding="utf-8"), encoding="utf-8")
    png = screenshot(page, tmp_path / f"class-{width}.png", tmp_path / "profile", width, height)
    header = png.read_bytes()[:24]
    assert header[:8] == b"\x89PNG\r\n\x1a\n" and header[16:24] == width.to_bytes(4, "big") + height.to_bytes(4, "big")
    empty = tmp_path / "empty.html"
    empty.write_text("<!DOCTYPE html><html><body></body></html>")
    blank = screenshot(empty, tmp_path / "empty.png", tmp_path / "profile", width, height)
    assert png.stat().st_size > 4 * blank.stat().st_size   # tables, bars and text, not an empty page
    scroll, client = layout_width(page, tmp_path / "profile", width)
    assert client == width and scroll <= client


@pytest.mark.slow
def test_a_log_gets_plain_progress_lines_with_an_eta_and_names_in_flight(batch):
    """In the batch's language (--lang zh): the estimate, the names in flight, a row with no verdict and why."""
    # (a warning about the course's files readable by all may come first: a checkout's are)
    lines = [line for line in batch[1].stderr.splitlines() if not line.startswith("grader: ")]
    assert lines[0].startswith("[0/4]") and "剩余时间测算中" in lines[0]
    assert "\r" not in batch[1].stderr and "\x1b" not in batch[1].stderr
    assert any("预计剩余 " in line and "正在评分：" in line for line in lines[1:])
    assert lines[-1].startswith("[4/4]") and "预计剩余" not in lines[-1]
    assert any("bad.zip: 无法读取 (bad.zip 无法解压" in line for line in lines)
    assert not any(word in batch[1].stderr for word in ("ETA", "grading:", "unreadable"))


# --- Progress ---------------------------------------------------------------------------------------------------

class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_the_eta_follows_the_measured_rate():
    clock = Clock()
    progress = BatchProgress(clock=clock)
    progress.begin(total=12, skipped=2, to_grade=9)   # and one entry with nothing to grade
    assert "[ 2/12]" in progress.line() and "ETA measuring" in progress.line()
    progress.finished("link", {}, graded=False)       # instant: says nothing of the rate
    for name in ("ann", "bo", "cy", "di", "ed"):
        progress.started(name)
    assert progress.eta_s() is None and progress.line().endswith("grading: ann, bo, cy +2")
    clock.now += 40
    progress.finished("bo", {})
    progress.finished("ann", {})
    assert progress.eta_s() == pytest.approx(20 * 7)
    assert "ETA 2m20s" in progress.line() and progress.line().endswith("grading: cy, di, ed")
    assert progress.line().startswith("[ 5/12] ############") and " 41%" in progress.line()
    for name in ("cy", "di", "ed"):
        progress.finished(name, {})
    for name in ("fay", "gil", "hal", "ivy"):
        progress.started(name)
        clock.now += 5
        progress.finished(name, {})
    assert progress.line() == "[12/12] " + "#" * 30 + " 100%"


def test_the_progress_line_speaks_the_batch_language():
    clock = Clock()
    progress = BatchProgress(clock=clock)
    progress.begin(total=4, skipped=0, to_grade=4)
    assert progress.line("zh").endswith("剩余时间测算中")
    for name in ("张三", "bo"):
        progress.started(name)
    clock.now += 185
    progress.finished("bo", {})
    assert progress.line("zh").endswith("预计剩余 9分15秒  正在评分：张三")
    assert progress.line("en").endswith("ETA 9m15s  grading: 张三")
    assert [duration(s, "zh") for s in (44.6, 3720)] == ["45秒", "1小时02分"]


def test_durations_read_at_a_glance():
    assert [duration(s) for s in (0, 44.6, 60, 185, 3599, 3720, -3)] == ["0s", "45s", "1m00s", "3m05s", "59m59s",
                                                                          "1h02m", "0s"]


def test_a_terminal_gets_one_line_redrawn_and_problems_above_it(capsys, monkeypatch):
    from grader.cli import show_progress

    monkeypatch.setattr("shutil.get_terminal_size", lambda: os.terminal_size((90, 20)))
    progress = BatchProgress(clock=Clock())
    progress.begin(total=3, skipped=0, to_grade=3)
    progress.started("alice\x1b[2J")
    show_progress(progress, True, "en", "started", "alice\x1b[2J", None)
    progress.finished("bob", {})
    show_progress(progress, True, "en", "finished", "bob", {"status": "grader_error", "percent": 0,
                                                            "message": said("the grader failed")})
    err = capsys.readouterr().err
    assert "\n" in err and err.count("\n") == 1, "a problem gets a line of its own, the progress none"
    assert err.startswith("\r\x1b[K[0/3]") and "\r\x1b[Kbob: grader error (the grader failed)\n" in err
    assert "\x1b[2J" not in err and "alice\\x1b[2J" in err
    assert all(len(part) < 90 for part in err.split("\r\x1b[K") if part.startswith("["))


def test_a_malformed_roster_is_a_usage_error_before_any_grading(course_dir, tmp_path, capsys):
    from grader.cli import EXIT_USAGE, main

    (tmp_path / "class" / "ann").mkdir(parents=True)
    (tmp_path / "roster.csv").write_text("name,email\nAnn,ann@uni.edu\n")
    status = main(["--course", str(course_dir), "batch", str(tmp_path / "class"), "--out", str(tmp_path / "out"),
                   "--sandbox", "basic", "--roster", str(tmp_path / "roster.csv")])
    assert status == EXIT_USAGE and "must name the columns id, name, email" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
