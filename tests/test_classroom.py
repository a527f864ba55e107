"""`grader classroom sync` against a local fake of the GitHub REST endpoints it uses: a class of three student
repositories is graded and gets its scorecards; a run with no new commit posts nothing; a new commit in one
repository regrades only that one."""

import io
import json
import re
import tarfile
import threading
import tomllib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from grader.batch import run_batch
from grader.classroom import STATUS_CONTEXT, GitHub, sync
from grader.course import load_course

from conftest import ROOT, course_copy

ORG, PREFIX, TOKEN = "course-org", "transformer", "test-token"


class FakeGitHub:
    """Repositories with commits (sha -> {path: text}); records every call the client makes."""

    def __init__(self):
        self.repos: dict[str, list[tuple[str, dict[str, str]]]] = {}
        self.calls: list[tuple[str, str, dict | None, str | None]] = []   # method, path, body, Authorization

    def commit(self, repo: str, files: dict[str, str]) -> str:
        sha = f"{len(self.calls) + sum(map(len, self.repos.values())) + 1:040x}"
        self.repos.setdefault(repo, []).append((sha, files))
        return sha

    def tarball(self, repo: str, sha: str) -> bytes:
        files = dict(next(f for s, f in self.repos[repo] if s == sha))
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
            for path, text in {**files, "README.md": "not graded"}.items():
                data = text.encode()
                info = tarfile.TarInfo(f"{ORG}-{repo}-{sha[:7]}/{path}")
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
        return buffer.getvalue()

    def posts(self) -> list[tuple[str, dict]]:
        return [(path, body) for method, path, body, _ in self.calls if method == "POST"]


def serve(fake: FakeGitHub):
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def _answer(self, code: int, payload, content_type="application/json", headers=()):
            data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
            self.send_response(code)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            for name, value in headers:
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            fake.calls.append(("GET", self.path, None, self.headers.get("Authorization")))
            path, _, query = self.path.partition("?")
            if m := re.fullmatch(rf"/orgs/{ORG}/repos", path):
                page = int(dict(p.split("=") for p in query.split("&"))["page"])
                names = sorted(fake.repos) + ["unrelated-repo"]
                return self._answer(200, [{"name": n} for n in names] if page == 1 else [])
            if m := re.fullmatch(rf"/repos/{ORG}/([\w-]+)/commits", path):
                return self._answer(200, [{"sha": fake.repos[m[1]][-1][0]}])
            if m := re.fullmatch(rf"/repos/{ORG}/([\w-]+)/tarball/(\w+)", path):   # GitHub redirects to codeload
                return self._answer(302, b"", headers=[("Location", f"/codeload/{m[1]}/{m[2]}")])
            if m := re.fullmatch(r"/codeload/([\w-]+)/(\w+)", path):
                return self._answer(200, fake.tarball(m[1], m[2]), "application/x-gzip")
            return self._answer(404, {"message": "Not Found"})

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            fake.calls.append(("POST", self.path, body, self.headers.get("Authorization")))
            return self._answer(201, {})

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    return load_course(course_copy(tmp_path_factory.mktemp("course"), ["heads"]))


@pytest.fixture(scope="module")
def github():
    fake = FakeGitHub()
    server = serve(fake)
    yield fake, GitHub(TOKEN, f"http://127.0.0.1:{server.server_address[1]}")
    server.shutdown()


def heads_file(source: Path) -> dict[str, str]:
    return {"exercises/heads/heads.py": source.read_text()}


def test_a_class_is_graded_once_and_only_new_commits_again(course, github, tmp_path):
    fake, client = github
    solution, stub = ROOT / "solutions" / "heads" / "heads.py", ROOT / "exercises" / "heads" / "heads.py"
    mutant = ROOT / "tests" / "mutants" / "heads" / "merge_no_transpose"
    fails = tomllib.loads((mutant / "manifest.toml").read_text())["fails"]
    points = course.exercise("heads").points
    shas = {"alice": fake.commit(f"{PREFIX}-alice", heads_file(solution)),
            "bob": fake.commit(f"{PREFIX}-bob", heads_file(stub)),
            "carol": fake.commit(f"{PREFIX}-carol", heads_file(mutant / "heads.py"))}
    graded_batches = []

    def grade_batch(submissions, out):
        graded_batches.append(sorted(p.name for p in submissions.iterdir()))
        return run_batch(course, submissions, out, 3, True, "basic", "en")

    out = tmp_path / "gradebook"
    first = sync(course, client, ORG, PREFIX, out, grade_batch)
    total = sum(points.values())
    expected = {"alice": total, "bob": 0.0, "carol": total - sum(points[c] for c in fails)}
    assert graded_batches == [["alice", "bob", "carol"]]
    assert {g.student: g.description for g in first} == {
        s: f"score {score:g}/{total:g} ({round(100 * score / total, 2):g}%)" for s, score in expected.items()}
    posts = fake.posts()
    assert len(posts) == 6
    for student, score in expected.items():
        sha, repo = shas[student], f"{PREFIX}-{student}"
        status = next(body for path, body in posts if path == f"/repos/{ORG}/{repo}/statuses/{sha}")
        assert status == {"state": "success", "context": STATUS_CONTEXT,
                          "description": f"score {score:g}/{total:g} ({round(100 * score / total, 2):g}%)"}
        comment = next(body for path, body in posts if path == f"/repos/{ORG}/{repo}/commits/{sha}/comments")
        assert sha in comment["body"] and "heads" in comment["body"]
    api_calls = [c for c in fake.calls if not c[1].startswith("/codeload/")]
    assert all(auth == f"Bearer {TOKEN}" for *_, auth in api_calls)
    assert all(auth is None for _, path, _, auth in fake.calls if path.startswith("/codeload/")), \
        "the token must not follow the redirect to another host"
    assert not any("unrelated-repo" in path for _, path, *_ in fake.calls[1:])

    fake.calls.clear()
    assert sync(course, client, ORG, PREFIX, out, grade_batch) == []
    assert fake.posts() == [] and len(graded_batches) == 1

    fake.calls.clear()
    new_sha = fake.commit(f"{PREFIX}-carol", heads_file(solution))
    again = sync(course, client, ORG, PREFIX, out, grade_batch)
    assert graded_batches[-1] == ["carol"]
    assert [(g.student, g.sha) for g in again] == [("carol", new_sha)]
    assert [path for path, _ in fake.posts()] == [f"/repos/{ORG}/{PREFIX}-carol/statuses/{new_sha}",
                                                   f"/repos/{ORG}/{PREFIX}-carol/commits/{new_sha}/comments"]
    assert fake.posts()[0][1]["description"] == f"score {total:g}/{total:g} (100%)"


def test_the_status_and_comment_speak_the_chosen_language(tmp_path):
    """A Chinese class reads its commit status and comment in Chinese; a submission without a report says it could
    not be graded, in that language too."""
    from grader.classroom import scorecard_comment

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
