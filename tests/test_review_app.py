"""`grader review` over HTTP (Starlette's TestClient; the pages in a real browser are tests/test_review_browser.py):
the token, saving and a stale save, a rubric item's edit, an answer's Markdown kept inert under a strict CSP,
anonymised names, and the command itself serving until Ctrl-C."""

import csv
import html.parser
import io
import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import urllib.request

import pytest
from starlette.testclient import TestClient

from conftest import ROOT, course_copy
from grader.batch import gradebook, manual
from grader.batch.gradebook import Gradebook, grader_key
from grader.course import load_course
from grader.review_app.app import CONTENT_SECURITY_POLICY, ReviewSettings, create_app, student_id
from grader.review_app.labels import REVIEW_LABELS

HEADS = ("heads", "tensor_flow")
HOSTILE = ("# Shapes\n\n<script>document.title = 'owned'</script>\n\n"
           "[click me](javascript:alert(1)) and [docs](https://pytorch.org/docs) and [rel](../../rubric)\n\n"
           "<img src=x onerror=\"alert(2)\"> <a href=\"javascript:alert(3)\">raw link</a>\n\n"
           "![pixel](https://tracker.example/p.png)\n\n**bold** `x.view(B, T, H, D)`")
ANSWERS = {"ann": "Split C into H heads of D.", "bob": "  Split C into H\n heads of D. ", "cy": "", "dee": HOSTILE,
           "eve": ""}


def store_class(course, book: Gradebook, answers: dict[str, str]) -> None:
    """Graded submissions of `heads` written directly (no grading), each record carrying its written answers."""
    for name, text in answers.items():
        record = {"version": 1, "exercises": {"heads": {"answers": {"tensor_flow": text}}}}
        summary = {"score": 4.0, "max_score": 10.0, "percent": 40.0, "status": "graded",
                   "message": {"en": "", "zh": ""}, "graded_at": "now"}
        book.store(name, "hash-" + name, grader_key(course), summary,
                   [{"exercise": "heads", "criterion": c, "kind": "hidden", "status": s, "points": p,
                     "max_points": m, "message": {"en": "", "zh": ""}}
                    for c, s, p, m in (("shape", "passed", 4.0, 4.0), ("values", "failed", 0.0, 6.0))], kept=record)


def class_folder(tmp_path):
    """A course of `heads` and a gradebook folder holding a class of five with answers to heads/tensor_flow."""
    folder = course_copy(tmp_path / "course", ["heads"])
    course = load_course(folder)
    out = tmp_path / "out"
    book = Gradebook(out / "gradebook.sqlite")
    store_class(course, book, ANSWERS)
    book.close()
    return folder, course, out


@pytest.fixture
def served(tmp_path):
    """The class, served to two TAs; yields (settings, client)."""
    _, course, out = class_folder(tmp_path)
    settings = ReviewSettings(out=out, course=course, tas={"tok-ada": "ada", "tok-bo": "bo"})
    with TestClient(create_app(settings)) as client:
        yield settings, client


def page_of(client, settings, student: str, token: str = "tok-ada", query: str = ""):
    """The grading page of a student's answer (found by position in the page order)."""
    for n in range(len(ANSWERS)):
        response = client.get(f"/{token}/q/heads/tensor_flow/{n}{query}")
        if f'data-student="{student_id(settings, student)}"' in response.text:
            return n, response
    raise AssertionError(f"no page shows {student}")


def save(client, settings, student, items, expected, token="tok-ada", **extra):
    body = {"student": student_id(settings, student), "items": items, "adjustment": 0, "comment": "",
            "expected_version": expected, **extra}
    return client.post(f"/{token}/save/heads/tensor_flow", json=body)


def stored(settings, student):
    book = Gradebook(settings.out / "gradebook.sqlite")
    try:
        return manual.review(book, student, *HEADS)
    finally:
        book.close()


def test_a_wrong_token_is_not_found(served):
    settings, client = served
    assert client.get("/tok-ada/").status_code == 200
    for path in ("/nope/", "/tok-ad/", "/tok-ada-x/", "/nope/q/heads/tensor_flow/0", "/nope/rubric/heads/tensor_flow",
                 "/"):
        assert client.get(path).status_code == 404, path
    assert save(client, settings, "ann", ["1"], None, token="nope").status_code == 404
    assert stored(settings, "ann") is None


def test_the_index_shows_each_questions_progress(served):
    settings, client = served
    page = client.get("/tok-ada/").text
    assert 'data-question="heads/tensor_flow"' in page
    assert re.search(r'data-progress="heads/tensor_flow">0/5<', page)
    assert save(client, settings, "ann", ["1"], None).status_code == 200
    assert re.search(r'data-progress="heads/tensor_flow">1/5<', client.get("/tok-ada/").text)


def test_a_save_is_stored_by_the_tokens_ta_and_a_stale_one_is_refused_with_the_current_review(served):
    settings, client = served
    n, page = page_of(client, settings, "ann")
    assert 'data-version=""' in page.text and 'aria-pressed="false"' in page.text
    first = save(client, settings, "ann", ["1", "2"], None, comment="clear")
    assert first.status_code == 200, first.text
    reply = first.json()
    assert reply["review"]["version"] == 1 and reply["review"]["author"] == "ada" and reply["student"] == "ann"
    assert reply["written"] and reply["status"] == "saved"   # the class files written again with the grade
    grades = {row["submission"]: row for row in csv.DictReader(io.StringIO(
        (settings.out / "grades.csv").read_text(encoding="utf-8-sig")))}
    total = next(k for k in grades["ann"] if k.startswith("total"))
    assert float(grades["ann"][total]) == 4 + 2   # autograded 4, items 1 and 2 one point each
    assert stored(settings, "ann").items == ("1", "2") and stored(settings, "ann").author == "ada"
    # bo opened the answer before ada saved (version none), and saves his own decision: refused, shown ada's
    stale = save(client, settings, "ann", ["3"], None, token="tok-bo", comment="mine")
    assert stale.status_code == 409
    current = stale.json()["current"]
    assert (current["author"], current["items"], current["comment"], current["version"]) == ("ada", ["1", "2"],
                                                                                             "clear", 1)
    assert "ada" in stale.json()["status"]
    assert stored(settings, "ann").items == ("1", "2")   # ada's stays
    # bo overwrites on the version he was shown
    again = save(client, settings, "ann", ["3"], 1, token="tok-bo", comment="mine")
    assert again.status_code == 200 and again.json()["review"]["author"] == "bo"
    assert stored(settings, "ann").version == 2 and stored(settings, "ann").comment == "mine"
    # the page now shows bo's grade: item 3 pressed, the version to save on
    page = client.get(f"/tok-ada/q/heads/tensor_flow/{n}").text
    assert 'data-version="2"' in page and re.search(r'data-item="3"[^>]*aria-pressed="true"', page)
    # the attempt that lost is in the log, never lost
    book = Gradebook(settings.out / "gradebook.sqlite")
    try:
        assert manual.CONFLICT in [e.action for e in manual.review_log(book, *HEADS)]
    finally:
        book.close()


def test_a_student_is_named_as_the_roster_names_them(served):
    settings, client = served
    book = Gradebook(settings.out / "gradebook.sqlite")
    book.set_settings({"roster": [{"id": "ann", "name": "Ann <b>Lee</b>", "email": "ann@uni.edu", "columns": {}}]})
    book.close()
    _, page = page_of(client, settings, "ann")
    assert '<h2 id="student">Ann &lt;b&gt;Lee&lt;/b&gt; (ann)</h2>' in page.text
    assert save(client, settings, "ann", ["1"], None).json()["student"] == "Ann <b>Lee</b> (ann)"
    _, page = page_of(client, settings, "bob")   # not on the roster
    assert '<h2 id="student">bob</h2>' in page.text


def test_a_save_that_is_wrong_is_refused_and_stores_nothing(served):
    settings, client = served
    assert save(client, settings, "ann", ["99"], None).status_code == 400
    assert save(client, settings, "ann", ["1"], None, adjustment="x").status_code == 400
    infinite = json.dumps({"student": student_id(settings, "ann"), "items": [], "adjustment": float("inf"),
                           "expected_version": None})   # Python writes JSON's non-standard Infinity, and reads it
    assert client.post("/tok-ada/save/heads/tensor_flow", content=infinite.encode(),
                       headers={"content-type": "application/json"}).status_code == 400
    assert save(client, settings, "ann", ["1"], None, adjustment=0.5).status_code == 200   # the control
    assert save(client, settings, "bob", ["1"], "1").status_code == 400   # a version is a number
    assert client.post("/tok-ada/save/heads/tensor_flow", content=b"{", headers={
        "content-type": "application/json"}).status_code == 400
    assert client.post("/tok-ada/save/heads/tensor_flow", data={"student": "x"}).status_code == 415
    assert client.post("/tok-ada/save/heads/nope", json={}).status_code == 404
    assert stored(settings, "ann").adjustment == 0.5 and stored(settings, "bob") is None


def test_alike_answers_are_grouped_and_one_decision_grades_them_all(served):
    settings, client = served
    _, page = page_of(client, settings, "ann")
    assert 'id="group"' in page.text and "2 answers alike" in page.text   # bob's differs in whitespace alone
    group = json.loads(re.search(r"data-group='([^']*)'", page.text).group(1))
    assert group == {student_id(settings, "bob"): None}
    reply = save(client, settings, "ann", ["1"], None, group=group)
    assert reply.status_code == 200 and reply.json()["group_saved"] == 1
    assert stored(settings, "bob").items == ("1",) and stored(settings, "bob").author == "ada"
    # one decision for a group, one of which another TA graded since the page was shown: nothing saved, all shown
    _, page = page_of(client, settings, "cy")
    group = json.loads(re.search(r"data-group='([^']*)'", page.text).group(1))
    assert save(client, settings, "eve", ["4"], None, token="tok-bo").status_code == 200
    refused = save(client, settings, "cy", ["2"], None, group=group)
    assert refused.status_code == 409 and refused.json()["mine"] is False
    assert refused.json()["current"]["author"] == "bo" and "alike answer" in refused.json()["status"]
    assert stored(settings, "cy") is None and stored(settings, "eve").items == ("4",)
    overwrite = save(client, settings, "cy", ["2"], refused.json()["version"], group=refused.json()["group"])
    assert overwrite.status_code == 200 and overwrite.json()["group_saved"] == 1
    assert stored(settings, "cy").items == stored(settings, "eve").items == ("2",)
    _, empty = page_of(client, settings, "cy")
    assert "2 answers alike" in empty.text   # cy's and eve's empty answers
    _, hostile = page_of(client, settings, "dee")
    assert 'id="group"' not in hostile.text


def test_filters_show_the_ungraded_and_those_graded_with_an_item(served):
    settings, client = served
    save(client, settings, "ann", ["2"], None)
    save(client, settings, "cy", ["1"], None)

    def students(query):
        shown, n = [], 0
        while True:
            page = client.get(f"/tok-ada/q/heads/tensor_flow/{n}{query}").text
            found = re.search(r'data-student="([0-9a-f]+)"', page)
            if not found:
                return shown
            shown.append(next(s for s in ANSWERS if student_id(settings, s) == found.group(1)))
            n += 1

    assert sorted(students("?filter=ungraded")) == ["bob", "dee", "eve"]
    assert students("?item=2") == ["ann"]
    assert sorted(students("")) == sorted(ANSWERS)
    # next, from a student, goes to the next one the filter still shows
    first = students("?filter=ungraded")[0]
    step = client.get(f"/tok-ada/q/heads/tensor_flow/next/{student_id(settings, first)}?filter=ungraded",
                      follow_redirects=False)
    assert step.status_code == 303 and step.headers["location"].endswith("/1?filter=ungraded")


def test_an_items_edit_says_how_many_graded_answers_changed(served):
    settings, client = served
    save(client, settings, "ann", ["1", "2"], None)
    save(client, settings, "bob", ["1"], None)
    save(client, settings, "cy", ["2"], None)
    page = client.get("/tok-ada/rubric/heads/tensor_flow").text
    assert 'data-edit-item="1"' in page and "edit-result" not in page
    edited = client.post("/tok-ada/rubric/heads/tensor_flow", data={"item": "1", "points": "0.25",
                                                                    "text_en": "Names B, T and C", "text_zh": "说明"})
    assert edited.status_code == 200   # after the redirect to the rubric page
    result = re.search(r'id="edit-result"[^>]*>([^<]*)<', edited.text).group(1)
    assert result.endswith("graded answers it changes: 2")
    book = Gradebook(settings.out / "gradebook.sqlite")
    try:
        item = next(i for i in manual.rubric_items(book, settings.course, *HEADS) if i.id == "1")
        assert (item.points, item.text["en"]) == (0.25, "Names B, T and C")
        assert [e.author for e in manual.review_log(book, *HEADS) if e.action == manual.ITEM_EDITED] == ["ada"]
        assert manual.manual_grades(book, settings.course, "bob")[HEADS].points == 0.25
    finally:
        book.close()
    zh = client.post("/tok-ada/rubric/heads/tensor_flow?lang=zh", data={"item": "2", "points": "1", "text_en": "x",
                                                                        "text_zh": "y"})
    assert re.search(r'id="edit-result"[^>]*>([^<]*)<', zh.text).group(1).endswith("：2 份")   # ann and cy


def test_an_item_can_be_added(served):
    settings, client = served
    count = len(client.get("/tok-ada/rubric/heads/tensor_flow").text.split("data-edit-item=")) - 1
    added = client.post("/tok-ada/rubric/heads/tensor_flow", data={"points": "-0.5", "text_en": "Off by one",
                                                                   "text_zh": "差一"})
    assert "edit-result" in added.text
    assert len(added.text.split("data-edit-item=")) - 1 == count + 1
    assert client.post("/tok-ada/rubric/heads/tensor_flow", data={"item": "99", "points": "1"}).status_code == 404


class Elements(html.parser.HTMLParser):
    """Every start tag with its attributes, as a browser's parser would read them."""

    def __init__(self):
        super().__init__()
        self.tags: list[tuple[str, dict]] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))


def test_an_answers_script_links_and_raw_html_come_out_as_text_under_a_strict_csp(served):
    settings, client = served
    _, response = page_of(client, settings, "dee")
    csp = response.headers["content-security-policy"]
    assert csp == CONTENT_SECURITY_POLICY and "script-src 'self'" in csp and "unsafe-inline" not in csp
    assert response.headers["x-content-type-options"] == "nosniff"
    answer = re.search(r'<div id="answer" class="answer">(.*?)</div>\n', response.text, re.S).group(1)
    parsed = Elements()
    parsed.feed(response.text)
    scripts = [a for tag, a in parsed.tags if tag == "script"]
    assert scripts == [{"src": "/static/review.js", "defer": None}]   # the page's own, and no other
    hrefs = [a.get("href", "") for tag, a in parsed.tags if tag == "a"]
    assert not [h for h in hrefs if h.strip().lower().startswith("javascript")]
    assert not [tag for tag, a in parsed.tags if tag == "img" or any(k.startswith("on") for k in a)]
    inside = Elements()
    inside.feed(answer)
    # the https link kept; the javascript: and relative ones are text, or a link to nowhere
    assert [a["href"] for tag, a in inside.tags if tag == "a" and "href" in a] == ["https://pytorch.org/docs"]
    assert "&lt;script&gt;" in answer and "&lt;img src=x" in answer   # shown as the text it is
    assert "<strong>bold</strong>" in answer and "<h1>Shapes</h1>" in answer   # Markdown still renders
    # inline script or style nowhere in the app's pages: the CSP would refuse it
    for path in ("/tok-ada/", "/tok-ada/rubric/heads/tensor_flow", "/tok-ada/q/heads/tensor_flow/0"):
        text = client.get(path).text
        assert not re.search(r"<script(?![^>]*\bsrc=)", text) and "<style" not in text and " style=" not in text
        assert not re.search(r"\son[a-z]+=", text)
    # the headers on a page that does not exist and on the static files too
    assert client.get("/nope/").headers["content-security-policy"] == CONTENT_SECURITY_POLICY
    script = client.get("/static/review.js")
    assert script.status_code == 200 and script.headers["content-security-policy"] == CONTENT_SECURITY_POLICY


def test_anonymised_names_are_hidden_until_the_grade_is_saved(tmp_path):
    _, course, out = class_folder(tmp_path)
    settings = ReviewSettings(out=out, course=course, tas={"tok": "ada"}, anonymise=True)
    with TestClient(create_app(settings)) as client:
        pages = [client.get(f"/tok/q/heads/tensor_flow/{n}").text for n in range(len(ANSWERS))]
        for n, page in enumerate(pages):
            assert re.search(r'<h2 id="student">([^<]*)</h2>', page).group(1) == f"Student {n + 1}"
            assert not [name for name in ANSWERS if re.search(rf"\b{name}\b", page)]
        first = re.search(r'data-student="([0-9a-f]+)"', pages[0]).group(1)
        student = next(s for s in ANSWERS if student_id(settings, s) == first)
        reply = client.post("/tok/save/heads/tensor_flow", json={"student": first, "items": ["1"], "adjustment": 0,
                                                                 "comment": "", "expected_version": None})
        assert reply.status_code == 200 and reply.json()["student"] == student   # shown once saved
        assert re.search(r'<h2 id="student">([^<]*)</h2>', client.get("/tok/q/heads/tensor_flow/0").text
                         ).group(1) == student
        second = client.get("/tok/q/heads/tensor_flow/1").text
        assert re.search(r'<h2 id="student">([^<]*)</h2>', second).group(1) == "Student 2"
        zh = client.get("/tok/q/heads/tensor_flow/1?lang=zh").text
        assert re.search(r'<h2 id="student">([^<]*)</h2>', zh).group(1) == "学生 2"


def test_the_pages_speak_both_languages(served):
    settings, client = served
    assert set(REVIEW_LABELS["en"]) == set(REVIEW_LABELS["zh"])
    assert [k for k, word in REVIEW_LABELS["zh"].items() if word == REVIEW_LABELS["en"][k]] == []
    # a template reads L.<key>: a key named like a dict method would print the method, not the word
    assert [k for k in REVIEW_LABELS["en"] if hasattr(dict, k)] == []
    for lang in ("en", "zh"):
        for path in ("/tok-ada/", "/tok-ada/q/heads/tensor_flow/0", "/tok-ada/rubric/heads/tensor_flow",
                     "/tok-ada/q/heads/tensor_flow/99"):
            text = client.get(f"{path}?lang={lang}").text
            assert not re.search(r"built-in|object at 0x|\bNone\b|Undefined", text), (lang, path)
    zh = client.get("/tok-ada/q/heads/tensor_flow/0?lang=zh").text
    assert 'lang="zh-CN"' in zh and REVIEW_LABELS["zh"]["save"] in zh and "?lang=zh" in zh
    assert REVIEW_LABELS["en"]["save"] in client.get("/tok-ada/q/heads/tensor_flow/0").text


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM])
def test_grader_review_prints_its_addresses_serves_and_stops_on_a_signal(tmp_path, stop):
    course, _, out = class_folder(tmp_path)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-m", "grader", "--course", str(course), "review", str(out), "--port", "0",
                             "--ta", "ada", "--ta", "bo"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env)
    try:
        lines = [proc.stdout.readline() for _ in range(2)]
        found = [re.fullmatch(r"review: (\w+) (http://127\.0\.0\.1:\d+/[\w-]+/)\n", line) for line in lines]
        assert all(found), lines
        assert [m.group(1) for m in found] == ["ada", "bo"]
        urls = [m.group(2) for m in found]
        assert urls[0] != urls[1]
        with urllib.request.urlopen(urls[0] + "q/heads/tensor_flow/0", timeout=30) as page:
            assert page.status == 200 and 'id="student"' in page.read().decode()
        with pytest.raises(urllib.error.HTTPError) as missing:
            urllib.request.urlopen(urls[0].rsplit("/", 2)[0] + "/wrong/", timeout=30)
        assert missing.value.code == 404
    finally:
        proc.send_signal(stop)
        stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode in (0, 128 + stop), stderr
    assert "Traceback" not in stderr and len(stderr.strip().splitlines()) == 1, stderr
    assert stdout == ""


def test_a_gradebook_that_cannot_be_used_answers_503_in_one_sentence_and_the_server_goes_on(served, monkeypatch,
                                                                                           capsys):
    settings, client = served
    assert client.get("/tok-ada/").status_code == 200

    def locked(path):
        raise sqlite3.OperationalError("database is locked")

    monkeypatch.setattr(gradebook, "Gradebook", locked)
    refused = client.get("/tok-ada/")
    assert refused.status_code == 503 and refused.text == "the gradebook could not be used: database is locked"
    assert save(client, settings, "ann", ["1"], None).status_code == 503
    assert capsys.readouterr().err.count("database is locked") == 2
    monkeypatch.undo()
    assert client.get("/tok-ada/").status_code == 200 and stored(settings, "ann") is None


def test_grader_review_refuses_a_folder_without_a_gradebook_in_one_line(tmp_path, capsys):
    from grader.cli import main

    assert main(["--course", str(course_copy(tmp_path / "course", ["heads"])), "review", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("grader: ") and "gradebook.sqlite" in err and len(err.strip().splitlines()) == 1
    Gradebook(tmp_path / "out" / "gradebook.sqlite").close()
    assert main(["--course", str(tmp_path / "course"), "review", str(tmp_path / "out"), "--ta", "ada", "--ta",
                 "ada"]) == 2
    assert "each --ta names one TA, once" in capsys.readouterr().err


def test_a_save_while_a_batch_holds_the_folder_is_stored_and_says_the_reports_wait(served):
    from grader.batch.run import batch_lock

    settings, client = served
    with batch_lock(settings.out):
        reply = save(client, settings, "ann", ["1"], None)
        edited = client.post("/tok-ada/rubric/heads/tensor_flow", data={"item": "1", "points": "0.5"})
    assert reply.status_code == 200 and not reply.json()["written"]
    assert "a grader batch is writing this folder" in reply.json()["status"]
    assert stored(settings, "ann").items == ("1",)
    result = re.search(r'id="edit-result"[^>]*>([^<]*)<', edited.text).group(1)
    assert "graded answers it changes: 1" in result and "a grader batch is writing this folder" in result
    assert save(client, settings, "ann", ["2"], 1).json()["written"]   # the control: once it ends, written
