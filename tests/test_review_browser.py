"""`grader review` in a real browser (headless Chromium driven by Selenium, tests/browser.py): a TA grades a class of
five (tests/review_class.py, graded by `grader batch`) with the keyboard alone, and the grades that come out are the
autograded points plus the rubric's, in grades.csv, canvas.csv and each report; a rubric item edited afterwards
changes every answer graded with it; two TAs saving the same answer see the conflict and lose neither decision; an
answer's markup and script never run on the page, proven by a check that sees them run on a page that renders the
same answer unsafely."""

from __future__ import annotations

import csv
import json
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
from browser import SPILLING
from conftest import ROOT
from review_class import (ANSWERS, EXERCISE, KEY, QUESTION, UNCHECKED, WAIT_S, XSS_MARK, XSS_PIECES, XSS_TITLE,
                          browser, copy_of, grade_class, leave_field, page_url, press, pressed, save, saved, served,
                          tab_to, text_of, wait)
from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.remote.webdriver import WebDriver

from grader.course import load_course

pytestmark = pytest.mark.slow


# --- the class, graded once for the module -------------------------------------------------------------------------

@dataclass
class Autograded:
    out: Path                    # the batch's output folder: read it, change a copy (copy_of)
    total: dict[str, float]      # submission -> grades.csv's total before any review
    score: dict[str, float]      # submission -> report.json's score before any review
    names: dict[str, str]        # submission -> the student's name on the roster
    exercise: dict[str, tuple[float, list[str]]]   # submission -> embedding's score and the criteria not passed


def rows_of(path: Path) -> list[dict[str, str]]:
    with path.open(encoding="utf-8-sig", newline="") as f:
        return list(csv.DictReader(f))


def total_column(row: dict[str, str]) -> str:
    [column] = [c for c in row if c.startswith("total")]   # "total (N)": N grows with the written questions
    return column


def totals(out: Path) -> dict[str, float]:
    """submission -> the total grades.csv gives it."""
    return {row["submission"]: float(row[total_column(row)]) for row in rows_of(out / "grades.csv")}


def canvas_totals(out: Path) -> dict[str, float]:
    """student name -> the points canvas.csv gives them (its last column: the course's assignment)."""
    with (out / "canvas.csv").open(encoding="utf-8-sig", newline="") as f:
        rows = list(csv.reader(f))
    return {row[0]: float(row[-1]) for row in rows[1:] if row[0] != "Points Possible"}


def report(out: Path, submission: str) -> dict:
    return json.loads((out / "students" / submission / "report.json").read_text(encoding="utf-8"))


def written_answer(out: Path, submission: str) -> dict:
    exercise = next(e for e in report(out, submission)["exercises"] if e["id"] == EXERCISE)
    return next(a for a in exercise["answers"] if a["id"] == QUESTION)


@pytest.fixture(scope="module")
def autograded(course, tmp_path_factory) -> Autograded:
    out = grade_class(course, tmp_path_factory.mktemp("review-class"))
    names = {row["submission"]: row["name"] for row in rows_of(out / "grades.csv")}
    assert sorted(names) == sorted(ANSWERS)
    for submission in ANSWERS:
        assert written_answer(out, submission)["status"] == "awaiting_review"
    exercise = {}
    for submission in ANSWERS:
        [graded] = [e for e in report(out, submission)["exercises"] if e["id"] == EXERCISE]
        exercise[submission] = graded["score"], [c["id"] for c in graded["criteria"] if c["status"] != "passed"]
    assert [s for s in ANSWERS if exercise[s][1]] == sorted(UNCHECKED)
    return Autograded(out, totals(out), {s: report(out, s)["score"] for s in ANSWERS}, names, exercise)


# --- the browser, as a TA uses it -----------------------------------------------------------------------------------

def who(driver: WebDriver, names: dict[str, str]) -> str:
    """The submission whose answer the page shows, by the name (or submission) in #student."""
    shown = text_of(driver, "#student")
    [submission] = [s for s, name in names.items() if name in shown or s == shown.strip()]
    return submission


def progress(driver: WebDriver, base: str, key: str = KEY) -> str:
    """The question's progress on the first page: "graded/answers"."""
    driver.get(base)
    return text_of(driver, f'[data-progress="{key}"]').strip()


# --- grading the class with the keyboard ----------------------------------------------------------------------------

# Keys pressed for the answer at each position, its comment and its point adjustment (course.toml's starting
# rubric of embedding/tensor_flow: items 1-3 +1 each, item 4 -1; the question is worth 3): a key pressed twice
# takes its item off again. Item 1 is applied to the first three answers alone (the edit below changes them).
PLAN = [("12", "shapes and dtype right; names the lookup", ""),
        ("13", "no word on the lookup", ""),
        ("14", "a shape stated wrong", ""),
        ("2", "the lookup, nothing else; n p s 1 typed here are text", "0.5"),
        ("332", "only the lookup", "")]
# the starting rubric, as gradebook migration 5 numbers course.toml's items: "1".."N"
STARTING = next(q for q in load_course(ROOT).exercise(EXERCISE).questions if q.id == QUESTION)
ITEM_POINTS = {str(n): item.points for n, item in enumerate(STARTING.rubric, start=1)}
assert ITEM_POINTS == {"1": 1.0, "2": 1.0, "3": 1.0, "4": -1.0} and STARTING.points == 3, "PLAN is made for these"


def items_of(keys: str) -> set[str]:
    applied: set[str] = set()
    for key in keys:
        applied ^= {key}
    return applied


def points_of(keys: str, adjustment: str, item_points=ITEM_POINTS) -> float:
    return min(max(sum(item_points[i] for i in items_of(keys)) + float(adjustment or 0), 0.0), STARTING.points)


def grade_one(driver: WebDriver, keys: str, comment: str, adjustment: str) -> None:
    """Apply the items with their keys, write the comment and the adjustment, and save with `s`."""
    for key in keys:
        before = pressed(driver)
        press(driver, key)
        wait(driver, lambda d, want=before ^ {key}: pressed(d) == want, f"key {key} does not toggle rubric item {key}")
    tab_to(driver, "comment")
    press(driver, comment)
    if adjustment:
        tab_to(driver, "adjustment")
        ActionChains(driver).key_down(Keys.CONTROL).send_keys("a").key_up(Keys.CONTROL).perform()
        press(driver, adjustment)
    save(driver)


def grade_class_by_keyboard(driver: WebDriver, base: str, autograded: Autograded) -> dict[str, float]:
    """Open the question from the index, grade every answer in order with PLAN, next with `n`: submission -> the
    points the page shows once saved."""
    driver.get(base)
    assert text_of(driver, f'[data-progress="{KEY}"]').strip() == "0/5"
    link = driver.find_element(By.CSS_SELECTOR, f'a[data-question="{KEY}"]')
    link.send_keys(Keys.ENTER)
    wait(driver, lambda d: d.current_url.split("?")[0].endswith(f"/q/{KEY}/0"), "the index's link opens no answer")
    # every word on the page is the page's own: no Python object leaks into it
    assert not re.search(r"<built-in |object at 0x|\bNone\b", driver.find_element(By.TAG_NAME, "body").text)
    shown: dict[str, float] = {}
    for n, (keys, comment, adjustment) in enumerate(PLAN):
        submission = who(driver, autograded.names)
        assert submission not in shown, f"the answer of {submission} is shown twice"
        # the answer, its Markdown rendered: the first words without their emphasis and code marks
        assert ANSWERS[submission].replace("**", "").replace("`", "")[:20] in text_of(driver, "#answer")
        if submission == "ann":
            assert [e.text for e in driver.find_elements(By.CSS_SELECTOR, "#answer strong")] == ["int64"]
        # beside it, the exercise's autograded score and the criteria it did not pass
        score, failing = autograded.exercise[submission]
        beside = text_of(driver, "#autograde")
        assert re.search(rf"\b{score:g} / ", beside) and all(criterion in beside for criterion in failing), beside
        grade_one(driver, keys, comment, adjustment)
        # the comment kept every key typed into it: n, p and s moved nowhere and saved nothing
        assert driver.find_element(By.ID, "comment").get_attribute("value") == comment
        assert pressed(driver) == items_of(keys)
        shown[submission] = float(text_of(driver, "#points").split("/")[0].strip())
        assert shown[submission] == pytest.approx(points_of(keys, adjustment))
        if n < len(PLAN) - 1:
            press(driver, "n")
            wait(driver, lambda d, n=n: d.current_url.split("?")[0].endswith(f"/{n + 1}"), "`n` does not go on")
    press(driver, "p")
    wait(driver, lambda d: d.current_url.split("?")[0].endswith(f"/{len(PLAN) - 2}"), "`p` does not go back")
    assert progress(driver, base) == "5/5"
    return shown


@pytest.fixture(scope="module")
def graded_by_hand(autograded, tmp_path_factory) -> tuple[Path, dict[str, float]]:
    """A copy of the class graded through the page with PLAN: (its output folder, submission -> manual points)."""
    work = tmp_path_factory.mktemp("graded-by-hand")
    out = copy_of(autograded.out, work / "out")
    with served(out) as urls, browser(work) as driver:
        [base] = urls.values()
        points = grade_class_by_keyboard(driver, base, autograded)
    return out, points


def test_a_class_graded_by_keyboard_totals_autograded_plus_rubric_points(autograded, graded_by_hand):
    out, points = graded_by_hand
    assert sorted(points) == sorted(ANSWERS)
    assert len({autograded.total[s] for s in ANSWERS}) > 1, "dee's autograded points should differ"
    expected = {s: autograded.total[s] + points[s] for s in ANSWERS}
    assert totals(out) == pytest.approx(expected)
    assert canvas_totals(out) == pytest.approx({autograded.names[s]: expected[s] for s in ANSWERS})
    for n, (_, comment, _) in enumerate(PLAN):
        submission = list(points)[n]   # the page's order
        answer = written_answer(out, submission)
        assert answer["status"] == "graded" and answer["points"] == pytest.approx(points[submission])
        assert answer["comment"] == comment
        # the criteria's score stays theirs; the grade is the two together
        assert report(out, submission)["score"] == autograded.score[submission]
        assert report(out, submission)["grade"]["final"] == pytest.approx(expected[submission])


def test_an_edited_rubric_item_changes_every_answer_graded_with_it(autograded, graded_by_hand, tmp_path):
    graded, points = graded_by_hand
    out = copy_of(graded, tmp_path / "out")
    order = list(points)   # submissions in the page's order
    using = [order[n] for n, (keys, _, _) in enumerate(PLAN) if "1" in items_of(keys)]
    assert len(using) == 3
    new_text = "Input: int64 ids of shape [B, T], edited after grading"
    with served(out) as urls, browser(tmp_path) as driver:
        [base] = urls.values()
        driver.get(f"{base}rubric/{KEY}")
        form = driver.find_element(By.CSS_SELECTOR, 'form[data-edit-item="1"]')
        for name, value in (("points", "2"), ("text_en", new_text)):
            field = form.find_element(By.NAME, name)
            field.send_keys(Keys.CONTROL, "a")
            field.send_keys(value)
        field.send_keys(Keys.ENTER)
        said = wait(driver, lambda d: " ".join(e.text for e in d.find_elements(By.ID, "edit-result")),
                    "the rubric page says nothing of the edit")
        assert re.search(rf"\b{len(using)}\b", said), f"#edit-result does not say how many answers changed: {said}"
        # the grading page shows the new points of an answer graded with the item
        driver.get(page_url(base, order.index(using[0])))
        assert float(text_of(driver, "#points").split("/")[0]) == pytest.approx(points[using[0]] + 1)
    after = totals(out)
    for submission in ANSWERS:
        change = 1.0 if submission in using else 0.0
        assert after[submission] == pytest.approx(autograded.total[submission] + points[submission] + change)
        assert written_answer(out, submission)["points"] == pytest.approx(points[submission] + change)
        assert report(out, submission)["grade"]["final"] == pytest.approx(after[submission])
    assert canvas_totals(out) == pytest.approx({autograded.names[s]: after[s] for s in ANSWERS})
    for submission in using:
        assert new_text in (out / "students" / submission / "report.html").read_text(encoding="utf-8")


# --- two TAs at once ------------------------------------------------------------------------------------------------

@contextmanager
def gradebook(out: Path) -> Iterator:
    from grader.batch.gradebook import Gradebook

    book = Gradebook(out / "gradebook.sqlite")
    try:
        yield book
    finally:
        book.close()


def stored_review(out: Path, submission: str) -> tuple[str, list[str], str]:
    """(author, items, comment) of the review the gradebook holds for the submission's answer now."""
    from grader.batch.manual import review

    with gradebook(out) as book:
        found = review(book, submission, EXERCISE, QUESTION)
    assert found is not None, f"no review of {submission} is stored"
    return found.author, sorted(found.items), found.comment


def logged(out: Path, submission: str) -> list[tuple[str, str, list[str]]]:
    """The review log of the submission's answer: (TA, action, the items they chose), oldest first."""
    from grader.batch.manual import review_log

    with gradebook(out) as book:
        entries = review_log(book, EXERCISE, QUESTION, submission)
    return [(e.author, e.action, sorted((e.detail.get("after") or e.detail.get("attempt") or {}).get("items", [])))
            for e in entries]


def decide(driver: WebDriver, keys: str, comment: str) -> str:
    """Apply the items, write the comment and press `s`: what #status said before."""
    for key in keys:
        press(driver, key)
    tab_to(driver, "comment")
    press(driver, comment)
    leave_field(driver)
    before = text_of(driver, "#status").strip()
    press(driver, "s")
    return before


def test_two_tas_saving_one_answer_see_the_conflict_and_lose_neither(autograded, tmp_path):
    out = copy_of(autograded.out, tmp_path / "out")
    with served(out, "--ta", "alice", "--ta", "bob", tas=2) as urls, \
            browser(tmp_path, "alice") as alice, browser(tmp_path, "bob") as bob:
        assert sorted(urls) == ["alice", "bob"] and urls["alice"] != urls["bob"]
        for n, second_keeps in ((0, "overwrite"), (1, "keep-theirs")):
            alice.get(page_url(urls["alice"], n))
            bob.get(page_url(urls["bob"], n))   # both open the answer before either saves
            submission = who(alice, autograded.names)
            before = decide(alice, "1", f"alice on {n}")
            wait(alice, lambda d, b=before: saved(d, b), "alice's save is not saved")
            decide(bob, "23", f"bob on {n}")
            conflict = wait(bob, lambda d: d.find_element(By.ID, "conflict"), "bob's page shows no #conflict")
            wait(bob, lambda d, shown=conflict: shown.is_displayed(), "bob's #conflict stays hidden")
            assert "alice" in conflict.text and f"alice on {n}" in conflict.text
            # bob's choice stays on his page; alice's decision is the one stored
            assert pressed(bob) == {"2", "3"}
            assert bob.find_element(By.ID, "comment").get_attribute("value") == f"bob on {n}"
            said = text_of(bob, "#status").strip()
            assert not said.lower().startswith("saved") and "alice" in said
            assert stored_review(out, submission) == ("alice", ["1"], f"alice on {n}")
            tab_to(bob, second_keeps).send_keys(Keys.ENTER)
            if second_keeps == "overwrite":
                wait(bob, lambda d, b=said: saved(d, b), "bob's overwrite is not saved")
                assert stored_review(out, submission) == ("bob", ["2", "3"], f"bob on {n}")
            else:
                wait(bob, lambda d: pressed(d) == {"1"}, "keeping alice's decision does not show it on bob's page")
                assert bob.find_element(By.ID, "comment").get_attribute("value") == f"alice on {n}"
                assert stored_review(out, submission) == ("alice", ["1"], f"alice on {n}")
            # the review log holds every decision, the refused one included, each with its TA
            ending = [("bob", "saved", ["2", "3"])] if second_keeps == "overwrite" else []
            assert logged(out, submission) == [("alice", "saved", ["1"]), ("bob", "conflict", ["2", "3"]), *ending]


# --- an answer's markup never runs ----------------------------------------------------------------------------------

# What an answer ran on the page, if anything: the value it set and the title. Every link in the answer is followed
# first (focused and Enter pressed), since a `javascript:` link runs only when followed.
RAN = f"return [{XSS_MARK} === undefined ? null : {XSS_MARK}, document.title]"


def follow_links(driver: WebDriver, scope: str) -> int:
    links = driver.find_elements(By.CSS_SELECTOR, f"{scope} a")
    for link in links:
        link.send_keys(Keys.ENTER)
    return len(links)


def unsafe_page(markdown: str) -> str:
    """The answer rendered as a careless page would: raw HTML kept, every link kept, no Content-Security-Policy."""
    from urllib.parse import quote

    from markdown_it import MarkdownIt

    renderer = MarkdownIt("commonmark", {"html": True})
    renderer.validateLink = lambda url: True
    body = renderer.render(markdown)
    return "data:text/html;charset=utf-8," + quote(f"<title>answer</title><div id=answer>{body}</div>")


def test_an_answers_script_links_and_raw_html_run_nothing(autograded, tmp_path):
    with browser(tmp_path) as driver:
        # positive control: rendered unsafely, each piece runs, and the check sees it
        for value, (piece, markdown) in enumerate(XSS_PIECES.items(), start=1):
            driver.get(unsafe_page(markdown))
            follow_links(driver, "#answer")
            assert wait(driver, lambda d: d.execute_script(RAN)[0], f"the {piece} did not run") == value, piece
            assert driver.title == XSS_TITLE
        out = copy_of(autograded.out, tmp_path / "out")
        with served(out) as urls:
            [base] = urls.values()
            for n in range(len(ANSWERS)):
                driver.get(page_url(base, n))
                if who(driver, autograded.names) == "eve":
                    break
            else:
                raise AssertionError("no page shows eve's answer")
            title = driver.title
            follow_links(driver, "#answer")
            assert driver.execute_script(RAN) == [None, title] and title != XSS_TITLE
            # nor could it run without the page's Content-Security-Policy: no element of it is markup that runs
            assert driver.execute_script(
                "const a = document.getElementById('answer');"
                "return [...a.querySelectorAll('script, img, iframe, object, embed, svg, style')].length"
                " + [...a.querySelectorAll('*')].filter(e => [...e.attributes].some(x => /^on/i.test(x.name)"
                " || /^\\s*javascript:/i.test(x.value))).length") == 0
            # and the answer is all there, as text: each piece reads as the student wrote it
            answer = driver.find_element(By.ID, "answer")
            for markdown in XSS_PIECES.values():
                shown = markdown if "](" not in markdown else markdown.split("](")[0][1:]
                assert shown in answer.text, shown
            # saving and moving on (the page's own script at work) runs nothing either
            press(driver, "1")
            save(driver)
            assert driver.execute_script(RAN) == [None, title]


# --- anonymised ----------------------------------------------------------------------------------------------------

def test_anonymised_answers_hide_the_name_until_the_grade_is_saved(autograded, tmp_path):
    out = copy_of(autograded.out, tmp_path / "out")
    with served(out, "--anonymise") as urls, browser(tmp_path) as driver:
        [base] = urls.values()
        driver.get(page_url(base, 2))
        assert text_of(driver, "#student").strip() == "Student 3"
        # neither the student's name nor their submission's, anywhere on the page or in its addresses
        named = re.compile("|".join(rf"\b{re.escape(s)}\b|{re.escape(name)}" for s, name in autograded.names.items()))
        assert not named.findall(driver.find_element(By.TAG_NAME, "body").text)
        assert not named.findall(" ".join(a.get_attribute("href") for a in driver.find_elements(By.TAG_NAME, "a")))
        press(driver, "2")
        save(driver)
        assert who(driver, autograded.names) in ANSWERS
        driver.refresh()
        assert who(driver, autograded.names) in ANSWERS, "the name is hidden again once the grade is saved"


def test_the_page_refuses_a_wrong_token(autograded, tmp_path):
    from urllib.error import HTTPError
    from urllib.request import urlopen

    with served(autograded.out) as urls:
        [base] = urls.values()
        with urlopen(base, timeout=WAIT_S) as page:   # the control: the printed URL serves the index
            assert f'data-question="{KEY}"'.encode() in page.read()
        token = base.rstrip("/").rsplit("/", 1)[1]
        for wrong in (token[:-1] + ("x" if token[-1] != "x" else "y"), ""):
            with pytest.raises(HTTPError) as refused:
                urlopen(base.replace(f"/{token}/", f"/{wrong}/" if wrong else "/"), timeout=WAIT_S)
            assert refused.value.code == 404


# --- answers alike --------------------------------------------------------------------------------------------------

def test_empty_answers_alike_are_graded_by_one_decision(autograded, tmp_path):
    """No one answered attention's question: its five empty answers are one group, graded once for all five."""
    empty = "attention/tensor_flow"
    out = copy_of(autograded.out, tmp_path / "out")
    with served(out) as urls, browser(tmp_path) as driver:
        [base] = urls.values()
        assert progress(driver, base, empty) == "0/5"
        driver.get(f"{base}q/{empty}/0")
        assert re.search(r"\b5\b", text_of(driver, "#group")), text_of(driver, "#group")
        tab_to(driver, "apply-group")
        press(driver, Keys.SPACE)
        assert driver.find_element(By.ID, "apply-group").is_selected()
        tab_to(driver, "comment")
        press(driver, "no answer")
        save(driver)
        assert re.search(r"\b4\b", text_of(driver, "#status")), text_of(driver, "#status")   # the four others
        assert progress(driver, base, empty) == "5/5" and progress(driver, base) == "0/5"
        # the control: the question everyone answered differently has no group
        driver.get(page_url(base, 0))
        assert not driver.find_elements(By.ID, "group")
    for submission in ANSWERS:
        [answer] = [a for e in report(out, submission)["exercises"] if e["id"] == "attention" for a in e["answers"]]
        assert answer["status"] == "graded" and answer["points"] == 0 and answer["comment"] == "no answer", answer


# --- a phone's width ------------------------------------------------------------------------------------------------

def spilling(driver: WebDriver) -> list[str]:
    """SPILLING on the page, less the text fields: a long rubric text scrolls inside its input, as fields do."""
    return [e for e in json.loads(driver.execute_script(f"return {SPILLING}"))
            if not e.startswith(("input.", "textarea."))]


@pytest.mark.parametrize("width", [1280, 400])
def test_nothing_on_the_review_pages_scrolls_sideways(autograded, tmp_path, width):
    """The first page, an answer's page and the rubric page, in both languages, fit the window: no box reaches past
    its right edge and no content spills out of its box (tests/browser.py's SPILLING)."""
    with served(autograded.out) as urls, browser(tmp_path, width=width) as driver:
        [base] = urls.values()
        spilled = {}
        for lang in ("en", "zh"):
            for page in ("", f"q/{KEY}/0", f"rubric/{KEY}"):
                driver.get(f"{base}{page}?lang={lang}")
                spilled[f"/{page}?lang={lang}"] = spilling(driver)
        too_wide = {page: found for page, found in spilled.items() if found}
        assert not too_wide, f"reaches past the window {width} px wide: {too_wide}"
        # the control: a box wider than the window is seen
        driver.execute_script("const wide = document.createElement('div'); wide.className = 'too-wide';"
                              "wide.style.width = '2000px'; wide.textContent = 'x'; document.body.append(wide)")
        assert "div.too-wide" in spilling(driver)
