"""`grader classroom sync`: hidden grading of a GitHub Classroom assignment, on the instructor's side.

Students' repositories hold no secret and run only the checker. The instructor's private repository runs this
on a schedule with a token that stays there: it lists the organisation's repositories named
`<prefix>-<username>` (GitHub Classroom's naming), takes each one's latest commit (or its last commit before the
deadline in course.toml's `[classroom]` table), grades the commits it has not graded yet with `grader batch`,
and posts each scorecard back to that commit: a status carrying the score and a comment holding the scorecard.
`OUT/classroom.json` remembers which commit of each repository was posted, so a run with no new commit posts
nothing. The REST calls use the standard library; the API's base URL is configurable (tests use a local fake).
"""

from __future__ import annotations

import io
import json
import os
import shutil
import tarfile
import tomllib
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from grader.course import Course
from grader.i18n import t
from grader.reporting import write_atomic

DEFAULT_API = "https://api.github.com"
STATUS_CONTEXT = "grader/hidden-criteria"
STATE_FILE = "classroom.json"
PAGE = 100
MAX_ARCHIVE_BYTES = 64 << 20      # one repository's tarball
MAX_FILE_BYTES = 1 << 20          # one exercise file in it


class GitHubError(Exception):
    """A REST call failed; the message names the call and GitHub's answer."""


class GitHub:
    """The few REST endpoints the sync uses, over urllib."""

    def __init__(self, token: str, api_url: str = DEFAULT_API, timeout_s: float = 60):
        self.api_url = api_url.rstrip("/")
        self.token = token
        self.timeout_s = timeout_s

    def call(self, method: str, path: str, body: dict | None = None, accept: str = "application/vnd.github+json",
             limit: int = 8 << 20) -> bytes:
        request = urllib.request.Request(self.api_url + path, method=method,
                                         data=None if body is None else json.dumps(body).encode())
        request.add_header("Accept", accept)
        request.add_header("X-GitHub-Api-Version", "2022-11-28")
        request.add_header("User-Agent", "transformer-grader")
        if body is not None:
            request.add_header("Content-Type", "application/json")
        # Unredirected: a tarball's redirect goes to another host, which must not receive the token.
        request.add_unredirected_header("Authorization", f"Bearer {self.token}")
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                data = response.read(limit + 1)
        except urllib.error.HTTPError as exc:
            detail = exc.read(500).decode(errors="replace")
            raise GitHubError(f"{method} {path}: HTTP {exc.code} {detail}") from None
        except urllib.error.URLError as exc:
            raise GitHubError(f"{method} {path}: {exc.reason}") from None
        if len(data) > limit:
            raise GitHubError(f"{method} {path}: the answer is larger than {limit:,} bytes")
        return data

    def json(self, method: str, path: str, body: dict | None = None):
        return json.loads(self.call(method, path, body) or b"null")

    def student_repositories(self, org: str, prefix: str) -> list[dict]:
        """The organisation's repositories named `<prefix>-<username>`, by name."""
        found, page = [], 1
        while True:
            batch = self.json("GET", f"/orgs/{quote(org)}/repos?per_page={PAGE}&page={page}")
            found += [r for r in batch if r["name"].startswith(prefix + "-") and len(r["name"]) > len(prefix) + 1]
            if len(batch) < PAGE:
                return sorted(found, key=lambda r: r["name"])
            page += 1

    def commit_to_grade(self, owner: str, repo: str, deadline: str | None) -> str | None:
        """The SHA of the default branch's latest commit (before `deadline`, when set); None for an empty one."""
        query = f"?per_page=1" + (f"&until={urllib.parse.quote(deadline)}" if deadline else "")
        try:
            commits = self.json("GET", f"/repos/{quote(owner)}/{quote(repo)}/commits{query}")
        except GitHubError as exc:
            if "HTTP 409" in str(exc):   # GitHub's answer for a repository with no commit yet
                return None
            raise
        return commits[0]["sha"] if commits else None

    def tarball(self, owner: str, repo: str, sha: str) -> bytes:
        return self.call("GET", f"/repos/{quote(owner)}/{quote(repo)}/tarball/{sha}", accept="application/vnd.github.raw",
                         limit=MAX_ARCHIVE_BYTES)

    def post_status(self, owner: str, repo: str, sha: str, state: str, description: str) -> None:
        self.json("POST", f"/repos/{quote(owner)}/{quote(repo)}/statuses/{sha}",
                  {"state": state, "description": description[:140], "context": STATUS_CONTEXT})

    def post_comment(self, owner: str, repo: str, sha: str, body: str) -> None:
        self.json("POST", f"/repos/{quote(owner)}/{quote(repo)}/commits/{sha}/comments", {"body": body[:65000]})


def quote(part: str) -> str:
    return urllib.parse.quote(part, safe="")


def classroom_settings(course: Course) -> dict:
    """course.toml's `[classroom]` table: `deadline` (ISO 8601, e.g. "2026-12-01T23:59:59Z") or nothing."""
    data = tomllib.loads((course.root / "course.toml").read_text(encoding="utf-8"))
    return data.get("classroom", {})


def unpack_exercises(archive: bytes, course: Course, target: Path) -> Path:
    """From a repository tarball (one top folder), only the file each exercise names, as regular files of at most
    MAX_FILE_BYTES, and the notebooks that may hold an exercise (grader/notebooks.py): nothing else in a student's
    repository reaches the grader."""
    from grader.notebooks import MAX_NOTEBOOK_BYTES, is_submitted_notebook

    wanted = {f"exercises/{ex.id}/{ex.file}": (ex.id, ex.file) for ex in course.exercises}
    ids = {ex.id for ex in course.exercises}
    target.mkdir(parents=True)
    with tarfile.open(fileobj=io.BytesIO(archive), mode="r:*") as tar:
        for member in tar:
            inside = member.name.split("/", 1)[1] if "/" in member.name else ""
            if inside in wanted and member.isreg() and member.size <= MAX_FILE_BYTES:
                exercise_id, name = wanted[inside]
                (target / exercise_id).mkdir(exist_ok=True)
                (target / exercise_id / name).write_bytes(tar.extractfile(member).read())
            elif (inside.startswith("exercises/") and member.isreg() and member.size <= MAX_NOTEBOOK_BYTES
                  and is_submitted_notebook(ids, inside.removeprefix("exercises/"))):   # an exercise in a notebook
                path = target / inside.removeprefix("exercises/")
                path.parent.mkdir(exist_ok=True)
                path.write_bytes(tar.extractfile(member).read())
    return target


@dataclass
class Graded:
    student: str
    repository: str
    sha: str
    state: str          # the commit status: success (graded) or error (could not be graded)
    description: str


def scorecard_comment(report_dir: Path, sha: str, lang: str = "en") -> tuple[str, str, str]:
    """(status state, status description, comment body) from a graded report folder, in `lang`."""
    report_file = report_dir / "report.json"
    if not report_file.is_file():
        return ("error", t("could not be graded; your instructor has been told").render(lang),
                t("Commit {sha} could not be graded.", sha=sha).render(lang))
    report = json.loads(report_file.read_text(encoding="utf-8"))
    description = t("score {score:g}/{max_score:g} ({percent:g}%)", score=report["score"],
                    max_score=report["max_score"], percent=report["percent"])
    scorecard = (report_dir / "scorecard.md").read_text(encoding="utf-8")
    heading = t("Hidden criteria, commit {sha}: {description}", sha=sha, description=description)
    return "success", description.render(lang), f"{heading.render(lang)}\n\n{scorecard}"


def sync(course: Course, github: GitHub, org: str, prefix: str, out: Path, grade_batch: Callable[..., dict],
         deadline: str | None = None, lang: str = "en") -> list[Graded]:
    """Grade every student repository whose commit to grade is not the one already posted, and post back.
    `grade_batch(submissions, out)` grades every student folder of `submissions` into `out` (grader batch, with
    its regrade on: each of them is a new commit). Statuses and comments are written in `lang`."""
    out.mkdir(parents=True, exist_ok=True)
    state_file = out / STATE_FILE
    posted: dict[str, str] = json.loads(state_file.read_text()) if state_file.is_file() else {}
    todo: list[tuple[str, str, str]] = []          # (student, repository, sha)
    for repo in github.student_repositories(org, prefix):
        sha = github.commit_to_grade(org, repo["name"], deadline)
        if sha is not None and posted.get(repo["name"]) != sha:
            todo.append((repo["name"][len(prefix) + 1:], repo["name"], sha))
    if not todo:
        return []
    fetched = out / "fetched"
    shutil.rmtree(fetched, ignore_errors=True)
    for student, repository, sha in todo:
        unpack_exercises(github.tarball(org, repository, sha), course, fetched / student)
        shutil.rmtree(out / "students" / student, ignore_errors=True)   # a failed grading must not post an old score
    grade_batch(fetched, out)
    shutil.rmtree(fetched, ignore_errors=True)
    graded = []
    for student, repository, sha in todo:
        state, description, body = scorecard_comment(out / "students" / student, sha, lang)
        github.post_status(org, repository, sha, state, description)
        github.post_comment(org, repository, sha, body)
        posted[repository] = sha
        write_atomic(state_file, json.dumps(posted, indent=1, sort_keys=True))   # a rerun posts nothing twice
        graded.append(Graded(student, repository, sha, state, description))
    return graded


def token_from_environment() -> str:
    return os.environ.get("GRADER_TOKEN") or os.environ.get("GITHUB_TOKEN") or ""
