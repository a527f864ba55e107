"""One feedback policy on every route that shows students anything (grader.feedback).

A class graded once (a stand-in for grader batch that records real reports: every rope criterion failed, each with
a message, a hint and evidence of its own that no other criterion says) goes through the classroom sync's commit
comment and status, the Gradescope results and the pages handed out. With the rope criteria of kinds `values` and
`gradient` set to `after_due_date`, nothing of their messages, hints or evidence reaches a student before the due
date or the release; after `grader classroom publish` every one does, and the visible criteria are shown whole
throughout (the positive control: the route shows what it may). Past the attempt cap a student is told so and
shown nothing of the criteria held back; a queued commit is graded when the next window opens."""

import datetime as dt
import json
import re
from functools import partial
from pathlib import Path


from grader.batch.gradebook import Gradebook, content_hash, grader_key
from grader.classroom.github import POSTED, STATE_FILE, GitHub, publish, sync
from grader.course import CRITERIA_FILE, import_course_module, load_course
from grader.feedback import (AFTER_DUE_DATE, NOTHING, VISIBLE, load_feedback, mark_published,
                             published_at, student_view, visibility, write_handed_out)
from grader.i18n import LANGS
from grader.render.exports import render_gradescope
from grader.render.files import write_reports
from grader.report.model import SCHEMA_VERSION, CriterionResult, ExerciseResult, Report
from grader.worker.protocol import Status

from conftest import course_copy
from test_classroom import ORG, PREFIX, TOKEN, FakeGitHub

ROPE = "exercises/rope/rope.py"
DUE = dt.datetime(2026, 12, 1, 23, 59, 59, tzinfo=dt.UTC)
HOUR = dt.timedelta(hours=1)
POLICY = f"""
[classroom]
deadline = "{DUE.isoformat().replace('+00:00', 'Z')}"
"""
HELD_BACK = '"kind:values" = "after_due_date", "kind:gradient" = "after_due_date"'


def secrets(criterion_id: str) -> list[str]:
    """What only that criterion's verdict says: its message, hint and evidence (no character that Markdown or HTML
    would escape)."""
    word = criterion_id.replace("_", "")
    return [f"MSG-{word}-7f3", f"HINT-{word}-7f3", f"EVIDENCE-{word}-7f3"]


def title(criterion_id: str) -> str:
    return "title " + criterion_id.replace("_", "")


def make_course(folder: Path, feedback: str = "") -> Path:
    course_copy(folder, ["rope"])
    toml = folder / "course.toml"
    text = toml.read_text().replace("visibility = {}", f"visibility = {{ {HELD_BACK} }}")
    toml.write_text(text + POLICY + feedback)
    return folder


def kinds(course, exercise_id: str) -> dict[str, str]:
    """Each criterion's kind, as its criteria module declares it."""
    module = import_course_module(course, exercise_id, CRITERIA_FILE)
    return {fn.criterion.id: fn.criterion.kind for fn in vars(module).values() if hasattr(fn, "criterion")}


def fake_report(course, student: str, exercise_id: str = "rope") -> Report:
    """Every criterion of the exercise failed, each saying its own secrets."""
    ex = course.exercise(exercise_id)
    kind = kinds(course, exercise_id)
    criteria = [CriterionResult(id=c, kind=kind[c], title=dict.fromkeys(LANGS, title(c)),
                                hint=dict.fromkeys(LANGS, secrets(c)[1]), points=0.0, max_points=points,
                                status=Status.FAILED, message=dict.fromkeys(LANGS, secrets(c)[0]),
                                evidence={"seen": secrets(c)[2]})
                for c, points in ex.points.items()]
    exercise = ExerciseResult(id=exercise_id, title=dict.fromkeys(LANGS, exercise_id), file=ex.file, score=0.0,
                              max_score=ex.max_points, status=Status.FAILED, message=dict.fromkeys(LANGS, ""),
                              criteria=criteria)
    return Report(schema_version=SCHEMA_VERSION, submission=student, course=course.name, score=0.0,
                  max_score=ex.max_points, percent=0.0, sandbox={"level": "basic", "layers": [], "note": ""},
                  grader_version="test", torch_version="test", started_at="2026-12-01T00:00:00Z", duration_s=1.0,
                  exercises=[exercise])


def stand_in_grader(course, graded: list[str], exercise_id: str = "rope"):
    """grade_batch as the sync calls it: a report per submission (fake_report) written and stored as grader batch
    does, without running it; `graded` lists every submission graded."""
    def grade_batch(submissions: Path, out: Path) -> dict:
        book = Gradebook(out / "gradebook.sqlite")
        try:
            for folder in sorted(submissions.iterdir()):
                graded.append(folder.name)
                report = fake_report(course, folder.name, exercise_id)
                write_reports(report, out / "students" / folder.name, course.root / "templates", "en",
                              ("json", "md", "html"))
                book.store(folder.name, content_hash(course, folder), grader_key(course),
                           {"score": 0.0, "max_score": report.max_score, "percent": 0.0, "status": "complete",
                            "message": {"en": ""}, "graded_at": "2026-12-01T00:00:00Z"}, [])
        finally:
            book.close()
        return {}
    return grade_batch


def held_back(course) -> list[str]:
    kind = kinds(course, "rope")
    return [c for c in course.exercise("rope").points if visibility(course, "rope", c, kind[c]) == AFTER_DUE_DATE]


def student_texts(fake: FakeGitHub) -> str:
    """Everything posted where the student reads it: comment bodies and status descriptions."""
    return "\n".join(body.get("body", "") + body.get("description", "") for _, body in fake.posts())


def test_a_sync_before_the_deadline_shows_no_held_back_verdict_and_publish_shows_them_all(fake, tmp_path):
    course = load_course(make_course(tmp_path / "course"))
    hidden = held_back(course)
    assert sorted(hidden) == sorted(c for c in course.exercise("rope").points
                                    if c not in ("output_shape_dtype", "rejects_bad_input"))
    for student in ("alice", "bob"):
        fake.commit(f"{PREFIX}-{student}", {ROPE: f"# {student}\n"}, DUE - 3 * HOUR)
    out, graded = tmp_path / "gradebook", []
    client = GitHub(TOKEN, fake.url)

    done = sync(course, client, ORG, PREFIX, out, stand_in_grader(course, graded), clock=lambda: DUE - HOUR)
    assert [r.status for r in done.rows] == [POSTED, POSTED] and graded == ["alice", "bob"], done.rows
    before = student_texts(fake)
    for criterion in hidden:
        assert not any(secret in before for secret in secrets(criterion)), criterion
        assert title(criterion) in before, "shown as its points only (the default)"
    for criterion in ("output_shape_dtype", "rejects_bad_input"):   # the positive control: visible ones whole
        assert all(before.count(secret) == 2 for secret in secrets(criterion)[:2]), criterion
    assert "shown after the due date" in before
    assert published_at(out) is None

    # Gradescope: the same policy, each held-back test marked for Gradescope to keep until the due date, and
    # nothing of them in what Gradescope always shows (the top-level output)
    report = Report.from_dict(json.loads((out / "students" / "alice" / "report.json").read_text()))
    results = json.loads(render_gradescope(report, "en", partial(visibility, course)))
    marks = {test["name"].split(": ")[1]: test["visibility"] for test in results["tests"]}
    assert marks == {title(c): AFTER_DUE_DATE if c in hidden else VISIBLE for c in course.exercise("rope").points}
    always = results["output"] + "".join(test["output"] for test in results["tests"] if test["visibility"] == VISIBLE)
    assert not any(secret in always for criterion in hidden for secret in secrets(criterion))
    assert secrets("rejects_bad_input")[0] in always

    fake.calls.clear()
    released = publish(course, client, ORG, PREFIX, out, clock=lambda: DUE - HOUR / 2)
    assert [r.status for r in released.rows] == [POSTED, POSTED] and released.left == 0
    after = student_texts(fake)
    for criterion in hidden:
        assert all(after.count(secret) == 2 for secret in secrets(criterion)[:2]), criterion
    assert published_at(out) == "2026-12-01T23:29:59Z"
    records = json.loads((out / STATE_FILE).read_text())["repositories"]
    assert all(record["released"] == record["posted"] for record in records.values())

    fake.calls.clear()
    assert publish(course, client, ORG, PREFIX, out).rows == [] and fake.posts() == [], "each released once"
    fake.commit(f"{PREFIX}-alice", {ROPE: "# alice again\n"}, DUE - HOUR / 4)
    again = sync(course, client, ORG, PREFIX, out, stand_in_grader(course, graded), clock=lambda: DUE - HOUR / 4)
    assert [r.student for r in again.rows] == ["alice"]
    assert all(secret in student_texts(fake) for criterion in hidden for secret in secrets(criterion)[:2]), \
        "once published, a sync shows everything"


def test_after_the_due_date_the_held_back_criteria_are_shown(fake, tmp_path):
    course = load_course(make_course(tmp_path / "course"))
    fake.commit(f"{PREFIX}-alice", {ROPE: "# late\n"}, DUE - HOUR)
    sync(course, GitHub(TOKEN, fake.url), ORG, PREFIX, tmp_path / "out", stand_in_grader(course, []),
         clock=lambda: DUE + HOUR)
    posted = student_texts(fake)
    assert all(secret in posted for criterion in held_back(course) for secret in secrets(criterion)[:2])


def test_hidden_as_nothing_leaves_the_criteria_and_their_points_out(tmp_path):
    course = load_course(make_course(tmp_path / "course", '\n[feedback]\nhidden = "nothing"\n'))
    feedback = load_feedback(course)
    assert feedback.hidden == NOTHING and feedback.due == DUE
    report = fake_report(course, "alice")
    view = student_view(report, course, DUE - HOUR, False, feedback)
    assert [c.id for c in view.exercises[0].criteria] == ["output_shape_dtype", "rejects_bad_input"]
    assert view.max_score == view.exercises[0].max_score == 2 and view.grade is None
    assert len(report.exercises[0].criteria) == 10, "the report itself is untouched"
    whole = student_view(report, course, DUE - HOUR, True, feedback)
    assert whole.to_dict() == report.to_dict()


CAP = '\n[feedback]\nattempts = 1\nper = "day"\npast_cap = "{past}"\n'


def test_past_the_attempt_cap_a_commit_is_graded_and_shows_nothing_held_back(fake, tmp_path):
    """After the due date everything would be shown: past the cap, nothing of it is."""
    course = load_course(make_course(tmp_path / "course", CAP.format(past="withheld")))
    out, graded, client = tmp_path / "out", [], GitHub(TOKEN, fake.url)
    now = DUE + 2 * HOUR
    fake.commit(f"{PREFIX}-alice", {ROPE: "# one\n"}, now - HOUR)
    sync(course, client, ORG, PREFIX, out, stand_in_grader(course, graded), clock=lambda: now)
    first = student_texts(fake)
    assert "Graded attempts left this day: 0 of 1" in first
    assert secrets("relative_position")[0] in first, "within the cap after the due date: shown"

    fake.calls.clear()
    fake.commit(f"{PREFIX}-alice", {ROPE: "# two\n"}, now)
    rows = sync(course, client, ORG, PREFIX, out, stand_in_grader(course, graded), clock=lambda: now + HOUR).rows
    assert [r.status for r in rows] == [POSTED] and graded == ["alice", "alice"]
    second = student_texts(fake)
    assert "Attempt cap reached (1 graded commits per day)" in second
    hidden = held_back(course)
    assert not any(title(c) in second or secret in second for c in hidden for secret in secrets(c))
    assert secrets("rejects_bad_input")[0] in second, "the visible criteria are still shown"
    assert re.search(r"score 0/2 \(0%\)", second), "the status counts the points shown only"


def test_past_the_attempt_cap_a_queued_commit_is_graded_in_the_next_window(fake, tmp_path):
    course = load_course(make_course(tmp_path / "course", CAP.format(past="queued")))
    out, graded, client = tmp_path / "out", [], GitHub(TOKEN, fake.url)
    now = DUE - 5 * HOUR
    fake.commit(f"{PREFIX}-alice", {ROPE: "# one\n"}, now - HOUR)
    sync(course, client, ORG, PREFIX, out, stand_in_grader(course, graded), clock=lambda: now)
    second = fake.commit(f"{PREFIX}-alice", {ROPE: "# two\n"}, now)
    fake.calls.clear()
    rows = sync(course, client, ORG, PREFIX, out, stand_in_grader(course, graded), clock=lambda: now + HOUR).rows
    assert [(r.status, r.sha) for r in rows] == [("queued", second)] and graded == ["alice"]
    notice = student_texts(fake)
    assert "graded when the next window opens at 2026-12-02T00:00:00Z" in notice
    assert not any(secret in notice for c in course.exercise("rope").points for secret in secrets(c))

    fake.calls.clear()
    assert sync(course, client, ORG, PREFIX, out, stand_in_grader(course, graded),
                clock=lambda: now + 2 * HOUR).rows == [] and fake.posts() == [], "told once"
    rows = sync(course, client, ORG, PREFIX, out, stand_in_grader(course, graded), clock=lambda: now + 6 * HOUR).rows
    assert [(r.status, r.sha) for r in rows] == [(POSTED, second)] and graded == ["alice", "alice"]


def test_the_pages_handed_out_follow_the_policy_and_the_release(tmp_path):
    """`grader classroom reports` (write_handed_out): before the release the held-back criteria's messages, hints and
    evidence are in no page; after `mark_published` every message and hint is; the instructor's pages stay whole."""
    course = load_course(make_course(tmp_path / "course"))
    submissions, out = tmp_path / "class", tmp_path / "out"
    (submissions / "alice" / "rope").mkdir(parents=True)
    (submissions / "alice" / "rope" / "rope.py").write_text("# alice\n")
    stand_in_grader(course, [])(submissions, out)
    hidden = held_back(course)
    assert write_handed_out(course, out, tmp_path / "before", "en", DUE - HOUR) == ["alice"]
    for page in ("report.html", "scorecard.md"):
        text = (tmp_path / "before" / "alice" / page).read_text()
        assert not any(secret in text for c in hidden for secret in secrets(c)), page
        assert secrets("rejects_bad_input")[1] in text, page
        assert all(secret in (out / "students" / "alice" / page).read_text() for c in hidden
                   for secret in secrets(c)[:2]), "the instructor's pages are whole"
    mark_published(out, DUE - HOUR)
    write_handed_out(course, out, tmp_path / "after", "en", DUE - HOUR)
    for page in ("report.html", "scorecard.md"):
        text = (tmp_path / "after" / "alice" / page).read_text()
        assert all(secret in text for c in hidden for secret in secrets(c)[:2]), page


def test_grader_check_shows_and_ships_only_what_the_policy_calls_visible(tmp_path, capsys):
    """A criterion that `visible` names but whose `visibility` holds it back is neither shown by `grader check`
    nor shipped in the handout's checker; the ones still visible are (the positive control)."""
    from grader.classroom.checker import visible_tests
    from grader.grading.precheck import _show_visible
    from grader.render.labels import LABELS

    folder = make_course(tmp_path / "course")
    toml = folder / "course.toml"
    toml.write_text(toml.read_text().replace('visible = ["kind:shape"', 'visible = ["relative_position", "kind:shape"'))
    course = load_course(folder)
    ex = course.exercise("rope")
    assert ex.is_visible("relative_position", "values") and "relative_position" in held_back(course)
    shipped = {fn.criterion.id for fn in visible_tests(course, ex).values()}
    assert shipped == {"output_shape_dtype", "rejects_bad_input"}
    rows: list = []
    assert _show_visible(ex, fake_report(course, "alice").exercises[0], LABELS["en"], "en", rows) is False
    shown = capsys.readouterr().out + json.dumps(rows)
    assert not any(secret in shown for c in held_back(course) for secret in secrets(c))
    assert all(secret in shown for c in shipped for secret in secrets(c)[:2])


def test_the_publish_command_posts_each_whole_scorecard_once(fake, tmp_path):
    import os
    import subprocess
    import sys

    from conftest import ROOT

    folder = make_course(tmp_path / "course")
    course = load_course(folder)
    fake.commit(f"{PREFIX}-alice", {ROPE: "# alice\n"}, DUE - 3 * HOUR)
    out = tmp_path / "gradebook"
    sync(course, GitHub(TOKEN, fake.url), ORG, PREFIX, out, stand_in_grader(course, []), clock=lambda: DUE - HOUR)
    fake.calls.clear()
    command = [sys.executable, "-m", "grader", "--course", str(folder), "classroom", "publish", "--org", ORG,
               "--prefix", PREFIX, "--out", str(out), "--api-url", fake.url]
    env = {**os.environ, "GRADER_TOKEN": TOKEN}
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"{PREFIX}-alice ") and ": posted: " in done.stdout
    assert all(secret in student_texts(fake) for c in held_back(course) for secret in secrets(c)[:2])
    again = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, env=env, timeout=300)
    assert again.returncode == 0 and ", 0 repositories posted," in again.stdout
    assert len(fake.posts()) == 2, "a status and a comment, once"
