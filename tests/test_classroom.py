"""`grader classroom sync` against a local fake of the GitHub REST endpoints it uses: a class of three student
repositories is graded and gets its scorecards; a run with no new commit posts nothing; a new commit in one
repository regrades only that one. One repository's trouble (a 65 MiB file, a listing or a download GitHub fails,
a grading lost with its grading process) is that repository's row: the others are graded and posted, and the
next run grades what was not. The deadline is when a push reached GitHub, never a commit's own date."""

import datetime as dt
import hashlib
import json
import re
import threading
import tomllib
import urllib.parse
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from grader.classroom import github as classroom
from grader.batch.run import run_batch
from grader.classroom.github import NOTHING, POSTED, PUSHED, RETRY, SEEN, STATUS_CONTEXT, Arrival, GitHub, arrival, sync
from grader.course import load_course
from grader.review.selftest import mutant_text

from conftest import ROOT, course_copy

# end to end: every test here grades in a sandbox (`pytest -m "not slow"` leaves them out)
pytestmark = pytest.mark.slow

ORG, PREFIX, TOKEN = "course-org", "transformer", "test-token"
SOLUTION = ROOT / "solutions" / "heads" / "heads.py"
STUB = ROOT / "exercises" / "heads" / "heads.py"
MUTANT = ROOT / "solutions" / "heads" / "mutants" / "merge_no_transpose"
HEADS = "exercises/heads/heads.py"
BIG = 65 << 20   # a file GitHub holds and the grader must never download


@dataclass(frozen=True)
class Link:
    target: str


def git_sha(kind: str, data: bytes) -> str:
    return hashlib.sha1(f"{kind} {len(data)}\0".encode() + data).hexdigest()


class FakeGitHub:
    """Repositories whose default branch is a list of pushes (commit sha, files, push time, commit date), served as
    GitHub serves them: the branch's head, its activity record (pushes newest first, cursor pages), git trees and
    blobs. Only what was pushed by `now` is visible. Records every call; `failures` makes calls fail on purpose.

    GitHub's budget: each answer to a GET carries an ETag, and a GET sending it back (If-None-Match) while the
    answer is unchanged gets a 304 that costs nothing. With `limit` set, every other answer costs one of it, and
    once it is spent every call is refused as GitHub refuses it (403, `x-ratelimit-remaining: 0`, the reset at
    `reset_at`) until `new_window()`. `refusals` answers the next call matching a pattern once with a given status,
    headers and message (a secondary rate limit's 403 or 429 with Retry-After)."""

    def __init__(self):
        self.repos: dict[str, list[dict]] = {}
        self.no_activity: set[str] = set()                    # repositories whose activity record GitHub refuses
        self.failures: list[tuple[str, int]] = []             # (path pattern, HTTP status): each fails every call
        self.objects: dict[str, tuple[str, object]] = {}      # git object sha -> ("tree", entries) | ("blob", bytes)
        self.calls: list[tuple[str, str, dict | None, str | None]] = []   # method, path, body, Authorization
        self.now: dt.datetime | None = None                  # None: every push is visible
        self.limit: int | None = None                        # calls the primary rate limit allows; None: no limit
        self.spent = 0                                       # calls counted against it in this window
        self.reset_at = 0                                    # epoch seconds at which the window starts again
        self.not_modified = 0                                # 304s answered
        self.refusals: list[tuple[str, int, dict[str, str], str]] = []   # (pattern, status, headers, message)
        self.lock = threading.Lock()

    def new_window(self) -> None:
        """The primary rate limit's window starts again."""
        self.spent = 0

    def budget_headers(self) -> list[tuple[str, str]]:
        if self.limit is None:
            return []
        return [("x-ratelimit-limit", str(self.limit)), ("x-ratelimit-remaining", str(max(0, self.limit - self.spent))),
                ("x-ratelimit-reset", str(self.reset_at))]

    def refusal(self, path: str) -> tuple[int, dict[str, str], str] | None:
        """How a call to `path` is refused before any answer (a failure, a rate limit), or None."""
        for pattern, code in self.failures:
            if re.search(pattern, path):
                return code, {}, "Server Error"
        for index, (pattern, code, headers, message) in enumerate(self.refusals):
            if re.search(pattern, path):
                del self.refusals[index]
                return code, headers, message
        if self.limit is not None and self.spent >= self.limit:
            return 403, {}, "API rate limit exceeded for user ID 1."
        return None

    def commit(self, repo: str, files: dict[str, object], pushed: dt.datetime | None = None,
               dated: dt.datetime | None = None) -> str:
        pushed = pushed or dt.datetime.now(dt.UTC)
        history = self.repos.setdefault(repo, [])
        sha = hashlib.sha1(f"{repo} {len(history)} {sorted(files)}".encode()).hexdigest()
        history.append({"sha": sha, "root": self._tree(files), "pushed": pushed, "dated": dated or pushed,
                        "id": 1000 * len(self.repos) + len(history)})
        return sha

    def _tree(self, files: dict[str, object]) -> str:
        entries, folders = [], {}
        for path, content in files.items():
            head, _, rest = path.partition("/")
            if rest:
                folders.setdefault(head, {})[rest] = content
                continue
            data = content.target.encode() if isinstance(content, Link) else \
                content if isinstance(content, bytes) else content.encode()
            sha = git_sha("blob", data)
            self.objects[sha] = ("blob", data)
            entries.append({"path": head, "mode": "120000" if isinstance(content, Link) else "100644", "type": "blob",
                            "sha": sha, "size": len(data)})
        for name, inner in folders.items():
            entries.append({"path": name, "mode": "040000", "type": "tree", "sha": self._tree(inner)})
        sha = git_sha("tree", json.dumps(entries, sort_keys=True).encode())
        self.objects[sha] = ("tree", entries)
        return sha

    def below(self, entries: list[dict]) -> list[dict]:
        """A tree's entries and, after each folder, every entry below it by its path: GitHub's ?recursive=1."""
        listed = []
        for entry in entries:
            listed.append(entry)
            if entry["type"] == "tree":
                listed += [{**inner, "path": f'{entry["path"]}/{inner["path"]}'}
                           for inner in self.below(self.objects[entry["sha"]][1])]
        return listed

    def visible(self, repo: str) -> list[dict]:
        return [c for c in self.repos[repo] if self.now is None or c["pushed"] <= self.now]

    def posts(self) -> list[tuple[str, dict]]:
        """The posts GitHub accepted (a refused one, recorded as "POST refused", posted nothing)."""
        return [(path, body) for method, path, body, _ in self.calls if method == "POST"]

    def fetched_blobs(self) -> list[str]:
        return [path.rsplit("/", 1)[1] for method, path, _, _ in self.calls if "/git/blobs/" in path]


def stamp(when: dt.datetime) -> str:
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


def serve(fake: FakeGitHub):
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def _answer(self, code: int, payload, content_type="application/json", headers=()):
            data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
            headers = [*headers]
            if self.command == "GET" and code == 200:
                etag = f'"{hashlib.sha1(data).hexdigest()}"'
                headers.append(("ETag", etag))
                if self.headers.get("If-None-Match") == etag:   # unchanged: free of the rate limit
                    fake.not_modified += 1
                    self.send_response(304)
                    for name, value in [*headers, *fake.budget_headers()]:
                        self.send_header(name, value)
                    self.end_headers()
                    return
            if fake.limit is not None and code not in (403, 429):
                fake.spent += 1
            headers += fake.budget_headers()
            self.send_response(code)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            for name, value in headers:
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            with fake.lock:
                fake.calls.append(("GET", self.path, None, self.headers.get("Authorization")))
                path, _, query = self.path.partition("?")
                params = dict(urllib.parse.parse_qsl(query))
                refused = fake.refusal(self.path)
                if refused:
                    code, headers, message = refused
                    return self._answer(code, {"message": message}, headers=headers.items())
                if re.fullmatch(rf"/orgs/{ORG}/repos", path):
                    names = sorted(fake.repos) + ["unrelated-repo"]
                    listing = [{"name": n, "default_branch": "main"} for n in names]
                    first = (int(params["page"]) - 1) * int(params["per_page"])
                    return self._answer(200, listing[first:first + int(params["per_page"])])
                m = re.fullmatch(rf"/repos/{ORG}/([\w-]+)/(commits|activity|git/trees/\w+|git/blobs/\w+)", path)
                if m is None or m[1] not in fake.repos:
                    return self._answer(404, {"message": "Not Found"})
                repo, what = m[1], m[2]
                history = fake.visible(repo)
                if what == "commits":
                    assert params["sha"] == "main"
                    until = dt.datetime.fromisoformat(params["until"]) if "until" in params else None
                    dated = [c for c in history if until is None or c["dated"] <= until]   # GitHub goes by the date
                    if not history:
                        return self._answer(409, {"message": "Git Repository is empty."})
                    return self._answer(200, [{"sha": c["sha"], "commit": {"committer": {"date": stamp(c["dated"])}}}
                                              for c in reversed(dated)][:1])
                if what == "activity":
                    if repo in fake.no_activity:
                        return self._answer(404, {"message": "Not Found"})
                    if not history:   # as for the commits of an empty repository
                        return self._answer(409, {"message": "Git Repository is empty."})
                    assert params["ref"] == "refs/heads/main" and params["direction"] == "desc"
                    pushes = [{"id": c["id"], "before": prev["sha"] if prev else "0" * 40, "after": c["sha"],
                               "ref": "refs/heads/main", "timestamp": stamp(c["pushed"]), "activity_type": "push"}
                              for prev, c in zip([None, *history], history, strict=False)][::-1]
                    start, size = int(params.get("after", 0)), int(params["per_page"])
                    headers = []
                    if start + size < len(pushes):   # a cursor to the next page, as GitHub links it
                        headers.append(("Link", f'<http://{self.headers["Host"]}{path}?ref=refs/heads/main'
                                                f'&per_page={size}&direction=desc&after={start + size}>; rel="next"'))
                    return self._answer(200, pushes[start:start + size], headers=headers)
                sha = what.rsplit("/", 1)[1]
                kind, content = fake.objects.get(sha, (None, None))
                if what.startswith("git/trees/"):
                    commit = next((c for c in history if c["sha"] == sha), None)
                    if commit is not None:
                        kind, content = fake.objects[commit["root"]]
                    if kind == "tree" and params.get("recursive") == "1":
                        content = fake.below(content)
                    return self._answer(200, {"sha": sha, "tree": content, "truncated": False}) if kind == "tree" \
                        else self._answer(404, {"message": "Not Found"})
                if kind != "blob":
                    return self._answer(404, {"message": "Not Found"})
                assert self.headers["Accept"] == "application/vnd.github.raw+json"
                return self._answer(200, content, "application/vnd.github.raw+json")

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            with fake.lock:
                fake.calls.append(("POST", self.path, body, self.headers.get("Authorization")))
                refused = fake.refusal(self.path)
                if refused:
                    code, headers, message = refused
                    fake.calls[-1] = ("POST refused", *fake.calls[-1][1:])
                    return self._answer(code, {"message": message}, headers=headers.items())
                return self._answer(201, {})

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    return load_course(course_copy(tmp_path_factory.mktemp("course"), ["heads"]))


@pytest.fixture
def github():
    fake = FakeGitHub()
    server = serve(fake)
    yield fake, GitHub(TOKEN, f"http://127.0.0.1:{server.server_address[1]}")
    server.shutdown()


def heads_file(source: Path) -> dict[str, str]:
    """The repository's files with `source` as the heads exercise: a file, or the catalog mutant's folder (a diff
    against the solution)."""
    text = mutant_text(load_course(ROOT), "heads", source) if source.is_dir() else source.read_text()
    return {HEADS: text, "README.md": "not graded"}


def batch_grader(course, graded_batches: list):
    def grade_batch(submissions, out):
        graded_batches.append(sorted(p.name for p in submissions.iterdir()))
        return run_batch(course, submissions, out, 3, True, "basic", "en")
    return grade_batch


def score_line(score: float, total: float) -> str:
    return f"score {score:g}/{total:g} ({round(100 * score / total, 2):g}%)"


def test_a_class_is_graded_once_and_only_new_commits_again(course, github, tmp_path):
    fake, client = github
    fails = tomllib.loads((MUTANT / "manifest.toml").read_text())["fails"]
    points = course.exercise("heads").points
    shas = {"alice": fake.commit(f"{PREFIX}-alice", heads_file(SOLUTION)),
            "bob": fake.commit(f"{PREFIX}-bob", heads_file(STUB)),
            "carol": fake.commit(f"{PREFIX}-carol", heads_file(MUTANT))}
    graded_batches = []
    grade_batch = batch_grader(course, graded_batches)

    out = tmp_path / "gradebook"
    first = sync(course, client, ORG, PREFIX, out, grade_batch).rows
    total = sum(points.values())
    expected = {"alice": total, "bob": 0.0, "carol": total - sum(points[c] for c in fails)}
    assert graded_batches == [["alice", "bob", "carol"]]
    assert {r.student: (r.status, r.description) for r in first} == {
        s: (POSTED, score_line(score, total)) for s, score in expected.items()}
    posts = fake.posts()
    assert len(posts) == 6
    for student, score in expected.items():
        sha, repo = shas[student], f"{PREFIX}-{student}"
        status = next(body for path, body in posts if path == f"/repos/{ORG}/{repo}/statuses/{sha}")
        assert status == {"state": "success", "context": STATUS_CONTEXT, "description": score_line(score, total)}
        comment = next(body for path, body in posts if path == f"/repos/{ORG}/{repo}/commits/{sha}/comments")
        assert sha in comment["body"] and "heads" in comment["body"]
    assert all(auth == f"Bearer {TOKEN}" for *_, auth in fake.calls)
    assert not any("unrelated-repo" in path for _, path, *_ in fake.calls[1:])
    readme = git_sha("blob", b"not graded")
    assert readme not in fake.fetched_blobs() and len(fake.fetched_blobs()) == 3, "only the exercise files"
    assert (out.stat().st_mode & 0o777) == 0o700, "the gradebook holds every student's code and report"

    fake.calls.clear()
    assert sync(course, client, ORG, PREFIX, out, grade_batch).rows == []
    assert fake.posts() == [] and len(graded_batches) == 1

    fake.calls.clear()
    new_sha = fake.commit(f"{PREFIX}-carol", heads_file(SOLUTION))
    again = sync(course, client, ORG, PREFIX, out, grade_batch).rows
    assert graded_batches[-1] == ["carol"]
    assert [(r.student, r.sha, r.status) for r in again] == [("carol", new_sha, POSTED)]
    assert [path for path, _ in fake.posts()] == [f"/repos/{ORG}/{PREFIX}-carol/statuses/{new_sha}",
                                                   f"/repos/{ORG}/{PREFIX}-carol/commits/{new_sha}/comments"]
    assert fake.posts()[0][1]["description"] == f"score {total:g}/{total:g} (100%)"


def test_one_repositorys_trouble_is_its_own_row_and_the_next_run_grades_it(course, github, tmp_path, monkeypatch):
    """In one run: dave committed a 65 MiB exercise file and a 65 MiB checkpoint, gina's exercise file is a link,
    GitHub fails erin's download and frank's listing, and bob's grading is lost with its grading process. Alice,
    dave and gina are graded and posted (dave's and gina's heads an error that says why); bob, erin and frank get
    a row that says what failed, nothing posted and nothing recorded; the next run grades and posts those three."""
    from grader.i18n import t, verbatim
    from grader.batch.warm import WarmGrader, WarmGraderDied

    fake, client = github
    total = sum(course.exercise("heads").points.values())
    shas = {name: fake.commit(f"{PREFIX}-{name}", heads_file(SOLUTION)) for name in ("alice", "bob", "frank")}
    # erin's own file: a classmate's same file would be taken from the classmate's download
    shas["erin"] = fake.commit(f"{PREFIX}-erin", {HEADS: SOLUTION.read_text() + "# erin\n"})
    shas["dave"] = fake.commit(f"{PREFIX}-dave", {HEADS: b"#" * BIG, "checkpoints/model.pt": b"\0" * BIG})
    shas["gina"] = fake.commit(f"{PREFIX}-gina", {HEADS: Link("../../../solutions/heads/heads.py")})
    big_blobs = {git_sha("blob", b"#" * BIG), git_sha("blob", b"\0" * BIG)}
    fake.failures = [(rf"/repos/{ORG}/{PREFIX}-erin/git/blobs/", 500), (rf"/repos/{ORG}/{PREFIX}-frank/activity", 502)]

    real_grade = WarmGrader.grade

    def loses_bob(self, submission, *args, **kwargs):
        if Path(submission).name == "bob":   # as when a blow-up takes down the grading process holding it
            raise WarmGraderDied(t("the grading process ended (exit {code}): {output}", code=-9,
                                   output=verbatim("Killed")))
        return real_grade(self, submission, *args, **kwargs)

    monkeypatch.setattr(WarmGrader, "grade", loses_bob)
    graded_batches = []
    out = tmp_path / "gradebook"
    rows = {r.student: r for r in sync(course, client, ORG, PREFIX, out, batch_grader(course, graded_batches)).rows}

    assert graded_batches == [["alice", "bob", "dave", "gina"]]
    assert {s: (r.status, r.stage) for s, r in rows.items()} == {
        "alice": (POSTED, ""), "dave": (POSTED, ""), "gina": (POSTED, ""),
        "bob": (RETRY, "grading"), "erin": (RETRY, "download"), "frank": (RETRY, "listing")}
    assert rows["alice"].description == score_line(total, total)
    assert rows["dave"].description == rows["gina"].description == score_line(0, total)
    assert "grading process ended (exit -9)" in rows["bob"].description
    assert "HTTP 500" in rows["erin"].description and "HTTP 502" in rows["frank"].description
    posted = {path for path, _ in fake.posts()}
    assert posted == {f"/repos/{ORG}/{PREFIX}-{s}/{kind}" for s in ("alice", "dave", "gina")
                      for kind in (f"statuses/{shas[s]}", f"commits/{shas[s]}/comments")}
    comments = {path.split("/")[3]: body["body"] for path, body in fake.posts() if path.endswith("/comments")}
    assert f"is {BIG:,} bytes; a source file may be at most 1,048,576" in comments[f"{PREFIX}-dave"]
    assert "is a symbolic link" in comments[f"{PREFIX}-gina"]
    assert not big_blobs & set(fake.fetched_blobs()), "a file over the cap is never downloaded"
    recorded = json.loads((out / "classroom.json").read_text())["repositories"]
    assert {name: record["posted"] for name, record in recorded.items()} == {
        f"{PREFIX}-{s}": shas[s] if s in ("alice", "dave", "gina") else None
        for s in ("alice", "bob", "dave", "erin", "frank", "gina")}

    monkeypatch.setattr(WarmGrader, "grade", real_grade)
    fake.failures, fake.calls = [], []
    again = sync(course, client, ORG, PREFIX, out, batch_grader(course, graded_batches)).rows
    assert graded_batches[-1] == ["bob", "erin", "frank"]
    assert [(r.student, r.sha, r.status, r.description) for r in again] == [
        (s, shas[s], POSTED, score_line(total, total)) for s in ("bob", "erin", "frank")]
    assert {path.split("/")[3] for path, _ in fake.posts()} == {f"{PREFIX}-{s}" for s in ("bob", "erin", "frank")}


def test_the_deadline_is_when_the_push_reached_github(course, github, tmp_path, monkeypatch):
    """Mallory pushes a second commit after the deadline, dated two days before it (whoever commits sets the
    date): the commit graded is the one her branch held at the deadline. Oscar's only push is late: nothing is
    graded. Pat's repository has no activity record here: the first sync that saw each commit stands in for its
    push. `arrival` says when each commit arrived, and how that is known."""
    monkeypatch.setattr(classroom, "PAGE", 2)   # the activity record's cursor pages are followed
    fake, client = github
    deadline = dt.datetime(2026, 12, 1, 23, 59, 59, tzinfo=dt.UTC)
    hour = dt.timedelta(hours=1)
    for offset in (240, 48, 24):   # alice pushes thrice, on time
        alice = fake.commit(f"{PREFIX}-alice", heads_file(SOLUTION if offset == 24 else STUB), deadline - offset * hour)
    on_time = fake.commit(f"{PREFIX}-mallory", heads_file(MUTANT), deadline - hour)
    late = fake.commit(f"{PREFIX}-mallory", heads_file(SOLUTION), pushed=deadline + hour, dated=deadline - 48 * hour)
    oscar = fake.commit(f"{PREFIX}-oscar", heads_file(SOLUTION), pushed=deadline + hour, dated=deadline - 72 * hour)
    fake.no_activity.add(f"{PREFIX}-pat")
    pat_first = fake.commit(f"{PREFIX}-pat", heads_file(SOLUTION), deadline - 2 * hour)
    pat_late = fake.commit(f"{PREFIX}-pat", heads_file(MUTANT), deadline + hour)

    graded_batches = []
    out = tmp_path / "gradebook"
    before = deadline - hour / 2
    fake.now = before
    first = sync(course, client, ORG, PREFIX, out, batch_grader(course, graded_batches), deadline,
                 clock=lambda: before).rows
    assert {r.student: (r.status, r.sha) for r in first} == {
        "alice": (POSTED, alice), "mallory": (POSTED, on_time), "pat": (POSTED, pat_first), "oscar": (NOTHING, None)}
    assert first[2].description == "no commit reached the branch by the deadline"

    after = deadline + 2 * hour
    fake.now, fake.calls = after, []
    second = sync(course, client, ORG, PREFIX, out, batch_grader(course, graded_batches), deadline,
                  clock=lambda: after).rows
    assert [(r.student, r.status) for r in second] == [("oscar", NOTHING)]
    assert fake.posts() == [] and len(graded_batches) == 1, "a late push is never graded"
    assert not any("until=" in path for _, path, *_ in fake.calls), "a commit's date decides nothing"

    assert arrival(out, f"{PREFIX}-mallory", on_time) == Arrival(deadline - hour, PUSHED)
    assert arrival(out, f"{PREFIX}-mallory", late) == Arrival(deadline + hour, PUSHED)
    assert arrival(out, f"{PREFIX}-oscar", oscar) == Arrival(deadline + hour, PUSHED)
    assert arrival(out, f"{PREFIX}-pat", pat_first) == Arrival(before, SEEN)
    assert arrival(out, f"{PREFIX}-pat", pat_late) == Arrival(after, SEEN)
    assert arrival(out, f"{PREFIX}-alice", "f" * 40) is None


def test_the_command_says_each_row_and_exits_3_while_one_is_to_be_tried_again(course, github, tmp_path):
    """`grader classroom sync`: a line per repository that had something to say; exit 3 while some repository is
    left for the next run; a deadline that is not a time is refused in one line."""
    import os
    import subprocess
    import sys

    fake, client = github
    fake.commit(f"{PREFIX}-frank", heads_file(SOLUTION))
    fake.repos[f"{PREFIX}-zoe"] = []   # an empty repository
    fake.failures = [(rf"/repos/{ORG}/{PREFIX}-frank/activity", 502)]
    env = {**os.environ, "GRADER_TOKEN": TOKEN}
    command = [sys.executable, "-m", "grader", "--course", str(course.root), "classroom", "sync", "--org", ORG,
               "--prefix", PREFIX, "--out", str(tmp_path / "book"), "--api-url", client.api_url, "--sandbox", "basic"]
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, env=env, timeout=300)
    assert done.returncode == 3, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith(f"{PREFIX}-frank: retry [listing]: could not read the repository's branch: GET ")
    assert "HTTP 502" in lines[0] and lines[0].endswith("tried again by the next run")
    assert lines[1] == f"{PREFIX}-zoe: nothing: no commit yet"
    assert re.fullmatch(r"\d+ calls \(\d+ of them answered 304, free of the rate limit\), 0 repositories posted, "
                        r"1 left for the next run; gradebook in .*", lines[2])

    dated = tmp_path / "dated"
    course_copy(dated, ["heads"])
    with open(dated / "course.toml", "a", encoding="utf-8") as fh:
        fh.write('\n[classroom]\ndeadline = "next friday"\n')
    command[command.index("--course") + 1] = str(dated)
    refused = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, env=env, timeout=300)
    assert refused.returncode == 2 and "deadline 'next friday' is not an ISO 8601 time" in refused.stderr


def test_the_status_and_comment_speak_the_chosen_language(tmp_path):
    """A Chinese class reads its commit status and comment in Chinese; a submission without a report says it could
    not be graded, in that language too."""
    from grader.classroom.github import scorecard_comment

    graded = tmp_path / "graded"
    graded.mkdir()
    (graded / "report.json").write_text(json.dumps({"score": 7.5, "max_score": 10, "percent": 75}))
    (graded / "scorecard.md").write_text("### 评分报告：alice\n")
    state, description, body = scorecard_comment(graded, "abc123", "zh")
    assert (state, description) == ("success", "得分 7.5/10（75%）")
    assert body == "隐藏评分项，提交 abc123：得分 7.5/10（75%）\n\n### 评分报告：alice\n"
    assert scorecard_comment(graded, "abc123", "en")[1] == "score 7.5/10 (75%)"
    state, description, body = scorecard_comment(tmp_path / "missing", "abc123", "zh")
    assert (state, description, body) == ("error", "未能完成评分；已通知你的老师", "提交 abc123 未能完成评分。")


LATE_POLICY = """
[policy]
due = "2026-12-01T23:59:59Z"
late_penalty_percent = 10
per = "day"
max_penalty_percent = 50
cutoff = "2026-12-03T23:59:59Z"
"""


def test_a_late_policy_grades_up_to_each_cutoff_and_takes_the_penalty_by_push_time(github, tmp_path):
    """course.toml's [policy]: due D, 10% a day, cutoff two days after. Alice pushes on time; bob's push reaches GitHub
    five hours late: 10% off; carol's as late, with a day's extension in the roster: nothing off; dave's last push
    comes after his cutoff, so the commit graded is the one before it, pushed a day and a bit late: 20% off. The
    status posted carries the final score, the scorecard the lateness, the gradebook each arrival."""
    from grader.batch.gradebook import Gradebook
    from grader.policy import load_policy
    from grader.batch.roster import Student

    fake, client = github
    folder = course_copy(tmp_path / "course", ["heads"])
    with open(folder / "course.toml", "a", encoding="utf-8") as fh:
        fh.write(LATE_POLICY)
    course = load_course(folder)
    policy = load_policy(course)
    due, hour = policy.due, dt.timedelta(hours=1)
    fails = tomllib.loads((MUTANT / "manifest.toml").read_text())["fails"]
    points = course.exercise("heads").points
    shas = {"alice": fake.commit(f"{PREFIX}-alice", heads_file(SOLUTION), due - hour),
            "bob": fake.commit(f"{PREFIX}-bob", heads_file(SOLUTION), due + 5 * hour),
            "carol": fake.commit(f"{PREFIX}-carol", heads_file(SOLUTION), due + 5 * hour),
            "dave": fake.commit(f"{PREFIX}-dave", heads_file(MUTANT), due + 25 * hour)}
    fake.commit(f"{PREFIX}-dave", heads_file(SOLUTION), due + 49 * hour, dated=due - hour)   # after his cutoff
    roster = [Student("carol", "Carol", "", {"extension": "1"})]

    def grade_batch(submissions, out):
        return run_batch(course, submissions, out, 3, True, "basic", "en", roster=roster)

    now = due + 72 * hour
    out = tmp_path / "gradebook"
    rows = {r.student: r for r in sync(course, client, ORG, PREFIX, out, grade_batch, None, "en",
                                       clock=lambda: now, policy=policy, roster=roster).rows}
    total = sum(points.values())
    mutant = total - sum(points[c] for c in fails)
    expected = {"alice": total, "bob": total - 0.1 * total, "carol": total, "dave": mutant - 0.2 * total}
    assert {s: (r.status, r.sha) for s, r in rows.items()} == {s: (POSTED, shas[s]) for s in expected}
    assert {s: r.description for s, r in rows.items()} == {s: score_line(v, total) for s, v in expected.items()}
    statuses = {path.split("/")[3]: body["description"] for path, body in fake.posts() if "/statuses/" in path}
    assert statuses[f"{PREFIX}-bob"] == score_line(expected["bob"], total)
    comment = next(body["body"] for path, body in fake.posts() if path.endswith(f"{shas['dave']}/comments"))
    assert "2 days late" in comment and "GitHub's record of the push" in comment
    book = Gradebook(out / "gradebook.sqlite")
    try:
        times = book.submitted()
    finally:
        book.close()
    assert {s: (t.at, t.how) for s, t in times.items()} == {
        "alice": (due - hour, "push"), "bob": (due + 5 * hour, "push"), "carol": (due + 5 * hour, "push"),
        "dave": (due + 25 * hour, "push")}
    carol = json.loads((out / "students" / "carol" / "report.json").read_text())["grade"]["late"]
    assert (carol["state"], carol["extension"]) == ("on_time", "1")


def test_a_commit_only_a_sync_saw_is_dated_by_the_sync_before_it():
    """With no record of the push, a commit arrived after the last moment the branch was seen without it: that time
    stands for its submission, never a later one; with nothing before it, the time is unknown."""
    from grader.classroom.github import Timeline

    t0 = dt.datetime(2026, 12, 1, 20, tzinfo=dt.UTC)
    timeline = Timeline([[classroom.iso(t0), "a" * 40, SEEN, None],
                         [classroom.iso(t0 + dt.timedelta(hours=6)), "b" * 40, SEEN, None],
                         [classroom.iso(t0 + dt.timedelta(hours=7)), "c" * 40, PUSHED, 17]])
    assert timeline.submitted("a" * 40) is None
    seen = timeline.submitted("b" * 40)
    assert (seen.at, seen.how) == (t0, "seen")
    pushed = timeline.submitted("c" * 40)
    assert (pushed.at, pushed.how) == (t0 + dt.timedelta(hours=7), "push")
