"""Written answers graded by hand (grader.batch.manual): the rubric seeded from course.toml and edited, reviews saved
with a version (a stale save refused, never lost), the log of every change; and the one grade they make with the
autograded points in every file a batch writes, kept across --regrade and --rejudge."""

import csv
import io
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


# --- The one grade: written points join the autograded ones (rows by hand, no grading) ---------------------------


def test_written_points_join_an_exercise_before_its_override_and_count_once_reviewing_began(storage):
    from grader.batch.gradebook import graded_lines
    from grader.batch.grades import Override, course_max, grade_of

    course, book = storage
    autograded = course_max(course, False)
    written_max = sum(q.points for ex in course.exercises for q in ex.questions)
    assert written_max > 0
    rows = [{"exercise": "heads", "criterion": "shape", "points": 4.0, "max_points": 4.0}]
    assert grade_of(course, rows).max_score == autograded   # before any review: the criteria's alone
    save(course, book, "ann", ["1", "2"], None)
    written = manual.manual_grades(book, course, "ann")
    grade = grade_of(course, rows, (), None, written)
    assert (grade.raw, grade.max_score, grade.exercise_points["heads"]) == (6, autograded + written_max, 6)
    assert grade.adjusted and grade.record()["written"]["points"] == 2
    assert grade_of(course, rows, (), None, {}).awaiting == [HEADS]   # counted, not graded yet: 0 and says so
    # an exercise override sets the exercise's total, written answers included; the whole grade's comes last
    corrected = grade_of(course, rows, [Override("ann", "heads", "", 5, "why", "tutor", "t")], None, written)
    assert (corrected.raw, corrected.overrides[0].graded, corrected.overrides[0].max_points) == \
        (5, 6, autograded + written_max)
    # the class files' lines: every submission's maximum counts the written questions once one answer is graded
    lines = {line.name: line.grade for line in graded_lines(course, book, "key")}
    assert {name: g.max_score for name, g in lines.items()} == dict.fromkeys(("ann", "bob", "cy"),
                                                                            autograded + written_max)
    assert (lines["ann"].raw, lines["bob"].raw) == (4 + 2, 4)


def test_a_report_of_schema_3_2_still_reads_and_takes_its_review(tmp_path):
    from grader.report.build import stored_report, with_grade
    from grader.report.model import SCHEMA_PATH

    from test_answers import graded_with_answers

    report = graded_with_answers(tmp_path)
    older = json.loads(report.to_json())
    older["schema_version"] = "3.2"
    again = stored_report(older)
    assert again.schema_version == "3.3" and [a.status for a in again.exercises[0].answers] == [
        "awaiting_review", "awaiting_review"]
    assert "items" not in json.loads(again.to_json())["exercises"][0]["answers"][0]   # an ungraded answer as before
    item = {"id": "1", "points": 1.0, "text": {"en": "<i>item</i>", "zh": "细则"}}
    graded = with_grade(again, {"written": {"answers": [{"exercise": "transformer_lm", "question": "tensor_flow",
                                                         "points": 1.0, "max_points": 3.0, "adjustment": 0.0,
                                                         "items": [item], "comment": "c", "reviewer": "ta",
                                                         "at": "t"}]}})
    data = json.loads(graded.to_json())
    answer = data["exercises"][0]["answers"][0]
    assert (answer["status"], answer["points"], answer["items"], answer["comment"], answer["reviewer"]) == \
        ("graded", 1.0, [item], "c", "ta")
    assert data["exercises"][0]["answers"][1]["status"] == "awaiting_review"
    import jsonschema

    data.pop("grade")   # a partial grade record made up for this test; the batch tests validate real ones
    jsonschema.validate(data, json.loads(SCHEMA_PATH.read_text(encoding="utf-8")))
    assert stored_report(data).exercises == graded.exercises   # read back as written


# --- A class of five, graded once and reviewed ---------------------------------------------------------------------

FIVE = {   # name: (the heads.py it hands in, its answer)
    "ann": ("reference", "[B, T, C] -> view [B, T, H, D] -> transpose(1, 2) -> [B, H, T, D]."),
    "bo": ("mutant", "merge: view back to [B, T, C]."),
    "cy": ("reference", "[B, T, C]  -> view [B, T, H, D] -> transpose(1, 2) -> [B, H, T, D]."),   # ann's, spaced
    "di": ("reference", None),                                                                   # no answers.md
    "ed": ("mutant", "<script>document.title='answer'</script> [x](javascript:alert(1)) <b>raw</b>"),
}
DECISIONS = {   # name: (items, adjustment, comment) as a TA grades them
    "ann": (["1", "2", "3"], 0.0, "Clear & complete <b>well done</b>"),
    "bo": (["2", "4"], 0.5, "Only the merge; \"D\" missing"),
    "cy": (["1", "2", "3"], -0.5, "Same as another answer"),
    "di": ([], 0.0, "No answer"),
    "ed": (["2"], 0.0, "<script>alert('comment')</script>"),
}
ROSTER = "".join(f"{n},{name.title()},{name}@uni.edu,{1000 + n}\n" for n, name in enumerate(FIVE, 1))


@pytest.fixture(scope="module")
def reviewed(tmp_path_factory):
    """Five students graded once (in the sandbox), then four of their answers reviewed through the API and the
    reports and class files written again; ed's answer still awaits review."""
    from conftest import ROOT, run_grader
    from grader.review.selftest import mutant_text

    folder = tmp_path_factory.mktemp("manual")
    course_dir = course_copy(folder / "course", ["heads"])
    code = {"reference": (ROOT / "solutions" / "heads" / "heads.py").read_text(),
            "mutant": mutant_text(load_course(ROOT), "heads", ROOT / "solutions" / "heads" / "mutants" /
                                  "merge_no_transpose")}
    room = folder / "class"
    for name, (which, answer) in FIVE.items():
        (room / name / "heads").mkdir(parents=True)
        (room / name / "heads" / "heads.py").write_text(code[which])
        if answer is not None:
            (room / name / "heads" / "answers.md").write_text(f"## tensor_flow\n\n{answer}\n")
    room.chmod(0o700)
    (folder / "roster.csv").write_text("id,name,email,canvas_id\n" + ROSTER)
    out = folder / "out"
    batch = ["--course", str(course_dir), "batch", str(room), "--out", str(out), "--jobs", "2", "--roster",
             str(folder / "roster.csv"), "--format", "canvas,moodle"]
    done = run_grader(*batch, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    autograded = {name: float(row["total (10)"]) for name, row in grades_csv_rows(out).items()}
    course = load_course(course_dir)
    book = Gradebook(out / "gradebook.sqlite")
    try:
        answers = {row.student: row for row in manual.answers_to_review(book, course, *HEADS)}
        for name in ("ann", "bo", "cy", "di"):
            items, adjustment, comment = DECISIONS[name]
            manual.save_review(book, course, student=name, exercise="heads", question="tensor_flow", items=items,
                               adjustment=adjustment, comment=comment, author="ta.wu", expected_version=None,
                               answer_digest=answers[name].digest)
    finally:
        book.close()
    manual.rewrite_after_review(out, course, ["ann", "bo", "cy", "di"])
    return course, out, batch, autograded, answers


def grades_csv_rows(out) -> dict[str, dict]:
    return {r["submission"]: r for r in csv.DictReader(io.StringIO((out / "grades.csv").read_text()))}


def canvas_totals(out) -> dict[str, float]:
    rows = list(csv.reader(io.StringIO((out / "canvas.csv").read_text())))
    assert rows[1][0] == "Points Possible"
    return {"points possible": float(rows[1][-1]), **{row[0]: float(row[-1]) for row in rows[2:] if row[-1]}}


def report_json(out, name) -> dict:
    return json.loads((out / "students" / name / "report.json").read_text(encoding="utf-8"))


def rubric_points(course, out, name) -> float:
    book = Gradebook(out / "gradebook.sqlite")
    try:
        graded = manual.manual_grades(book, course, name).get(HEADS)
    finally:
        book.close()
    return graded.points if graded else 0.0


@pytest.mark.slow
def test_answers_to_review_come_from_the_grading_and_alike_ones_are_grouped(reviewed):
    _, _, _, autograded, answers = reviewed
    assert answers["ann"].text == FIVE["ann"][1] and answers["di"].text == ""
    assert answers["ann"].digest == answers["cy"].digest != answers["bo"].digest
    assert answers["ed"].text == FIVE["ed"][1]   # text, as written
    assert answers["ann"].autograde.score == autograded["ann"] == 10 > answers["bo"].autograde.score


@pytest.mark.slow
def test_a_class_of_five_totals_autograded_plus_rubric_points_in_grades_csv_and_canvas(reviewed):
    course, out, _, autograded, _ = reviewed
    # ed's answer awaits review: his report says so, his total is the autograded one and the maximum counts it
    ed = report_json(out, "ed")
    assert ed["schema_version"] == "3.3" and ed["exercises"][0]["answers"][0]["status"] == "awaiting_review"
    assert ed["grade"]["written"]["awaiting"] == [{"exercise": "heads", "question": "tensor_flow"}]
    assert "1 not reviewed yet" in ed["grade"]["message"]["en"]
    assert "awaiting review" in (out / "students" / "ed" / "report.html").read_text()
    assert (out / "class.html").read_text().count('data-awaiting="1">answers awaiting review: 1<') == 1   # ed's
    book = Gradebook(out / "gradebook.sqlite")
    try:
        items, adjustment, comment = DECISIONS["ed"]
        manual.save_review(book, course, student="ed", exercise="heads", question="tensor_flow", items=items,
                           adjustment=adjustment, comment=comment, author="ta.li", expected_version=None)
    finally:
        book.close()
    manual.rewrite_after_review(out, course, ["ed"])
    rubric = {name: rubric_points(course, out, name) for name in FIVE}
    assert rubric == {"ann": 3, "bo": 0.5, "cy": 2.5, "di": 0, "ed": 1}
    rows = grades_csv_rows(out)
    assert {name: float(row["total (13)"]) for name, row in rows.items()} == {
        name: autograded[name] + rubric[name] for name in FIVE}
    assert {name: float(row["heads (13)"]) for name, row in rows.items()} == {
        name: autograded[name] + rubric[name] for name in FIVE}
    assert rows["ann"]["status"] == "complete" and rows["cy"]["status"] == "partial"
    canvas = canvas_totals(out)
    assert canvas == {"points possible": 13, **{name.title(): autograded[name] + rubric[name] for name in FIVE}}
    moodle = list(csv.DictReader(io.StringIO((out / "moodle.csv").read_text())))
    assert {row["Full name"]: float(row[course.name]) for row in moodle} == {
        name.title(): autograded[name] + rubric[name] for name in FIVE}
    assert f"<b>{autograded['bo'] + 0.5:g}</b> / 13" in (out / "class.html").read_text()
    assert "data-awaiting" not in (out / "class.html").read_text()


@pytest.mark.slow
def test_the_report_shows_the_items_applied_and_the_comment_as_text(reviewed):
    import jsonschema

    from grader.report.model import SCHEMA_PATH

    course, out, _, autograded, _ = reviewed
    schema = json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))
    rubric = manual_rubric(course, out)
    for name in FIVE:
        data = report_json(out, name)
        jsonschema.validate(data, schema)
    ann = report_json(out, "ann")
    answer = ann["exercises"][0]["answers"][0]
    assert (answer["status"], answer["points"], answer["comment"], answer["reviewer"]) == \
        ("graded", 3, DECISIONS["ann"][2], "ta.wu")
    assert [(i["id"], i["text"]["en"]) for i in answer["items"]] == [(i.id, i.text["en"]) for i in rubric[:3]]
    assert (ann["grade"]["final"], ann["grade"]["max_score"]) == (autograded["ann"] + 3, 13)
    html = (out / "students" / "ann" / "report.html").read_text()
    assert rubric[0].text["en"] in html and "Clear &amp; complete &lt;b&gt;well done&lt;/b&gt;" in html
    assert "<b>well done</b>" not in html and "graded by" in html and "ta.wu" in html
    assert f"{autograded['ann'] + 3:g} / 13" in html
    ed = (out / "students" / "ed" / "report.html").read_text()
    assert "<script>alert" not in ed and "&lt;script&gt;alert(&#39;comment&#39;)&lt;/script&gt;" in ed
    assert "<script>document" not in ed and "<b>raw</b>" not in ed
    card = (out / "students" / "bo" / "scorecard.md").read_text()
    row = next(line for line in card.splitlines() if "Written answers" in line)
    assert "✔️ graded | 0.5 / 3" in row and "graded by: ta\\.wu" in row and "Only the merge" in row
    assert f"({rubric[3].points:g})" in row and row.count("|") - row.count("\\|") == 6
    zh = manual_render(out, "ann", "zh")
    assert "已批阅" in zh and rubric[0].text["zh"] in zh


def manual_rubric(course, out):
    book = Gradebook(out / "gradebook.sqlite")
    try:
        return manual.rubric_items(book, course, *HEADS)
    finally:
        book.close()


def manual_render(out, name, lang) -> str:
    from grader.render.templated import render_html
    from grader.report.build import stored_report

    from conftest import ROOT

    return render_html(stored_report(report_json(out, name)), ROOT / "templates", lang)


@pytest.mark.slow
def test_an_edited_rubric_item_changes_every_affected_total_and_report(reviewed):
    course, out, _, autograded, _ = reviewed
    before = {name: float(row["total (13)"]) for name, row in grades_csv_rows(out).items()}
    book = Gradebook(out / "gradebook.sqlite")
    try:   # item 2 is applied by ann, bo, cy and ed; di applied nothing
        changed = manual.edit_item(book, course, *HEADS, "2", points=0.5, text_en="Merge, said <right>",
                                   author="head.ta")
    finally:
        book.close()
    assert changed == 4
    manual.rewrite_after_review(out, course, ["ann", "bo", "cy", "ed"])
    after = {name: float(row["total (13)"]) for name, row in grades_csv_rows(out).items()}
    # item 2 from 1 point to 0.5: ann 3 -> 2.5, cy 2.5 -> 2, bo (1 - 1 + 0.5) 0.5 -> 0, ed 1 -> 0.5; di applied none
    assert {name: round(after[name] - before[name], 4) for name in FIVE} == {
        "ann": -0.5, "cy": -0.5, "bo": -0.5, "ed": -0.5, "di": 0}
    assert canvas_totals(out)["Ann"] == after["ann"]
    for name in ("ann", "bo", "cy", "ed"):
        data = report_json(out, name)
        answer = data["exercises"][0]["answers"][0]
        assert next(i for i in answer["items"] if i["id"] == "2")["points"] == 0.5
        assert data["grade"]["final"] == after[name]
        assert "Merge, said &lt;right&gt;" in (out / "students" / name / "report.html").read_text()


@pytest.mark.slow
@pytest.mark.parametrize("how", ["--regrade", "--rejudge"])
def test_a_regrade_or_a_rejudging_keeps_every_manual_grade(reviewed, how):
    from conftest import run_grader

    course, out, batch, _, _ = reviewed
    before = grades_csv_rows(out)
    reports = {name: report_json(out, name)["exercises"][0]["answers"] for name in FIVE}
    done = run_grader(*batch, how, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    after = grades_csv_rows(out)
    assert {name: after[name]["total (13)"] for name in FIVE} == {name: before[name]["total (13)"] for name in FIVE}
    assert {name: report_json(out, name)["exercises"][0]["answers"] for name in FIVE} == reports
    assert all(a[0]["status"] == "graded" for a in reports.values())
    book = Gradebook(out / "gradebook.sqlite")
    try:
        assert len(manual.manual_grades(book, course)) == 5
        assert {e.action for e in manual.review_log(book)} >= {manual.SEEDED, manual.SAVED, manual.ITEM_EDITED}
    finally:
        book.close()


def test_one_decision_grades_alike_answers_together_or_none_of_them(storage):
    course, book = storage
    rows = {r.student: r for r in manual.answers_to_review(book, course, *HEADS)}
    assert rows["ann"].digest == rows["bob"].digest
    saved = manual.save_reviews(book, course, students={"ann": None, "bob": None}, exercise="heads",
                                question="tensor_flow", items=["1"], adjustment=0, comment="alike", author="ta1",
                                answer_digest=rows["ann"].digest)
    assert [(r.student, r.version, r.answer_digest) for r in saved] == [("ann", 1, rows["ann"].digest),
                                                                       ("bob", 1, rows["ann"].digest)]
    save(course, book, "cy", ["2"], None)
    # cy was graded meanwhile: the group's save (made when cy had no review) saves none of the three
    with pytest.raises(manual.Conflict) as refused:
        manual.save_reviews(book, course, students={"ann": 1, "bob": 1, "cy": None}, exercise="heads",
                            question="tensor_flow", items=["3"], adjustment=0, comment="", author="ta2")
    assert refused.value.current.student == "cy"
    assert [manual.review(book, n, *HEADS).items for n in ("ann", "bob", "cy")] == [("1",), ("1",), ("2",)]
    assert [(e.action, e.student) for e in manual.review_log(book)][-1] == (manual.CONFLICT, "cy")


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_points_that_are_no_number_and_a_student_the_gradebook_lacks_are_refused(storage, bad):
    course, book = storage
    with pytest.raises(manual.ReviewError, match="not a number of points"):
        save(course, book, "ann", ["1"], None, adjustment=bad)
    with pytest.raises(manual.ReviewError, match="not a number of points"):
        manual.edit_item(book, course, *HEADS, "1", points=bad, author="ta")
    with pytest.raises(manual.ReviewError, match="holds no submission 'zed'"):
        save(course, book, "zed", ["1"], None)
    assert manual.review(book, "ann", *HEADS) is None and save(course, book, "ann", ["1"], None).version == 1
