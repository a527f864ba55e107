"""`grader classroom sync` within GitHub's budget, against the local fake GitHub of test_classroom answering rate
limits: a class of 300 whose run GitHub stops after 1,000 calls ends cleanly and the next run finishes it, each
repository graded once and posted once; an unchanged class costs no call of the rate limit (304s); Retry-After
and a secondary limit's 403 are waited for through the injected sleep; a wait longer than the maximum stops the
run, and what was graded is posted by the next run without grading it again.

The grading here is a stand-in that records what grader batch records (tests/test_classroom.py grades for real):
what is tested is what the sync asks of GitHub."""

import datetime as dt
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from grader.batch.gradebook import Gradebook, content_hash, grader_key
from grader.cli import EXIT_RATE_LIMITED
from grader.classroom.github import LEFT, POSTED, RETRY, STATE_FILE, GitHub, sync
from grader.course import load_course

from conftest import ROOT, course_copy
from test_classroom import HEADS, ORG, PREFIX, TOKEN, FakeGitHub, serve

CLASS = 300
LIMIT = 1000


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    return load_course(course_copy(tmp_path_factory.mktemp("course"), ["heads"]))


@pytest.fixture
def fake():
    fake = FakeGitHub()
    server = serve(fake)
    fake.url = f"http://127.0.0.1:{server.server_address[1]}"
    yield fake
    server.shutdown()


def recording_grader(course, graded: list[str]):
    """grade_batch as the sync calls it: each submission stored in the gradebook with a report and a scorecard, as
    grader batch stores them, without running it; `graded` lists every submission graded."""
    def grade_batch(submissions: Path, out: Path) -> dict:
        book = Gradebook(out / "gradebook.sqlite")
        try:
            for folder in sorted(submissions.iterdir()):
                graded.append(folder.name)
                size = len((folder / "heads" / "heads.py").read_bytes())
                report = out / "students" / folder.name
                report.mkdir(parents=True, exist_ok=True)
                (report / "report.json").write_text(json.dumps({"score": size, "max_score": 100, "percent": size}))
                (report / "scorecard.md").write_text(f"### {folder.name}\n")
                book.store(folder.name, content_hash(course, folder), grader_key(course),
                           {"score": size, "max_score": 100, "percent": size, "status": "complete",
                            "message": {"en": ""}, "graded_at": "2026-12-07T00:00:00Z"}, [])
        finally:
            book.close()
        return {}
    return grade_batch


def posted(fake: FakeGitHub) -> dict[str, list[str]]:
    """What was posted to each repository: "status" and "comment", in order."""
    found: dict[str, list[str]] = {}
    for path, _ in fake.posts():
        found.setdefault(path.split("/")[3], []).append("status" if "/statuses/" in path else "comment")
    return found


def client(fake: FakeGitHub, sleeps: list[float], max_wait_s: float = 300) -> GitHub:
    return GitHub(TOKEN, fake.url, max_wait_s=max_wait_s, sleep=sleeps.append)


def test_a_class_of_300_stopped_by_the_rate_limit_finishes_on_the_next_run(course, fake, tmp_path):
    """GitHub allows 1,000 calls an hour. The first run stops cleanly when the limit is spent (without sending the
    call GitHub would refuse, and without sleeping an hour), says when to go on, and keeps what it graded; after
    the reset the same sync finishes: every repository graded once and posted once (a status, then a comment).
    A third run of the unchanged class costs nothing of the limit: every answer is a 304."""
    shas = {f"{PREFIX}-s{i:03}": fake.commit(f"{PREFIX}-s{i:03}", {HEADS: "#" * (i % 90 + 1)}) for i in range(CLASS)}
    fake.limit, fake.reset_at = LIMIT, int(time.time()) + 3600
    graded: list[str] = []
    out, sleeps = tmp_path / "gradebook", []

    first = sync(course, client(fake, sleeps), ORG, PREFIX, out, recording_grader(course, graded))
    assert first.stopped is not None and sleeps == []
    assert first.stopped.resume_at == dt.datetime.fromtimestamp(fake.reset_at + 1, dt.UTC)
    assert fake.spent == LIMIT and len(fake.calls) == LIMIT + fake.not_modified, "no call GitHub would refuse"
    assert first.calls == len(fake.calls) and first.repositories == CLASS
    done_first = {r.repository for r in first.rows if r.status == POSTED}
    assert first.left == CLASS - len(done_first) > 0
    assert {r.status for r in first.rows} <= {POSTED, LEFT}
    assert all(kinds == ["status", "comment"] for kinds in posted(fake).values())
    assert set(posted(fake)) == done_first

    fake.new_window()
    second = sync(course, client(fake, sleeps), ORG, PREFIX, out, recording_grader(course, graded))
    assert second.stopped is None and second.left == 0 and sleeps == []
    assert {r.repository for r in second.rows} == set(shas) - done_first
    assert {r.status for r in second.rows} == {POSTED}
    assert sorted(graded) == sorted(name.removeprefix(f"{PREFIX}-") for name in shas), "each graded once"
    assert posted(fake) == {name: ["status", "comment"] for name in shas}, "each posted once"
    records = json.loads((out / STATE_FILE).read_text())["repositories"]
    assert {name: record["posted"] for name, record in records.items()} == shas
    assert not any("pending" in record for record in records.values())
    assert second.not_modified > 0, "the branches read by the first run are not read again"

    fake.new_window()
    fake.calls.clear()
    third = sync(course, client(fake, sleeps), ORG, PREFIX, out, recording_grader(course, graded))
    assert third.rows == [] and third.left == 0 and fake.posts() == []
    pages = (CLASS + 1) // 100 + 1   # the organisation's listing, with a repository that is no student's
    assert fake.spent == 0 and third.calls == third.not_modified == len(fake.calls) == pages + CLASS


def test_the_calls_of_a_graded_commit(course, fake, tmp_path):
    """A graded commit costs its branch's record, two listings, its exercise file and two posts; a later commit in
    which the exercise file did not change does not download it again, nor does a classmate's commit holding the
    same file."""
    repository = f"{PREFIX}-alice"
    fake.commit(repository, {HEADS: "x = 1\n", "README.md": "not graded"})
    graded: list[str] = []
    out, sleeps = tmp_path / "gradebook", []
    first = sync(course, client(fake, sleeps), ORG, PREFIX, out, recording_grader(course, graded))
    kinds = [re.sub(r"[0-9a-f]{40}", "SHA", path.split("?")[0]).removeprefix(f"/repos/{ORG}/{repository}")
             for _, path, *_ in fake.calls]
    assert kinds == [f"/orgs/{ORG}/repos", "/activity", "/git/trees/SHA", "/git/trees/SHA", "/git/blobs/SHA",
                     "/statuses/SHA", "/commits/SHA/comments"]
    assert first.calls == 7 and first.not_modified == 0

    fake.commit(repository, {HEADS: "x = 1\n", "README.md": "changed, not graded"})
    fake.calls.clear()
    second = sync(course, client(fake, sleeps), ORG, PREFIX, out, recording_grader(course, graded))
    assert [r.status for r in second.rows] == [POSTED] and graded == ["alice", "alice"]
    assert fake.fetched_blobs() == [], "the exercise file is the one downloaded for the commit before"
    assert second.calls - second.not_modified == 5

    fake.commit(f"{PREFIX}-bob", {HEADS: "x = 1\n"})   # the same file as a classmate's: not downloaded again
    fake.commit(f"{PREFIX}-carol", {HEADS: "x = 2\n"})
    third = sync(course, client(fake, sleeps), ORG, PREFIX, out, recording_grader(course, graded))
    assert [(r.student, r.status) for r in third.rows] == [("bob", POSTED), ("carol", POSTED)]
    assert len(fake.fetched_blobs()) == 1 and graded[2:] == ["bob", "carol"]


def test_retry_after_and_a_secondary_limit_are_waited_for(course, fake, tmp_path):
    """A 429 with Retry-After on a download, a secondary limit's 403 with Retry-After on a post and one without it
    on a branch's record: each call is tried again after the wait GitHub asked for (a minute when it says none),
    through the injected sleep; a 403 that is not a rate limit (a permission) is that repository's error at once."""
    for name in ("alice", "bob", "carol"):
        fake.commit(f"{PREFIX}-{name}", {HEADS: f"# {name}\n"})
    secondary = "You have exceeded a secondary rate limit. Please wait a few minutes before you try again."
    fake.refusals = [(rf"{PREFIX}-alice/git/blobs/", 429, {"Retry-After": "7"}, "Too Many Requests"),
                     (rf"{PREFIX}-bob/statuses/", 403, {"Retry-After": "30"}, secondary),
                     (rf"{PREFIX}-bob/activity", 403, {}, secondary),
                     (rf"{PREFIX}-carol/git/blobs/", 403, {}, "Resource not accessible by personal access token")]
    graded: list[str] = []
    sleeps: list[float] = []
    done = sync(course, client(fake, sleeps), ORG, PREFIX, tmp_path / "gradebook", recording_grader(course, graded))
    assert sleeps == [60, 7, 30]
    assert {r.student: (r.status, r.stage) for r in done.rows} == {
        "alice": (POSTED, ""), "bob": (POSTED, ""), "carol": (RETRY, "download")}
    carol = next(r.description for r in done.rows if r.student == "carol")
    assert 'HTTP 403 {"message": "Resource not accessible' in carol
    assert posted(fake) == {f"{PREFIX}-{s}": ["status", "comment"] for s in ("alice", "bob")}
    assert done.stopped is None and done.left == 1


def test_a_short_wait_is_slept_and_a_limit_that_stays_stops_the_run(course, fake, tmp_path):
    """The primary limit spent every 3 calls, its reset a minute away: the sync sleeps until the reset (the injected
    sleep starts the fake's new window) and finishes in one run. A 429 still there after three tries again stops
    the run, to go on after its Retry-After."""
    for name in ("alice", "bob"):
        fake.commit(f"{PREFIX}-{name}", {HEADS: f"# {name}\n"})
    fake.limit, fake.reset_at = 3, int(time.time()) + 60
    sleeps: list[float] = []

    def sleep(seconds: float) -> None:
        sleeps.append(seconds)
        fake.new_window()

    graded: list[str] = []
    done = sync(course, GitHub(TOKEN, fake.url, sleep=sleep), ORG, PREFIX, tmp_path / "book",
                recording_grader(course, graded))
    assert done.stopped is None and [r.status for r in done.rows] == [POSTED, POSTED]
    assert len(sleeps) == 4 and all(50 < s <= 61 for s in sleeps), sleeps   # 13 calls, 3 a window

    fake.limit = None
    fake.commit(f"{PREFIX}-alice", {HEADS: "# alice, again\n"})
    fake.refusals = [(rf"{PREFIX}-alice/activity", 429, {"Retry-After": "5"}, "Too Many Requests")] * 4
    sleeps.clear()
    began = time.time()
    again = sync(course, GitHub(TOKEN, fake.url, sleep=sleeps.append), ORG, PREFIX, tmp_path / "book",
                 recording_grader(course, graded))
    assert sleeps == [5, 5, 5] and again.stopped is not None and again.left == 2
    assert began + 4 <= again.stopped.resume_at.timestamp() <= time.time() + 6


def test_a_long_wait_stops_the_run_and_the_next_posts_what_was_graded(course, fake, tmp_path):
    """GitHub asks for an hour's wait on alice's comment, her status posted: the run stops (no sleep, no call
    after), and bob's graded scorecard waits too. The next run posts alice's comment alone and bob's status and
    comment, grading neither again. A comment GitHub fails (502) is posted by the run after, its status not twice;
    a primary limit spent elsewhere (a 403 with x-ratelimit-remaining 0) stops a run as well."""
    for name in ("alice", "bob"):
        fake.commit(f"{PREFIX}-{name}", {HEADS: f"# {name}\n"})
    fake.refusals = [(rf"{PREFIX}-alice/commits/\w+/comments", 403, {"Retry-After": "3600"},
                      "You have exceeded a secondary rate limit.")]
    graded: list[str] = []
    out, sleeps = tmp_path / "gradebook", []
    first = sync(course, client(fake, sleeps), ORG, PREFIX, out, recording_grader(course, graded))
    assert first.stopped is not None and sleeps == [] and graded == ["alice", "bob"]
    assert {r.student: (r.status, r.stage) for r in first.rows} == {"alice": (LEFT, "posting"),
                                                                    "bob": (LEFT, "posting")}
    assert posted(fake) == {f"{PREFIX}-alice": ["status"]}
    assert fake.calls[-1][1].endswith("/comments"), "nothing is asked of GitHub after the stop"

    second = sync(course, client(fake, sleeps), ORG, PREFIX, out, recording_grader(course, graded))
    assert [(r.student, r.status) for r in second.rows] == [("alice", POSTED), ("bob", POSTED)]
    assert graded == ["alice", "bob"], "nothing graded again"
    assert posted(fake) == {f"{PREFIX}-alice": ["status", "comment"], f"{PREFIX}-bob": ["status", "comment"]}

    fake.commit(f"{PREFIX}-bob", {HEADS: "# bob, again\n"})
    fake.failures = [(rf"{PREFIX}-bob/commits/\w+/comments", 502)]
    fake.calls.clear()
    third = sync(course, client(fake, sleeps), ORG, PREFIX, out, recording_grader(course, graded))
    assert [(r.student, r.status, r.stage) for r in third.rows] == [("bob", RETRY, "posting")]
    fake.failures = []
    fake.refusals = [(rf"{PREFIX}-bob/commits/\w+/comments", 403,
                      {"x-ratelimit-remaining": "0", "x-ratelimit-reset": str(int(time.time()) + 3600)},
                      "API rate limit exceeded for user ID 1.")]
    fourth = sync(course, client(fake, sleeps), ORG, PREFIX, out, recording_grader(course, graded))
    assert fourth.stopped is not None and [(r.student, r.status) for r in fourth.rows] == [("bob", LEFT)]
    fifth = sync(course, client(fake, sleeps), ORG, PREFIX, out, recording_grader(course, graded))
    assert [(r.student, r.status) for r in fifth.rows] == [("bob", POSTED)]
    assert graded == ["alice", "bob", "bob"] and sleeps == []
    assert posted(fake)[f"{PREFIX}-bob"] == ["status", "comment"], "the new commit's status posted once"


def test_the_command_stops_at_the_rate_limit_with_its_own_exit_status(course, fake, tmp_path):
    """`grader classroom sync` stopped by the rate limit: the calls it made, what is left, and when to run it again,
    in one line; an exit status of its own."""
    for name in ("alice", "bob", "carol"):
        fake.commit(f"{PREFIX}-{name}", {HEADS: f"# {name}\n"})
    fake.limit, fake.reset_at = 3, int(time.time()) + 3600   # the listing and two branches' records
    command = [sys.executable, "-m", "grader", "--course", str(course.root), "classroom", "sync", "--org", ORG,
               "--prefix", PREFIX, "--out", str(tmp_path / "book"), "--api-url", fake.url, "--sandbox", "basic"]
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, timeout=300,
                          env={**os.environ, "GRADER_TOKEN": TOKEN})
    assert EXIT_RATE_LIMITED not in (0, 1, 2, 3) and done.returncode == EXIT_RATE_LIMITED, done.stderr
    lines = done.stdout.splitlines()
    assert [line.split()[0] for line in lines[:2]] == [f"{PREFIX}-alice", f"{PREFIX}-bob"]
    assert all(": left [download]: GitHub's rate limit stopped the run first" in line for line in lines[:2])
    assert lines[2].startswith("3 calls (0 of them answered 304, free of the rate limit), 0 repositories posted, "
                               "3 left for the next run")
    resume = dt.datetime.fromtimestamp(fake.reset_at + 1).astimezone().strftime("%H:%M %Z")
    assert lines[3] == (f"stopped at GitHub's rate limit after 0 of 3 repositories; run the same command after "
                        f"{resume} to finish")
    assert fake.spent == 3 and len(fake.calls) == 3


def test_a_listing_refused_by_the_rate_limit_stops_the_run_before_anything(course, fake, tmp_path):
    """The primary limit spent by another run of the same token before this one lists the organisation: one call,
    refused; nothing downloaded or posted; every repository known from the last run is left for the next."""
    for name in ("alice", "bob"):
        fake.commit(f"{PREFIX}-{name}", {HEADS: f"# {name}\n"})
    graded: list[str] = []
    out, sleeps = tmp_path / "gradebook", []
    sync(course, client(fake, sleeps), ORG, PREFIX, out, recording_grader(course, graded))
    fake.commit(f"{PREFIX}-alice", {HEADS: "# alice, again\n"})
    fake.limit, fake.reset_at = 0, int(time.time()) + 3600
    fake.calls.clear()
    done = sync(course, client(fake, sleeps), ORG, PREFIX, out, recording_grader(course, graded))
    assert done.stopped is not None and (done.repositories, done.left, done.rows) == (2, 2, [])
    assert len(fake.calls) == 1 and sleeps == [] and graded == ["alice", "bob"]
