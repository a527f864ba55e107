"""Written answers graded by hand (grader.batch.manual): the rubric seeded from course.toml and edited, reviews saved
with a version (a stale save refused, never lost), the log of every change; and the one grade they make with the
autograded points in every file a batch writes, kept across --regrade and --rejudge."""

import json
import sqlite3

import pytest

from conftest import course_copy
from grader.batch import manual
from grader.batch.gradebook import Gradebook
from grader.course import load_course

HEADS = ("heads", "tensor_flow")


@pytest.fixture
def storage(tmp_path):
    """A gradebook holding three graded submissions of `heads` (rows written directly: no grading), each with a
    record of its observations that carries its written answers."""
    course = load_course(course_copy(tmp_path / "course", ["heads"]))
    book = Gradebook(tmp_path / "out" / "gradebook.sqlite")
    answers = {"ann": "Split C into H heads of D.", "bob": "  Split C into H\n heads of D. ", "cy": ""}
    for name, text in answers.items():
        record = {"version": 1, "exercises": {"heads": {"answers": {"tensor_flow": text}}}}
        book.store(name, "hash-" + name, "key", {"score": 4.0, "max_score": 10.0, "percent": 40.0, "status": "graded",
                                                  "message": {"en": "", "zh": ""}, "graded_at": "now"},
                   [{"exercise": "heads", "criterion": c, "kind": "hidden", "status": s, "points": p,
                     "max_points": m, "message": {"en": "", "zh": ""}}
                    for c, s, p, m in (("shape", "passed", 4.0, 4.0), ("values", "failed", 0.0, 6.0))], kept=record)
    yield course, book
    book.close()


def save(course, book, student, items, expected, author="ta1", adjustment=0.0, comment="", question=HEADS):
    return manual.save_review(book, course, student=student, exercise=question[0], question=question[1],
                              items=items, adjustment=adjustment, comment=comment, author=author,
                              expected_version=expected)


def test_the_rubric_starts_as_course_toml_says_and_is_seeded_once(storage):
    course, book = storage
    items = manual.rubric_items(book, course, *HEADS)
    question = course.exercise("heads").questions[0]
    assert [(i.id, i.position, i.points, i.text) for i in items] == [
        (str(n), n - 1, item.points, item.text) for n, item in enumerate(question.rubric, 1)]
    assert len(items) == len(question.rubric) >= 2 and any(i.points < 0 for i in items)
    manual.rubric_items(book, course, *HEADS)
    assert [e.action for e in manual.review_log(book)] == [manual.SEEDED]
    with pytest.raises(manual.ReviewError, match="has no question 'nope'"):
        manual.rubric_items(book, course, "heads", "nope")


def test_a_review_is_saved_with_a_version_and_its_points_follow_the_rubric(storage):
    course, book = storage
    first = save(course, book, "ann", ["1", "2"], None, comment="<b>good</b>")
    assert (first.version, first.items, first.comment) == (1, ("1", "2"), "<b>good</b>")
    second = save(course, book, "ann", ["1", "2", "4"], 1, adjustment=0.5)
    assert second.version == 2
    graded = manual.manual_grades(book, course, "ann")[HEADS]
    assert graded.points == 1 + 1 - 1 + 0.5 and graded.max_points == 3
    assert [i.id for i in graded.items] == ["1", "2", "4"] and graded.author == "ta1"
    # clamped to the question's points, and to zero
    save(course, book, "bob", ["1", "2", "3"], None, adjustment=5)
    save(course, book, "cy", ["4"], None)
    grades = manual.manual_grades(book, course)
    assert (grades["bob"][HEADS].points, grades["cy"][HEADS].points) == (3, 0)
    with pytest.raises(manual.ReviewError, match="no rubric item '9'"):
        save(course, book, "ann", ["9"], 2)
    assert manual.review(book, "ann", *HEADS) == second   # the refused one changed nothing


def test_a_stale_save_raises_conflict_with_the_current_review_and_both_are_logged(storage):
    course, book = storage
    save(course, book, "ann", ["1"], None, author="ta1", comment="first")
    mine = save(course, book, "ann", ["1", "2"], 1, author="ta1", comment="mine")
    with pytest.raises(manual.Conflict) as refused:   # ta2 opened the answer at version 1
        save(course, book, "ann", ["3"], 1, author="ta2", comment="theirs")
    assert refused.value.current == mine
    assert manual.review(book, "ann", *HEADS) == mine
    with pytest.raises(manual.Conflict) as first_of_two:   # two first saves: the second expected none
        save(course, book, "ann", ["3"], None, author="ta3")
    assert first_of_two.value.current == mine
    log = [e for e in manual.review_log(book, student="ann")]
    assert [(e.action, e.author) for e in log] == [(manual.SAVED, "ta1"), (manual.SAVED, "ta1"),
                                                    (manual.CONFLICT, "ta2"), (manual.CONFLICT, "ta3")]
    assert log[1].detail["before"]["comment"] == "first" and log[1].detail["after"]["comment"] == "mine"
    assert log[2].detail["attempt"]["comment"] == "theirs" and log[2].detail["attempt"]["items"] == ["3"]
    assert log[2].detail["before"]["comment"] == "mine" and log[2].detail["expected_version"] == 1
    # positive control: made on the current version, ta2's save goes through
    assert save(course, book, "ann", ["3"], 2, author="ta2").version == 3


def test_an_edited_item_changes_every_answer_graded_with_it_and_says_how_many(storage):
    course, book = storage
    save(course, book, "ann", ["1", "2"], None)
    save(course, book, "bob", ["1"], None)
    save(course, book, "cy", ["2"], None)
    assert manual.edit_item(book, course, *HEADS, "1", points=0.5, text_en="Split, said <right>", author="head") == 2
    grades = manual.manual_grades(book, course)
    assert (grades["ann"][HEADS].points, grades["bob"][HEADS].points, grades["cy"][HEADS].points) == (1.5, 0.5, 1)
    assert grades["ann"][HEADS].items[0].text["en"] == "Split, said <right>"
    edited = manual.review_log(book)[-1]
    assert (edited.action, edited.author, edited.detail["before"]["points"], edited.detail["after"]["points"]) == \
        (manual.ITEM_EDITED, "head", 1.0, 0.5)
    added = manual.add_item(book, course, *HEADS, points=2, text_en="extra", text_zh="额外", author="head")
    assert added.id == str(len(course.exercise("heads").questions[0].rubric) + 1)
    assert manual.rubric_items(book, course, *HEADS)[-1] == added
    assert manual.edit_item(book, course, *HEADS, "2", removed=True, author="head") == 2
    assert manual.manual_grades(book, course, "cy")[HEADS].points == 0   # a removed item counts for nothing
    assert "2" not in [i.id for i in manual.rubric_items(book, course, *HEADS)]


def test_answers_come_from_the_newest_grading_and_alike_ones_share_a_digest(storage, tmp_path):
    course, book = storage
    save(course, book, "ann", ["1"], None)
    rows = {r.student: r for r in manual.answers_to_review(book, course, *HEADS)}
    assert list(rows) == ["ann", "bob", "cy"]
    assert rows["ann"].text == "Split C into H heads of D." and rows["cy"].text == ""
    assert rows["ann"].digest == rows["bob"].digest != rows["cy"].digest == manual.digest("")
    assert rows["ann"].review is not None and rows["bob"].review is None
    assert (rows["ann"].autograde.score, rows["ann"].autograde.max_score, rows["ann"].autograde.status,
            rows["ann"].autograde.passed, rows["ann"].autograde.total) == (4.0, 10.0, "partial", 1, 2)
    # graded with no record kept: the answer is read from its report.json
    folder = tmp_path / "out" / "students" / "dan"
    folder.mkdir(parents=True)
    (folder / "report.json").write_text(json.dumps({"exercises": [{"id": "heads", "answers": [
        {"id": "tensor_flow", "text": "from the report", "prompt": {}, "points": 0, "max_points": 3,
         "status": "awaiting_review"}]}]}))
    book.store("dan", "hash-dan", "key", {"score": 0.0, "max_score": 10.0, "percent": 0.0, "status": "graded",
                                          "message": {"en": "", "zh": ""}, "graded_at": "now",
                                          "report_dir": str(folder)}, [])
    assert manual.answers_to_review(book, course, *HEADS)[-1].text == "from the report"


def test_reviews_outlive_a_new_grading_of_the_submission(storage):
    course, book = storage
    save(course, book, "ann", ["1", "2"], None)
    book.store("ann", "hash-ann-2", "key2", {"score": 10.0, "max_score": 10.0, "percent": 100.0,
                                             "status": "passed", "message": {"en": "", "zh": ""},
                                             "graded_at": "later"}, [], kept={"exercises": {}})
    assert manual.manual_grades(book, course, "ann")[HEADS].points == 2
    db = sqlite3.connect(book.path)
    assert db.execute("SELECT COUNT(*) FROM reviews").fetchone()[0] == 1
    db.close()
