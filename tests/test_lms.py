"""Grades a learning management system imports as they are: grades.csv, canvas.csv and moodle.csv are blank (never
0) where there is no grade, and say why; Canvas's and Moodle's files, parsed back, find every student of the roster
by the identifiers the roster holds. The Canvas push (canvasapi) against a local fake of Canvas's REST endpoints on
127.0.0.1: each call and its body, one PUT per student with a grade, nothing sent again unchanged, one student's
refusal that student's row, a dry run that sends nothing. No grading: the gradebook is written by hand."""

from __future__ import annotations

import csv
import datetime as dt
import io
import json
import os
import re
import subprocess
import sys
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from conftest import ROOT, course_copy
from test_feedback_policy import fake_report, secrets
from grader.course import load_course
from grader.batch.gradebook import GRADER_ERROR, UNREADABLE, Gradebook, grader_key, grades_csv
from grader.judge.session import criteria_of
from grader.classroom.lms import LmsError, RedirectRefused, canvas_csv, canvas_push, canvas_user, moodle_csv
from grader.feedback import VISIBLE, handed_out, mark_published, visibility
from grader.render.files import write_reports
from grader.batch.roster import Student, read_roster

EXERCISES = ["heads"]
ROSTER = ("id,name,email,sis_user_id,sis_login_id,canvas_id,section,idnumber\n"
          "2024001,Ann Lee,ann@uni.edu,S-1,ann.lee,,A,N1\n"      # graded: full marks
          "2024002,Bo Chen,bo@uni.edu,S-2,,1002,A,\n"           # graded: partial (by Canvas id)
          "2024003,Cy Wu,cy@uni.edu,,cy.wu@uni.edu,,B,N3\n"     # an unreadable zip: no grade
          "2024004,Di Ma,di@uni.edu,S-4,,,B,N4\n"               # the grader failed: no grade
          "2024005,Ed Xu,ed@uni.edu,S-5,,,B,N5\n"               # no submission
          "2024006,Fay Li,fay@uni.edu,S-6,,,B,N6\n")            # two submissions: placed by no guess
TOKEN = "canvas-test-token"


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    return load_course(course_copy(tmp_path_factory.mktemp("course"), EXERCISES))


def store(book: Gradebook, course, name: str, status: str = "graded", failed=(), message=None) -> None:
    key = grader_key(course)
    rows = []
    for ex in course.exercises:
        for meta in criteria_of(ex.id):
            st = "failed" if meta.id in failed else "passed"
            if status in (UNREADABLE, GRADER_ERROR):
                st = "error"
            rows.append({"exercise": ex.id, "criterion": meta.id, "kind": meta.kind, "status": st,
                         "points": ex.points[meta.id] if st == "passed" else 0.0, "max_points": ex.points[meta.id],
                         "message": {"en": f"{meta.id} {st}", "zh": f"中文 {meta.id} {st}"}})
    score, max_score = sum(r["points"] for r in rows), sum(r["max_points"] for r in rows)
    book.store(name, f"hash-{name}", key, {
        "score": score, "max_score": max_score, "percent": round(100 * score / max_score, 2), "status": status,
        "message": message or {"en": "m", "zh": "m"}, "graded_at": "t",
        "report_dir": None if status == UNREADABLE else f"/out/students/{name}"}, rows)


@pytest.fixture
def class_out(tmp_path, course):
    """A batch's folder: the gradebook, the roster it was written with, each graded student's scorecard."""
    out = tmp_path / "out"
    (tmp_path / "roster.csv").write_text(ROSTER)
    roster = read_roster(tmp_path / "roster.csv")
    book = Gradebook(out / "gradebook.sqlite")
    store(book, course, "2024001")
    store(book, course, "bo@uni.edu", failed=("split_values",))
    store(book, course, "cy_wu.zip", UNREADABLE, message={"en": "cy_wu.zip could not be unpacked: BadZipFile",
                                                          "zh": "cy_wu.zip 无法解压：BadZipFile"})
    store(book, course, "di", GRADER_ERROR, message={"en": "the grader failed on heads", "zh": "评分器在 heads 上出错"})
    store(book, course, "fay", failed=("round_trip",))
    store(book, course, "fay.zip")
    store(book, course, "stranger")
    book.set_settings({"roster": [s.record() for s in roster], "lang": "en", "excel": False, "formats": []})
    book.close()
    for name in ("2024001", "bo@uni.edu", "fay", "fay.zip", "stranger"):
        # the batch's pages: report.json, and the instructor's whole scorecard.md
        write_reports(fake_report(course, name, "heads"), out / "students" / name, course.templates, "en",
                      ("json", "md"))
    return out, roster


def table(text: str) -> list[list[str]]:
    return list(csv.reader(io.StringIO(text)))


def test_grades_csv_is_blank_where_there_is_no_grade_and_says_why(course, class_out):
    out, roster = class_out
    book = Gradebook(out / "gradebook.sqlite")
    rows = {r["id"] + r["submission"]: r for r in csv.DictReader(io.StringIO(grades_csv(course, book,
                                                                                        grader_key(course), roster,
                                                                                        "zh")))}
    book.close()
    grade_columns = ["heads (10)", "raw (10)", "penalty", "total (10)", "percent"]
    assert [rows["20240012024001"][c] for c in grade_columns] == ["10", "10", "0", "10", "100"]
    assert [rows["2024002bo@uni.edu"][c] for c in grade_columns] == ["8", "8", "0", "8", "80"]
    for who, reason in [("2024003cy_wu.zip", "cy_wu.zip 无法解压：BadZipFile"), ("2024004di", "评分器在 heads 上出错"),
                        ("2024005", "没有提交")]:
        assert [rows[who][c] for c in grade_columns] == [""] * 5, who   # an importer records a 0 as a 0
        assert rows[who]["reason"] == reason
    assert rows["20240012024001"]["reason"] == "" and rows["2024003cy_wu.zip"]["status"] == "unreadable"


def test_canvas_csv_parsed_back_finds_each_student_by_the_rosters_identifiers(course, class_out):
    out, roster = class_out
    book = Gradebook(out / "gradebook.sqlite")
    text = canvas_csv(course, book, roster)
    book.close()
    header, points, *rows = table(text)
    # what Canvas's gradebook importer reads: Student, ID, SIS User ID, SIS Login ID, Section, then assignments
    assert header == ["Student", "ID", "SIS User ID", "SIS Login ID", "Section", course.name]
    assert not re.search(r"\(\d+\)$", header[-1]), "'Title (123)' would be Canvas's assignment 123"
    assert points[0] == "Points Possible" and points[5] == "10"
    by_identifier = {}
    for row in rows:
        canvas_id, sis, login = row[1], row[2], row[3]
        student = next(s for s in roster if (canvas_id and s.column("canvas_id") == canvas_id)
                       or (not canvas_id and sis and s.column("sis_user_id") == sis)
                       or (not canvas_id and not sis and s.column("sis_login_id") == login))
        assert row[0] == student.name and row[4] == student.column("section")
        by_identifier[student.id] = row[5]
    assert by_identifier == {"2024001": "10", "2024002": "8", "2024003": "", "2024004": "", "2024005": "",
                             "2024006": ""}, "blank where there is no grade; two submissions are placed by no guess"
    assert len(rows) == len(roster), "a submission no student holds is not Canvas's to place"


def test_canvas_needs_an_identifier_it_matches_on(course, class_out):
    out, _ = class_out
    book = Gradebook(out / "gradebook.sqlite")
    try:
        with pytest.raises(LmsError, match="canvas_id, sis_user_id or sis_login_id"):
            canvas_csv(course, book, [Student("2024001", "Ann Lee", "ann@uni.edu")])
        with pytest.raises(LmsError, match="needs --roster"):
            canvas_csv(course, book, None)
    finally:
        book.close()


def test_moodle_csv_parsed_back_maps_each_student_by_id_number_or_email(course, class_out):
    out, roster = class_out
    book = Gradebook(out / "gradebook.sqlite")
    text = moodle_csv(course, book, roster, "en")
    book.close()
    rows = list(csv.DictReader(io.StringIO(text)))
    assert list(rows[0]) == ["Full name", "ID number", "Email address", course.name, "Feedback"]
    by_email = {r["Email address"]: r for r in rows}
    assert set(by_email) == {s.email for s in roster}
    assert {s.id: by_email[s.email][course.name] for s in roster} == {
        "2024001": "10", "2024002": "8", "2024003": "", "2024004": "", "2024005": "", "2024006": ""}
    assert by_email["bo@uni.edu"]["ID number"] == "2024002", "no idnumber: the roster's id stands in"
    assert by_email["ann@uni.edu"]["ID number"] == "N1"
    assert by_email["cy@uni.edu"]["Feedback"] == "cy_wu.zip could not be unpacked: BadZipFile"
    assert by_email["fay@uni.edu"]["Feedback"].startswith("2 submissions (fay, fay.zip)")
    assert "final 8/10 (80%)" in by_email["bo@uni.edu"]["Feedback"]


def test_canvas_users_are_addressed_as_the_api_takes_them():
    assert canvas_user(Student("1", "", "", {"canvas_id": "1002", "sis_user_id": "S-2"})) == "1002"
    assert canvas_user(Student("1", "", "", {"sis_user_id": "S/1"})) == "sis_user_id:S%2F1"
    assert canvas_user(Student("1", "", "", {"sis_login_id": "cy.wu@uni.edu"})) == "sis_login_id:cy%2Ewu%40uni%2Eedu"
    assert canvas_user(Student("1", "", "")) is None


def test_a_canvas_gradebook_export_reads_as_a_roster(tmp_path):
    export = tmp_path / "export.csv"
    export.write_text('Student,ID,SIS User ID,SIS Login ID,Section,Transformer (77)\n'
                      '    Points Possible,,,,,156\n'
                      '"Lee, Ann",1001,S-1,ann.lee,A,12\n')
    [ann] = read_roster(export)
    assert (ann.id, ann.name, ann.column("canvas_id"), ann.column("sis_user_id"), ann.column("section")) == \
        ("1001", "Lee, Ann", "1001", "S-1", "A")


# --- The push, against a fake Canvas ------------------------------------------------------------------------------

class FakeCanvas:
    """Canvas's REST endpoints canvasapi calls for a push: the course, the assignment, each submission's PUT.
    Records every call (method, path, form body, Authorization); `refuse` makes one user's PUT fail; `redirect`
    answers a request for a path it names with a 307 to the address it gives."""

    def __init__(self, points: float = 10.0):
        self.calls: list[tuple[str, str, dict, str | None]] = []
        self.points = points
        self.refuse: set[str] = set()
        self.redirect: dict[str, str] = {}
        self.lock = threading.Lock()


def serve(fake: FakeCanvas):
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def _answer(self, code: int, payload) -> None:
            data = json.dumps(payload).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _record(self) -> dict:
            length = int(self.headers.get("Content-Length") or 0)
            body = urllib.parse.parse_qs(self.rfile.read(length).decode(), keep_blank_values=True) if length else {}
            with fake.lock:
                fake.calls.append((self.command, self.path, body, self.headers.get("Authorization")))
            return body

        def _redirected(self) -> bool:
            if self.path not in fake.redirect:
                return False
            self.send_response(307)
            self.send_header("Location", fake.redirect[self.path])
            self.send_header("Content-Length", "0")
            self.end_headers()
            return True

        def do_GET(self):
            self._record()
            if self._redirected():
                return None
            if self.path == "/api/v1/courses/7":
                return self._answer(200, {"id": 7, "name": "Transformers"})
            if self.path == "/api/v1/courses/7/assignments/42":
                return self._answer(200, {"id": 42, "course_id": 7, "name": "Transformer",
                                          "points_possible": fake.points})
            return self._answer(404, {"errors": [{"message": "The specified resource does not exist."}]})

        def do_PUT(self):
            body = self._record()
            if self._redirected():
                return None
            m = re.fullmatch(r"/api/v1/courses/7/assignments/42/submissions/([^/?]+)(\?.*)?", self.path)
            if m is None:
                return self._answer(404, {"errors": [{"message": "The specified resource does not exist."}]})
            if m[1] in fake.refuse:
                return self._answer(400, {"errors": [{"message": "user not enrolled"}]})
            return self._answer(200, {"id": 1, "assignment_id": 42, "user_id": m[1],
                                      "grade": body["submission[posted_grade]"][0]})

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def _served():
    fake = FakeCanvas()
    server = serve(fake)
    yield fake, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


canvas = pytest.fixture(_served, name="canvas")
# Another host as far as an origin goes: the same fake on another loopback port, recording what reaches it.
foreign = pytest.fixture(_served, name="foreign")


PUTS = {"sis_user_id:S-1": ("10", "2024001"), "1002": ("8", "bo@uni.edu")}   # Ann by SIS id, Bo by Canvas id


def test_the_push_sends_one_put_per_student_with_a_grade_and_the_scorecard(course, class_out, canvas):
    out, roster = class_out
    fake, url = canvas
    sent = canvas_push(course, out, roster, "7", "42", url, TOKEN)
    assert [(method, path) for method, path, _, _ in fake.calls] == [
        ("GET", "/api/v1/courses/7"), ("GET", "/api/v1/courses/7/assignments/42"),
        *[("PUT", f"/api/v1/courses/7/assignments/42/submissions/{user}") for user in PUTS]]
    assert all(auth == f"Bearer {TOKEN}" for *_, auth in fake.calls)
    for _, path, body, _ in fake.calls[2:]:
        grade, submission = PUTS[path.rsplit("/", 1)[1]]
        assert body == {"submission[posted_grade]": [grade],
                        "comment[text_comment]": [handed_out(course, out, submission, "en")["scorecard.md"]]}
    assert {s.student.id: s.status for s in sent} == {"2024001": "sent", "2024002": "sent", "2024003": "skipped",
                                                      "2024004": "skipped", "2024005": "skipped",
                                                      "2024006": "skipped"}
    assert "could not be unpacked" in next(s for s in sent if s.student.id == "2024003").said.texts()["en"]

    fake.calls.clear()
    again = canvas_push(course, out, roster, "7", "42", url, TOKEN)
    assert [m for m, *_ in fake.calls] == ["GET", "GET"], "what was sent unchanged is not sent again"
    assert {s.status for s in again if s.grade} == {"unchanged"}
    fake.calls.clear()
    canvas_push(course, out, roster, "7", "42", url, TOKEN, force=True)
    assert [m for m, *_ in fake.calls] == ["GET", "GET", "PUT", "PUT"]


def test_one_students_refusal_is_that_students_row(course, class_out, canvas):
    out, roster = class_out
    fake, url = canvas
    fake.refuse = {"1002"}
    sent = {s.student.id: s for s in canvas_push(course, out, roster, "7", "42", url, TOKEN)}
    assert (sent["2024001"].status, sent["2024002"].status) == ("sent", "failed")
    assert "user not enrolled" in sent["2024002"].said.texts()["en"]
    fake.refuse, fake.calls = set(), []
    canvas_push(course, out, roster, "7", "42", url, TOKEN)
    assert [path.rsplit("/", 1)[1] for m, path, *_ in fake.calls if m == "PUT"] == ["1002"], "only the failed one"


def test_an_assignment_worth_other_points_is_refused_before_any_put(course, class_out, canvas):
    out, roster = class_out
    fake, url = canvas
    fake.points = 100.0
    with pytest.raises(LmsError, match="worth 100.0 points and the course 10"):
        canvas_push(course, out, roster, "7", "42", url, TOKEN)
    assert [m for m, *_ in fake.calls] == ["GET", "GET"]
    with pytest.raises(LmsError, match="course 7, assignment 43"):
        canvas_push(course, out, roster, "7", "43", url, TOKEN)


BO_PUT = "/api/v1/courses/7/assignments/42/submissions/1002"


def test_a_redirect_to_another_host_is_refused_and_nothing_reaches_it(course, class_out, canvas, foreign):
    out, roster = class_out
    fake, url = canvas
    elsewhere, other = foreign
    fake.redirect = {BO_PUT: other + BO_PUT}
    rows = []
    with pytest.raises(RedirectRefused, match=f"redirect to another host \\({re.escape(other + BO_PUT)}\\)"):
        canvas_push(course, out, roster, "7", "42", url, TOKEN, progress=rows.append)
    assert elsewhere.calls == [], "no grade, comment or token reached the other host"
    assert [m for m, *_ in fake.calls] == ["GET", "GET", "PUT", "PUT"]
    assert [(r.student.id, r.status) for r in rows] == [("2024001", "sent"), ("2024002", "failed")]

    fake.redirect = {"/api/v1/courses/7": other + "/api/v1/courses/7"}   # before any grade, too
    with pytest.raises(RedirectRefused):
        canvas_push(course, out, roster, "7", "42", url, TOKEN, force=True)
    assert elsewhere.calls == []

    fake.redirect, fake.calls = {BO_PUT: url + "/api/v1/courses/7/assignments/42/submissions/1002?moved=1"}, []
    sent = canvas_push(course, out, roster, "7", "42", url, TOKEN)   # within Canvas's own origin: followed
    assert [(m, p) for m, p, *_ in fake.calls if m == "PUT"] == [("PUT", BO_PUT), ("PUT", BO_PUT + "?moved=1")]
    assert {s.student.id: s.status for s in sent}["2024002"] == "sent"


def test_the_command_says_a_refused_redirect_in_one_line_with_its_own_status(course, class_out, canvas, foreign):
    from grader.cli import EXIT_REDIRECT_REFUSED

    out, _ = class_out
    fake, url = canvas
    elsewhere, other = foreign
    fake.redirect = {BO_PUT: other + BO_PUT}
    done = subprocess.run([sys.executable, "-m", "grader", "--course", str(course.root), "lms", "canvas", str(out),
                           "--course", "7", "--assignment", "42", "--url", url], capture_output=True, text=True,
                          cwd=ROOT, env={**os.environ, "CANVAS_TOKEN": TOKEN}, timeout=120)
    assert EXIT_REDIRECT_REFUSED not in (0, 1, 2, 3) and done.returncode == EXIT_REDIRECT_REFUSED, done.stderr
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("grader: Canvas at "), done.stderr
    assert "Bo Chen (2024002): failed" in done.stdout and elsewhere.calls == []


def test_the_command_dry_run_sends_nothing_and_the_push_says_each_row(course, class_out, canvas):
    out, _ = class_out
    fake, url = canvas
    command = [sys.executable, "-m", "grader", "--course", str(course.root), "lms", "canvas", str(out),
               "--course", "7", "--assignment", "42", "--url", url]
    env = {k: v for k, v in os.environ.items() if k != "CANVAS_TOKEN"}
    dry = subprocess.run([*command, "--dry-run"], capture_output=True, text=True, cwd=ROOT, env=env, timeout=120)
    assert dry.returncode == 0, dry.stderr
    assert fake.calls == [], "a dry run calls nothing"
    lines = dry.stdout.splitlines()
    size = len(handed_out(course, out, "2024001", "en")["scorecard.md"])
    assert lines[0] == ("Ann Lee (2024001): would send: PUT submissions/sis_user_id:S-1 posted_grade=10, a comment "
                        f"of {size} characters")
    assert lines[2].startswith("Cy Wu (2024003): not sent: no grade: cy_wu.zip could not be unpacked")
    assert lines[-1] == "6 students: 2 sent, 0 unchanged, 4 not sent, 0 failed"

    refused = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, env=env, timeout=120)
    assert refused.returncode == 2 and "set CANVAS_TOKEN to a Canvas access token" in refused.stderr
    pushed = subprocess.run([*command, "--lang", "zh"], capture_output=True, text=True, cwd=ROOT,
                            env={**env, "CANVAS_TOKEN": TOKEN}, timeout=120)
    assert pushed.returncode == 0, pushed.stderr
    assert [m for m, *_ in fake.calls] == ["GET", "GET", "PUT", "PUT"]
    assert pushed.stdout.splitlines()[-1] == "6 名学生：发送 2，未变 0，未发送 4，失败 0"


def test_a_batch_asked_for_a_format_its_roster_cannot_serve_is_refused_before_grading(course, tmp_path):
    room = tmp_path / "class"
    (room / "ann").mkdir(parents=True)
    room.chmod(0o700)
    (tmp_path / "plain.csv").write_text("id,name,email\n1,Ann,ann@uni.edu\n")
    base = ["--course", str(course.root), "batch", str(room), "--out", str(tmp_path / "out"), "--sandbox", "basic"]
    cases = [(["--format", "canvas", "--roster", str(tmp_path / "plain.csv")], "canvas_id, sis_user_id or sis_login"),
             (["--format", "moodle"], "--format moodle needs --roster"),
             (["--format", "blackboard"], "unknown format blackboard; choose from canvas, moodle")]
    for args, said in cases:
        done = subprocess.run([sys.executable, "-m", "grader", *base, *args], capture_output=True, text=True,
                              cwd=ROOT, timeout=120)
        assert done.returncode == 2 and said in done.stderr, done.stderr
    assert not (tmp_path / "out").exists(), "nothing graded, nothing written"


def test_the_canvas_comment_shows_what_the_feedback_policy_shows(course, class_out, canvas):
    """The comment is the student's scorecard as the course's feedback policy shows it: before the release, a
    criterion held back keeps its points but not its message or hint, while the visible ones are shown whole (the
    positive control); once the feedback is published every one is."""
    out, roster = class_out
    fake, url = canvas
    kinds = {meta.id: meta.kind for meta in criteria_of("heads")}
    held = [c for c, kind in kinds.items() if visibility(course, "heads", c, kind) != VISIBLE]
    shown = [c for c in kinds if c not in held]
    assert held and shown, "the course holds some of heads' criteria back and shows others"

    def ann_comment() -> str:
        fake.calls.clear()
        canvas_push(course, out, roster, "7", "42", url, TOKEN, force=True)
        return next(body["comment[text_comment]"][0] for _, path, body, _ in fake.calls if path.endswith("S-1"))

    before = ann_comment()
    assert all(secret not in before for c in held for secret in secrets(c)[:2]), before
    assert all(secrets(c)[0] in before for c in shown), before
    mark_published(out, dt.datetime.now(dt.UTC))
    after = ann_comment()
    assert all(secrets(c)[0] in after and secrets(c)[1] in after for c in kinds), after
