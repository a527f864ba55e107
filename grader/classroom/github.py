"""`grader classroom sync`: hidden grading of a GitHub Classroom assignment, on the instructor's side.

Students' repositories hold no secret and run only the checker. The instructor's private repository runs this
on a schedule with a token that stays there.

Theory of operation. One run:

1. lists the organisation's repositories named `<prefix>-<username>` (GitHub Classroom's naming); without that
   list nothing is known, and the run stops;
2. learns, for each repository, what its default branch held and since when (`Timeline`): GitHub's record of
   the branch's pushes (the repository activity API: each push's time and the commit it left the branch at)
   or, where GitHub keeps no such record, what each run saw at the branch's head (the first run that saw a
   commit: it arrived then or before).
   Both are kept in `OUT/classroom.json`, so what GitHub stops listing stays known. The commit to grade is the
   one the branch held at the deadline (course.toml's `[classroom]` `deadline`), or now without one. A
   commit's own date, which whoever commits sets, plays no part; `arrival` says when a graded commit arrived;
3. downloads that commit's exercise files and nothing else (`exercises/<exercise-id>/<file>` as course.toml
   names them) through the commit's git trees and blobs, each capped: a larger file is not downloaded and
   staging refuses it by its size (that exercise's error), a link stays a link (refused by name); a file
   already downloaded (the same blob, for this repository's last commit or a classmate's) is not downloaded again;
4. grades them all with `grader batch` (its regrade on: each is a new commit), keeps each scorecard as the
   repository's pending post, and posts it back to its commit: a status carrying the score and a comment
   holding the scorecard, both as the course's feedback policy shows them to the student (grader.feedback: the
   criteria not shown yet, the attempt cap); `publish` posts the whole scorecards once the instructor releases
   them.

GitHub's budget (a token's 5,000 calls an hour, and secondary limits on bursts and posts): the calls are counted
(`GitHub.calls`); the organisation's listing and each branch's record are asked for conditionally (ETag), so that
what did not change since the last run costs a 304, free of the rate limit; a rate limit is waited for as GitHub
asks when the wait is short (`MAX_WAIT_S`), and otherwise stops the run (`RateLimited`): what was downloaded is
graded and kept pending, and the same command, run again after the reset, goes on without grading it again.

With course.toml's `[policy]` (grader.policy) the deadline is each student's own: the commit graded is the one the
branch held at the student's cutoff (moved by an extension from `--roster`), or the newest one without a cutoff,
and its lateness is by when it reached GitHub (`submitted_time`), which goes into the gradebook before the grading:
the batch then writes the penalty into the scorecard it posts.

Each repository goes on its own and gets its row (`Row`). One that GitHub or the grader failed (its listing, a
download, a grading that ended `grader_error`) is posted and recorded nothing, so the next run tries it again; one
whose post GitHub failed keeps it pending, posted by the next run without a grading; the others are graded and
posted. The REST calls use the standard library; the API's base URL is
configurable (tests use a local fake).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import itertools
import json
import os
import re
import shutil
import time
import tomllib
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from grader.course import Course
from grader.batch.gradebook import GRADER_ERROR, Gradebook, content_hash, grader_key, said
from grader.i18n import Text, rendered, t, verbatim
from grader.grading.answers import ANSWERS_FILE, MAX_ANSWERS_BYTES
from grader.grading.notebooks import MAX_NOTEBOOK_BYTES, is_submitted_notebook
from grader.grading.notebooks import SUFFIX as NOTEBOOK_SUFFIX
from grader.feedback import QUEUED, Feedback, load_feedback, mark_published, published_at, student_view
from grader.policy import FROM_PUSH, FROM_SEEN, Policy, Submitted, student_dates
from grader.batch.roster import Student, match
from grader.render.files import write_atomic
from grader.render.templated import render_markdown
from grader.report.build import stored_report
from grader.report.model import Report
from grader.sandbox.private import private_folder
from grader.sandbox.staging import MAX_SOURCE_BYTES

DEFAULT_API = "https://api.github.com"
STATUS_CONTEXT = "grader/hidden-criteria"
STATE_FILE = "classroom.json"
STATE_VERSION = 2
PAGE = 100
MAX_ANSWER_BYTES = 8 << 20        # one JSON answer: a folder's listing, a page of pushes
MAX_FILE_BYTES = MAX_SOURCE_BYTES  # one exercise file: staging refuses a larger one, so it is never downloaded
MAX_PUSH_PAGES = 10               # pages of pushes read per run, newest first, down to one already recorded
MAX_WAIT_S = 300                  # the longest sleep a rate limit may cost; a longer one stops the run, to go on later
MAX_RETRIES = 3                   # tries again of one call refused by a rate limit (PyGithub's GithubRetry: 10)
SECONDARY_WAIT_S = 60             # a secondary limit without Retry-After: GitHub asks for a minute at least
VALIDATORS_FILE = "github-validators.json"   # beside classroom.json: the last answer of each GET kept, for a 304
BLOBS = "blobs"                   # beside it: each repository's exercise files last downloaded, by blob SHA
EXERCISES = "exercises"           # the folder of a student's repository holding `<exercise-id>/<file>`
NO_COMMIT = "0" * 40              # what a push that deleted the branch left it at
LINK_MODE, SUBMODULE_MODE = "120000", "160000"   # git tree entry modes

# A row's status.
POSTED = "posted"      # graded, and the scorecard posted to the commit
RETRY = "retry"        # GitHub or the grader failed: nothing posted or recorded; the next run tries again
NOTHING = "nothing"    # no commit to grade: an empty repository, or none on the branch by the deadline
LEFT = "left"          # GitHub's rate limit stopped the run before this one was downloaded or posted
# QUEUED (grader.feedback): past the attempt cap, the commit waits for the next window; the student is told once
# Where a RETRY failed.
LISTING, DOWNLOAD, GRADING, POSTING = "listing", "download", "grading", "posting"
# How an arrival is known.
PUSHED = "push"        # GitHub's record of the push that left the branch at the commit: its time
SEEN = "seen"          # the first run that saw the commit at the branch's head: it arrived then or before


class GitHubError(Exception):
    """A REST call failed; the message names the call and GitHub's answer (`code`: its HTTP status, if any)."""

    def __init__(self, message: str, code: int | None = None):
        super().__init__(message)
        self.code = code


class Truncated(GitHubError):
    """GitHub cut a git tree's listing short (over its 100,000 entries or 7 MB)."""


class RateLimited(Exception):
    """GitHub's rate limit stops the run: the wait it asks for is longer than the run may sleep, or the tries ran
    out. Not a GitHubError: no repository failed, the run stops and the same command goes on from `resume_at`."""

    def __init__(self, message: str, resume_at: dt.datetime):
        super().__init__(message)
        self.resume_at = resume_at


# GitHub failed, or answered in another shape than its documentation's (a field missing, a time unreadable).
UNEXPECTED = (GitHubError, KeyError, TypeError, ValueError, IndexError)


def utc_now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def parse_time(text: str) -> dt.datetime:
    """An ISO 8601 time ("2026-12-01T23:59:59Z"); one without a zone is taken as UTC."""
    when = dt.datetime.fromisoformat(text)
    return when if when.tzinfo else when.replace(tzinfo=dt.UTC)


def iso(when: dt.datetime) -> str:
    return when.astimezone(dt.UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


class GitHub:
    """The few REST endpoints the sync uses, over urllib, within GitHub's rate limits.

    Its retry policy is PyGithub's `GithubRetry`'s: a 403 or 429 that is a rate limit is tried again after the
    wait GitHub asks for (`Retry-After`; else, with `x-ratelimit-remaining: 0`, until `x-ratelimit-reset`; else, a
    secondary limit, a minute doubled at each try), and a 403 that is not one (a permission) is an error at once.
    Unlike it, a wait longer than `max_wait_s`, or a rate limit still there after MAX_RETRIES tries, raises
    RateLimited instead of sleeping: a scheduled run stops and the next one goes on. `sleep` and `clock` (epoch
    seconds) are GitHub's time for tests. The GETs whose answers are kept (`remember`) are sent conditionally with
    the validators of the last answer (ETag, Last-Modified): a 304 costs nothing of the primary rate limit.
    `calls` counts the requests sent, `not_modified` the 304s among them."""

    def __init__(self, token: str, api_url: str = DEFAULT_API, timeout_s: float = 60, max_wait_s: float = MAX_WAIT_S,
                 sleep: Callable[[float], None] = time.sleep, clock: Callable[[], float] = time.time):
        self.api_url = api_url.rstrip("/")
        self.token = token
        self.timeout_s = timeout_s
        self.max_wait_s = max_wait_s
        self.sleep, self.clock = sleep, clock
        self.calls = self.not_modified = 0
        self.validators: dict[str, dict[str, str]] = {}   # url -> {"etag"/"last_modified": ..., "body": text}
        self.exhausted_until: float | None = None          # the primary limit's reset, once it said 0 remaining

    def load_validators(self, path: Path) -> None:
        """The validators kept by an earlier run (VALIDATORS_FILE); a file unreadable is as none."""
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return
        if isinstance(data, dict) and data.get("version") == 1 and isinstance(data.get("answers"), dict):
            self.validators = {url: kept for url, kept in data["answers"].items()
                               if isinstance(kept, dict) and all(isinstance(kept.get(k), str)
                                                                 for k in ("etag", "last_modified", "body"))}

    def save_validators(self, path: Path) -> None:
        write_atomic(path, json.dumps({"version": 1, "answers": self.validators}, sort_keys=True), durable=False)

    def request(self, method: str, path: str, body: dict | None = None, accept: str = "application/vnd.github+json",
                limit: int = MAX_ANSWER_BYTES, remember: bool = False) -> tuple[bytes, dict[str, str]]:
        """The answer's body (at most `limit` bytes, else GitHubError) and headers. `path` is below the API's
        base URL, or a whole URL on it (a next page's link): the token goes nowhere else. A GET with `remember`
        is sent with the last answer's validators, and a 304 gives that answer back."""
        url = path if path.startswith(self.api_url + "/") else self.api_url + path
        shown = f"{method} {url[len(self.api_url):]}"
        kept = self.validators.get(url) if remember and method == "GET" else None
        for tries in range(MAX_RETRIES + 1):
            self._within_budget(shown)
            request = urllib.request.Request(url, method=method,
                                             data=None if body is None else json.dumps(body).encode())
            request.add_header("Accept", accept)
            request.add_header("X-GitHub-Api-Version", "2022-11-28")
            request.add_header("User-Agent", "transformer-grader")
            if body is not None:
                request.add_header("Content-Type", "application/json")
            if kept and kept.get("etag"):
                request.add_header("If-None-Match", kept["etag"])
            elif kept and kept.get("last_modified"):
                request.add_header("If-Modified-Since", kept["last_modified"])
            # Unredirected: a redirect may go to another host, which must not receive the token.
            request.add_unredirected_header("Authorization", f"Bearer {self.token}")
            self.calls += 1
            try:
                with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                    data = response.read(limit + 1)
                    headers = {k.lower(): v for k, v in response.headers.items()}
            except urllib.error.HTTPError as exc:
                headers = {k.lower(): v for k, v in (exc.headers or {}).items()}
                self._note_budget(headers)
                if exc.code == 304 and kept is not None:
                    self.not_modified += 1
                    return kept["body"].encode(), headers
                detail = exc.read(500).decode(errors="replace")
                now = self.clock()
                wait = rate_limit_wait(exc.code, detail, headers, tries, now)
                if wait is None:
                    raise GitHubError(f"{shown}: HTTP {exc.code} {detail}", exc.code) from None
                if wait > self.max_wait_s or tries == MAX_RETRIES:
                    raise RateLimited(f"{shown}: HTTP {exc.code} {detail}", moment(now + wait)) from None
                self.sleep(wait)
                self.exhausted_until = None   # that wait was for the reset too
                continue
            except (urllib.error.URLError, OSError) as exc:   # a refused connection, a reset, a timeout
                raise GitHubError(f"{shown}: {getattr(exc, 'reason', exc)}") from None
            self._note_budget(headers)
            if len(data) > limit:
                raise GitHubError(f"{shown}: the answer is larger than {limit:,} bytes")
            if remember and method == "GET" and (headers.get("etag") or headers.get("last-modified")):
                try:
                    self.validators[url] = {"etag": headers.get("etag", ""),
                                            "last_modified": headers.get("last-modified", ""), "body": data.decode()}
                except UnicodeDecodeError:
                    self.validators.pop(url, None)
            return data, headers
        raise AssertionError("unreachable: the last try returns or raises")

    def _note_budget(self, headers: dict[str, str]) -> None:
        """Remember when the primary limit is spent (`x-ratelimit-remaining: 0`), so that no call is wasted on it."""
        if headers.get("x-ratelimit-remaining") == "0" and headers.get("x-ratelimit-reset", "").isdigit():
            self.exhausted_until = float(headers["x-ratelimit-reset"])
        elif headers.get("x-ratelimit-remaining", "").isdigit():
            self.exhausted_until = None

    def _within_budget(self, shown: str) -> None:
        """Before a call: with the primary limit spent, wait for its reset, or stop when that is too far."""
        if self.exhausted_until is None:
            return
        now = self.clock()
        wait = self.exhausted_until - now + 1
        if wait > self.max_wait_s:
            raise RateLimited(f"{shown}: the primary rate limit is spent", moment(now + wait))
        if wait > 0:
            self.sleep(wait)
        self.exhausted_until = None

    def json(self, method: str, path: str, body: dict | None = None, remember: bool = False):
        data = self.request(method, path, body, remember=remember)[0]
        try:
            return json.loads(data or b"null")
        except ValueError:
            raise GitHubError(f"{method} {path}: the answer is not JSON") from None

    def student_repositories(self, org: str, prefix: str) -> list[dict]:
        """The organisation's repositories named `<prefix>-<username>`, by name."""
        found, page = [], 1
        while True:
            batch = self.json("GET", f"/orgs/{quote(org)}/repos?per_page={PAGE}&page={page}", remember=True)
            found += [r for r in batch if r["name"].startswith(prefix + "-") and len(r["name"]) > len(prefix) + 1]
            if len(batch) < PAGE:
                return sorted(found, key=lambda r: r["name"])
            page += 1

    def head(self, owner: str, repo: str, branch: str) -> str | None:
        """The SHA of the branch's latest commit; None for a repository with no commit."""
        try:
            commits = self.json("GET", f"/repos/{quote(owner)}/{quote(repo)}/commits?per_page=1&sha={quote(branch)}",
                                remember=True)
        except GitHubError as exc:
            if exc.code == 409:   # GitHub's answer for a repository with no commit yet
                return None
            raise
        return commits[0]["sha"] if commits else None

    def pushes(self, owner: str, repo: str, branch: str, known: set[int]) -> list[dict] | None:
        """GitHub's record of the branch's changes (pushes, force pushes, merges...), newest first, down to one of
        `known` (ids already recorded); None when GitHub keeps none for this repository here (an older GitHub
        Enterprise Server, or a token that may not read it)."""
        path = (f"/repos/{quote(owner)}/{quote(repo)}/activity?ref={quote('refs/heads/' + branch)}"
                f"&per_page={PAGE}&direction=desc")
        found: list[dict] = []
        page_path: str | None = path
        for _ in range(MAX_PUSH_PAGES):
            if page_path is None:
                return found
            try:
                data, headers = self.request("GET", page_path, remember=page_path == path)   # the first page: newest
            except GitHubError as exc:
                # 404: no such endpoint here; 403 without the words of a rate limit: the token may not read it.
                if exc.code == 404 or (exc.code == 403 and "rate limit" not in str(exc).lower()):
                    return None
                if exc.code == 409:   # a repository with no commit yet: nothing was pushed
                    return found
                raise
            try:
                page = json.loads(data)
            except ValueError:
                raise GitHubError(f"GET {page_path}: the answer is not JSON") from None
            for entry in page:
                if entry.get("id") in known:
                    return found
                found.append(entry)
            page_path = next_page(headers.get("link", "")) if page else None
        return found

    def tree(self, owner: str, repo: str, sha: str, recursive: bool = False) -> dict[str, dict]:
        """A git tree's entries by name (`recursive`: every entry below it, by its path from it, in one call): each
        with its `mode`, `type`, `sha` and, for a blob, `size`. Truncated when GitHub cut the listing short."""
        listing = self.json("GET", f"/repos/{quote(owner)}/{quote(repo)}/git/trees/{quote(sha)}"
                                   + ("?recursive=1" if recursive else ""))
        if not isinstance(listing, dict) or not isinstance(listing.get("tree"), list):
            raise GitHubError(f"the folder listing of {sha} is not a listing")
        if listing.get("truncated"):
            raise Truncated(f"the folder listing of {sha} is incomplete")
        return {entry["path"]: entry for entry in listing["tree"]}

    def blob(self, owner: str, repo: str, sha: str, size: int) -> bytes:
        """A git blob's bytes, `size` of them at most, checked against its SHA."""
        data = self.request("GET", f"/repos/{quote(owner)}/{quote(repo)}/git/blobs/{quote(sha)}",
                            accept="application/vnd.github.raw+json", limit=size)[0]
        if git_blob_sha(data) != sha:
            raise GitHubError(f"the content downloaded for blob {sha} is not that blob")
        return data

    def post_status(self, owner: str, repo: str, sha: str, state: str, description: str) -> None:
        self.json("POST", f"/repos/{quote(owner)}/{quote(repo)}/statuses/{sha}",
                  {"state": state, "description": description[:140], "context": STATUS_CONTEXT})

    def post_comment(self, owner: str, repo: str, sha: str, body: str) -> None:
        self.json("POST", f"/repos/{quote(owner)}/{quote(repo)}/commits/{sha}/comments", {"body": body[:65000]})


def rate_limit_wait(code: int, detail: str, headers: dict[str, str], tries: int, now: float) -> float | None:
    """Seconds to wait before a refused call is tried again when the refusal is a rate limit, as PyGithub's
    GithubRetry reads it: GitHub's `Retry-After`; else the primary limit's reset, when none remains; else a
    secondary limit's minute, doubled at each try. None for any other refusal (a 403 for a permission)."""
    if code not in (403, 429):
        return None
    retry_after = headers.get("retry-after", "").strip()
    if retry_after.isdigit():
        return float(retry_after)
    if headers.get("x-ratelimit-remaining") == "0" and headers.get("x-ratelimit-reset", "").isdigit():
        return max(0.0, float(headers["x-ratelimit-reset"]) - now) + 1
    if code == 429 or "rate limit" in detail.lower():
        return SECONDARY_WAIT_S * 2 ** tries
    return None


def moment(epoch_s: float) -> dt.datetime:
    """An epoch time to the second (GitHub's reset and Retry-After are whole seconds)."""
    return dt.datetime.fromtimestamp(round(epoch_s), dt.UTC)


def quote(part: str) -> str:
    return urllib.parse.quote(part, safe="")


def next_page(link: str) -> str | None:
    """The `rel="next"` address of a Link header (cursor pagination), if any."""
    match = re.search(r'<([^>]+)>;\s*rel="next"', link)
    return match[1] if match else None


def classroom_settings(course: Course) -> dict:
    """course.toml's `[classroom]` table: `deadline` (ISO 8601, e.g. "2026-12-01T23:59:59Z") or nothing."""
    data = tomllib.loads((course.root / "course.toml").read_text(encoding="utf-8"))
    return data.get("classroom", {})


@dataclass(frozen=True)
class Arrival:
    """When a commit reached its branch, and how that is known (PUSHED or SEEN)."""

    at: dt.datetime
    how: str


class Timeline:
    """What a repository's default branch held and since when: entries [time, commit, how, push id or None], each
    a moment at which the branch held that commit (a push that left it there, or a run that saw it at the head),
    kept in time order."""

    def __init__(self, entries: list[list]):
        self.entries = sorted(entries, key=lambda e: parse_time(e[0]))

    def pushes_known(self) -> set[int]:
        return {e[3] for e in self.entries if e[2] == PUSHED}

    def add_pushes(self, pushes: list[dict]) -> None:
        known = self.pushes_known()
        fresh = [[iso(parse_time(p["timestamp"])), p["after"], PUSHED, p["id"]] for p in pushes if p["id"] not in known]
        self.entries = sorted(self.entries + fresh, key=lambda e: parse_time(e[0]))

    def add_seen(self, sha: str, at: dt.datetime) -> None:
        """A run saw `sha` at the head at `at`: recorded when the entries did not say so already."""
        if self.branch_at(at) != sha:
            self.entries.append([iso(at), sha, SEEN, None])
            self.entries.sort(key=lambda e: parse_time(e[0]))

    def branch_at(self, when: dt.datetime) -> str | None:
        """The commit the branch held at `when` by the latest entry then; None before any, or once deleted."""
        held = None
        for at, sha, _how, _id in self.entries:
            if parse_time(at) > when:
                break
            held = None if sha == NO_COMMIT else sha
        return held

    def arrival(self, sha: str) -> Arrival | None:
        """The earliest moment the entries show the branch holding `sha`."""
        first = next((e for e in self.entries if e[1] == sha), None)
        return Arrival(parse_time(first[0]), first[2]) if first else None

    def submitted(self, sha: str) -> Submitted | None:
        """When `sha` was handed in, for a lateness: the time of its push when GitHub recorded it; when only a sync
        saw it, the moment before, at which the branch held something else (it arrived after that: a time that
        never makes it later than it was); None when nothing before it is known."""
        index = next((i for i, e in enumerate(self.entries) if e[1] == sha), None)
        if index is None:
            return None
        if self.entries[index][2] == PUSHED:
            return Submitted(parse_time(self.entries[index][0]), FROM_PUSH)
        return Submitted(parse_time(self.entries[index - 1][0]), FROM_SEEN) if index > 0 else None


def load_state(path: Path) -> dict:
    """classroom.json: {"version": 2, "repositories": {name: {"posted": sha or None, "timeline": entries}}}.
    The first format ({name: sha posted}) is read as posted commits with no timeline."""
    data = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    if data.get("version") != STATE_VERSION:
        data = {"version": STATE_VERSION,
                "repositories": {name: {"posted": sha, "timeline": []} for name, sha in data.items()}}
    return data


def save_state(path: Path, state: dict) -> None:
    write_atomic(path, json.dumps(state, indent=1, sort_keys=True))


def arrival(out: Path, repository: str, sha: str) -> Arrival | None:
    """When commit `sha` reached `repository`'s default branch, as the syncs into `out` recorded it: the time of
    GitHub's record of its push (PUSHED), or, failing that, of the first sync that saw it (SEEN: it arrived then
    or before). None when no sync saw it. What a lateness policy reads."""
    record = load_state(out / STATE_FILE)["repositories"].get(repository)
    return Timeline(record["timeline"]).arrival(sha) if record else None


def submitted_time(out: Path, repository: str, sha: str) -> Submitted | None:
    """When commit `sha` was handed in to `repository`, as the syncs into `out` know it (Timeline.submitted)."""
    record = load_state(out / STATE_FILE)["repositories"].get(repository)
    return Timeline(record["timeline"]).submitted(sha) if record else None


def commit_to_grade(github: GitHub, org: str, repo: dict, record: dict, deadline: dt.datetime | None,
                    now: dt.datetime) -> str | None:
    """Add to the repository's timeline what GitHub records of its default branch (its pushes; where GitHub keeps
    no such record, what the branch holds now); return the commit it held at the deadline (now, without one, or
    before it). With the record, its newest push says what the branch holds: the branch's head is not read."""
    name, branch = repo["name"], repo.get("default_branch") or "main"
    timeline = Timeline(record["timeline"])
    pushes = github.pushes(org, name, branch, timeline.pushes_known())
    if pushes:
        timeline.add_pushes(pushes)
    if pushes is None:
        head = github.head(org, name, branch)
        if head is not None:
            timeline.add_seen(head, now)
    record["timeline"] = timeline.entries
    return timeline.branch_at(min(now, deadline) if deadline else now)


class Blobs:
    """A repository's git blobs, each read once: downloaded from GitHub, or taken from `store` (the folder holding
    the blobs of the commit this repository last had downloaded, by SHA) when a file did not change since, or
    from a classmate's store beside it (a file of the handout no one of them changed yet). A blob is its SHA: one
    whose bytes are not is downloaded."""

    def __init__(self, github: GitHub, owner: str, repo: str, store: Path | None):
        self.github, self.owner, self.repo, self.store = github, owner, repo, store
        self.used: set[str] = set()

    def read(self, sha: str, size: int) -> bytes:
        if self.store is None or not BLOB_SHA.fullmatch(sha):
            return self.github.blob(self.owner, self.repo, sha, size)
        self.used.add(sha)
        kept = self.store / sha
        for found in itertools.chain((kept,), self.store.parent.glob(f"*/{sha}")):   # the classmates' looked at lazily
            if found.is_file() and found.stat().st_size == size:
                data = found.read_bytes()
                if git_blob_sha(data) == sha:
                    if found != kept:
                        self.store.mkdir(parents=True, exist_ok=True)
                        kept.write_bytes(data)
                    return data
        data = self.github.blob(self.owner, self.repo, sha, size)
        self.store.mkdir(parents=True, exist_ok=True)
        kept.write_bytes(data)   # a torn file fails the SHA check above and is downloaded again
        return data

    def keep_only_used(self) -> None:
        """The store holds this commit's blobs alone: the next commit reads again only what changed."""
        if self.store is not None and self.store.is_dir():
            for path in self.store.iterdir():
                if path.name not in self.used:
                    path.unlink()


BLOB_SHA = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")


def git_blob_sha(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def fetch_exercises(github: GitHub, owner: str, repo: str, sha: str, course: Course, target: Path,
                    store: Path | None = None) -> None:
    """Commit `sha`'s exercise files rebuilt under `target` as `<exercise-id>/<file>`, its written answers
    (`<exercise-id>/answers.md`), and the notebooks that may hold an exercise (`<exercise-id>/<exercise-id>.ipynb`,
    a top-level `exercises/<name>.ipynb`: see grader/grading/notebooks.py), nothing else of it. What staging refuses
    keeps what it refuses it for: a link is a link to nowhere (refused by its name); a file over MAX_FILE_BYTES is a
    file of its size holding nothing (never downloaded; refused by its size); a folder or a submodule where the file
    belongs is a folder (not a regular file); a file where the exercise's folder belongs is an empty file (not a
    folder). Two listings (the commit's, then everything below `exercises/` at once) and one download per file not
    in `store` (Blobs); a listing GitHub cuts short is read folder by folder."""
    target.mkdir(parents=True)
    top = github.tree(owner, repo, sha).get(EXERCISES)
    if top is not None and top["mode"] == LINK_MODE:   # every exercise would be reached through the link
        for ex in course.exercises:
            os.symlink("/nonexistent", target / ex.id)
    if top is None or top["type"] != "tree":
        return
    try:
        below: dict[str, dict] | None = github.tree(owner, repo, top["sha"], recursive=True)
    except Truncated:
        below = None
    folders = github.tree(owner, repo, top["sha"]) if below is None else \
        {path: entry for path, entry in below.items() if "/" not in path}
    blobs = Blobs(github, owner, repo, store)
    ids = {ex.id for ex in course.exercises}
    for name, entry in folders.items():
        if is_submitted_notebook(ids, name):   # one notebook whose cells are tagged with exercise ids
            _place(blobs, entry, target / name, MAX_NOTEBOOK_BYTES)
    for ex in course.exercises:
        folder, path = folders.get(ex.id), target / ex.id
        if folder is None:
            continue
        if folder["mode"] == LINK_MODE:
            os.symlink("/nonexistent", path)
        elif folder["type"] != "tree":
            path.touch()
        else:
            path.mkdir()
            files = github.tree(owner, repo, folder["sha"]) if below is None else \
                {p[len(ex.id) + 1:]: e for p, e in below.items() if p.startswith(ex.id + "/")}
            _place(blobs, files.get(ex.file), path / ex.file)
            notebook = f"{ex.id}{NOTEBOOK_SUFFIX}"
            _place(blobs, files.get(notebook), path / notebook, MAX_NOTEBOOK_BYTES)
            _place(blobs, files.get(ANSWERS_FILE), path / ANSWERS_FILE, MAX_ANSWERS_BYTES)   # written answers
    blobs.keep_only_used()


def _place(blobs: Blobs, entry: dict | None, path: Path, cap: int = MAX_FILE_BYTES) -> None:
    if entry is None:
        return
    if entry["mode"] == LINK_MODE:
        os.symlink("/nonexistent", path)
    elif entry["type"] != "blob":
        path.mkdir()
    elif entry["size"] > cap:
        with open(path, "wb") as fh:
            fh.truncate(entry["size"])
    else:
        path.write_bytes(blobs.read(entry["sha"], entry["size"]))


@dataclass
class Row:
    """One repository's outcome in a run: its status (POSTED, RETRY or NOTHING) and what it says, in the run's
    language; for a RETRY the stage that failed, for a POSTED the commit status posted and the arrival."""

    student: str
    repository: str
    sha: str | None
    status: str
    description: str
    state: str = ""
    stage: str = ""
    arrival: Arrival | None = None


def scorecard_comment(report_dir: Path, sha: str, lang: str = "en", view: Callable[[Report], Report] | None = None,
                      templates: Path | None = None, notes: Sequence[Text] = ()) -> tuple[str, str, str]:
    """(status state, status description, comment body) from a graded report folder, in `lang`: the report as
    `view` shows it to the student (grader.feedback.student_view; default: whole), its scorecard rendered with
    `templates` (default: the scorecard.md beside it), then `notes` (the attempts left)."""
    report_file = report_dir / "report.json"
    if not report_file.is_file():
        return ("error", t("could not be graded; your instructor has been told").render(lang),
                t("Commit {sha} could not be graded.", sha=sha).render(lang))
    report = stored_report(json.loads(report_file.read_text(encoding="utf-8")))
    if view is not None:
        report = view(report)
    # the final grade, after the late penalty and the instructor's overrides, of the criteria shown
    description = t("score {score:g}/{max_score:g} ({percent:g}%)", score=report.final_score,
                    max_score=report.final_max, percent=report.final_percent)
    scorecard = render_markdown(report, templates, lang) if templates is not None else \
        (report_dir / "scorecard.md").read_text(encoding="utf-8")
    heading = t("Hidden criteria, commit {sha}: {description}", sha=sha, description=description)
    said = "".join(f"\n\n{note.render(lang)}" for note in notes)
    return "success", description.render(lang), f"{heading.render(lang)}{said}\n\n{scorecard}"


@dataclass
class Outcome:
    """What one run did: a row for each repository that had something to do, by name; how many repositories the
    organisation has (`repositories`) and how many are left for the next run (`left`: a RETRY, a LEFT, or one the
    run did not reach); the rate limit that stopped the run, if one did; the calls it sent (Github.calls) and the
    304s among them, which cost nothing of the rate limit."""

    rows: list[Row]
    repositories: int
    left: int
    stopped: RateLimited | None
    calls: int
    not_modified: int


def blob_store(out: Path, repository: str) -> Path | None:
    """Where `repository`'s last downloaded blobs are kept (Blobs); None for a name that is no plain folder name."""
    if re.fullmatch(r"[\w.-]+", repository) and repository not in (".", ".."):
        return out / BLOBS / repository
    return None


def sync(course: Course, github: GitHub, org: str, prefix: str, out: Path, grade_batch: Callable[..., dict],
         deadline: dt.datetime | None = None, lang: str = "en",
         clock: Callable[[], dt.datetime] = utc_now, policy: Policy | None = None,
         roster: list[Student] | None = None, feedback: Feedback | None = None) -> Outcome:
    """Grade every student repository whose commit to grade is not the one already posted, and post back.
    `grade_batch(submissions, out)` grades every student folder of `submissions` into `out` (grader batch, with its
    regrade on: each of them is a new commit). Statuses, comments and rows are written in `lang`; `clock` says
    what time it is. A `policy` with a due date sets each student's deadline instead of `deadline`: their cutoff,
    moved by their extension in `roster`.

    Within GitHub's budget: the organisation is listed once, an unchanged branch costs nothing (a 304), a file
    unchanged since the repository's last download is not downloaded again. A scorecard graded is kept in
    classroom.json as the repository's `pending` post until both its status and its comment are posted, so that
    a post GitHub refused is posted by the next run without a grading, and nothing is posted twice. When GitHub's
    rate limit stops the run (GitHub.RateLimited), what was downloaded is still graded and kept pending, nothing
    more is asked of GitHub, and the Outcome says so: the same command goes on where this one stopped.

    What the comment and status show is the course's feedback policy (`feedback`, default course.toml's:
    grader.feedback): the criteria not shown yet as points only or not at all, until the due date or until
    `publish`. Its attempt cap counts each student's graded commits (`attempts` in classroom.json): past it a commit
    is graded and shows nothing of those criteria, or is queued for the next window."""
    feedback = feedback or load_feedback(course)
    private_folder(out)   # every student's files and reports: at the basic level, no classmate's code may read it
    state_file = out / STATE_FILE
    state = load_state(state_file)
    github.load_validators(out / VALIDATORS_FILE)
    rows: list[Row] = []
    stopped: RateLimited | None = None

    def retry(student: str, repository: str, sha: str | None, stage: str, why: Text) -> None:
        rows.append(Row(student, repository, sha, RETRY, why.render(lang), stage=stage))

    def left(student: str, repository: str, sha: str | None, stage: str) -> None:
        rows.append(Row(student, repository, sha, LEFT, t("GitHub's rate limit stopped the run first; the next run "
                                                           "goes on from here").render(lang), stage=stage))

    def outcome() -> Outcome:
        github.save_validators(out / VALIDATORS_FILE)
        unfinished = sum(r.status in (RETRY, LEFT) for r in rows) + len(repos) - reached
        return Outcome(sorted(rows, key=lambda r: r.repository), len(repos), unfinished, stopped, github.calls,
                       github.not_modified)

    try:
        repos = github.student_repositories(org, prefix)
    except RateLimited as exc:   # nothing is known: every repository recorded is left
        repos, reached, stopped = [{"name": name} for name in state["repositories"]], 0, exc
        return outcome()
    released = published_at(out) is not None
    todo: list[tuple[str, str, str]] = []          # (student, repository, sha) to download and grade
    capped: dict[str, str] = {}                    # student -> how their attempt is counted (attempt_note)
    notes: dict[str, Text] = {}                    # student -> what the comment says of their attempts
    to_post: list[tuple[str, str]] = []            # (student, repository) graded, their post pending
    reached = len(repos)                           # repositories whose branch this run read
    for index, repo in enumerate(repos):
        repository = repo["name"]
        student = repository[len(prefix) + 1:]
        record = state["repositories"].setdefault(repository, {"posted": None, "timeline": []})
        own_deadline = deadline
        if policy is not None and policy.due is not None:
            found = match(student, roster)[0] if roster else None
            dates = student_dates(policy, found.column("extension") if found else "")
            own_deadline = dates.cutoff if dates else None   # no cutoff: late work counts, the newest commit
        try:
            sha = commit_to_grade(github, org, repo, record, own_deadline, clock())
        except RateLimited as exc:
            stopped, reached = exc, index
            break
        except UNEXPECTED as exc:
            retry(student, repository, None, LISTING, t("could not read the repository's branch: {error}; tried "
                                                        "again by the next run", error=verbatim(exc)))
            continue
        pending = record.get("pending")
        if sha is None:
            none = t("no commit reached the branch by the deadline") if own_deadline else t("no commit yet")
            rows.append(Row(student, repository, None, NOTHING, none.render(lang)))
        elif record["posted"] == sha:
            continue
        elif pending is not None and pending["sha"] == sha:
            to_post.append((student, repository))
        else:
            record.pop("pending", None)   # a newer commit replaces the one whose post was pending
            past = attempt_note(feedback, record, clock(), released)
            if past is not None and past[0] == QUEUED:
                if record.get("queued") != sha:   # told once per commit; graded when the next window opens
                    record["pending"] = {"sha": sha, "state": "pending", "description": past[1].render(lang)[:140],
                                         "body": past[1].render(lang), "status": False, "queued": True}
                    to_post.append((student, repository))
                continue
            if past is not None:
                capped[student] = past[0]
                notes[student] = past[1]
            todo.append((student, repository, sha))
    save_state(state_file, state)   # what this run learnt of each branch stays, whatever happens next

    fetched = out / "fetched"
    shutil.rmtree(fetched, ignore_errors=True)
    ready: list[tuple[str, str, str, str]] = []      # (student, repository, sha, content hash)
    for student, repository, sha in todo:
        if stopped is None:
            try:
                fetch_exercises(github, org, repository, sha, course, fetched / student, blob_store(out, repository))
            except RateLimited as exc:
                stopped = exc
            except UNEXPECTED as exc:
                shutil.rmtree(fetched / student, ignore_errors=True)
                retry(student, repository, sha, DOWNLOAD, t("could not download commit {sha}'s exercise files: "
                                                            "{error}; tried again by the next run",
                                                            sha=sha, error=verbatim(exc)))
                continue
        if stopped is not None:
            shutil.rmtree(fetched / student, ignore_errors=True)
            left(student, repository, sha, DOWNLOAD)
            continue
        shutil.rmtree(out / "students" / student, ignore_errors=True)   # a failed grading must not post an old score
        ready.append((student, repository, sha, content_hash(course, fetched / student)))

    verdicts: dict[str, tuple[str, str, str]] = {}   # student -> (status, content hash, message)
    if ready:
        try:
            book = Gradebook(out / "gradebook.sqlite")   # each commit's arrival, for the batch's late penalty
            try:
                book.set_submitted({student: submitted_time(out, repository, sha)
                                    for student, repository, sha, _ in ready})
            finally:
                book.close()
            grade_batch(fetched, out)
            book = Gradebook(out / "gradebook.sqlite")
            try:
                verdicts = {r["submission"]: (r["status"], r["content_hash"], r["message"])
                            for r in book.submissions(grader_key(course))}
            finally:
                book.close()
        except Exception as exc:  # noqa: BLE001 - the batch failed as a whole: each of them is tried again
            for student, repository, sha, _ in ready:
                retry(student, repository, sha, GRADING, t("the grading failed: {error}; graded again by the next run",
                                                           error=verbatim(f"{type(exc).__name__}: {exc}")))
            ready = []
        finally:
            shutil.rmtree(fetched, ignore_errors=True)

    for student, repository, sha, chash in ready:
        status, graded_hash, message = verdicts.get(student, (GRADER_ERROR, "", ""))
        if status == GRADER_ERROR or graded_hash != chash:
            why = rendered(said(message)) if message else t("no grading was recorded")
            retry(student, repository, sha, GRADING, t("nothing posted: {said}", said=why))
            continue
        now = clock()
        view = partial(student_view, course=course, now=now, published=released, feedback=feedback,
                       capped=capped.get(student) == CAPPED)
        commit_state, description, body = scorecard_comment(out / "students" / student, sha, lang, view,
                                                            course.templates, [notes[student]]
                                                            if student in notes else [])
        record = state["repositories"][repository]
        record["pending"] = {"sha": sha, "state": commit_state, "description": description, "body": body,
                             "status": False, "release": released}
        if capped.get(student) != CAPPED:
            record.setdefault("attempts", []).append(iso(now))
        to_post.append((student, repository))
    save_state(state_file, state)   # what was graded is posted by a later run if not by this one

    stopped = post_pending(github, org, state_file, state, to_post, rows, stopped, lang)
    return outcome()


def post_pending(github: GitHub, org: str, state_file: Path, state: dict, to_post: list[tuple[str, str]],
                 rows: list[Row], stopped: RateLimited | None, lang: str) -> RateLimited | None:
    """Post each repository's pending post (its status, then its comment), saving classroom.json after each step
    so that nothing is posted twice; a post GitHub refused stays pending for the next run. Returns the rate limit
    that stopped the posting, if one did (or `stopped`, when one stopped the run before)."""
    for student, repository in sorted(to_post, key=lambda post: post[1]):
        record = state["repositories"][repository]
        pending = record["pending"]
        if stopped is None:
            try:
                if not pending["status"]:
                    github.post_status(org, repository, pending["sha"], pending["state"], pending["description"])
                    pending["status"] = True
                    save_state(state_file, state)   # the comment alone is left to post
                github.post_comment(org, repository, pending["sha"], pending["body"])
            except RateLimited as exc:
                stopped = exc
            except GitHubError as exc:
                rows.append(Row(student, repository, pending["sha"], RETRY, t(
                    "could not post the scorecard: {error}; posted by the next run",
                    error=verbatim(exc)).render(lang), stage=POSTING))
                continue
        if stopped is not None:
            rows.append(Row(student, repository, pending["sha"], LEFT, t(
                "GitHub's rate limit stopped the run first; the next run goes on from here").render(lang),
                stage=POSTING))
            continue
        del record["pending"]
        if pending.get("queued"):
            record["queued"] = pending["sha"]
            save_state(state_file, state)
            rows.append(Row(student, repository, pending["sha"], QUEUED, pending["description"], pending["state"]))
            continue
        record["posted"] = pending["sha"]
        if pending.get("release"):
            record["released"] = pending["sha"]
        save_state(state_file, state)   # a rerun posts nothing twice
        rows.append(Row(student, repository, record["posted"], POSTED, pending["description"], pending["state"],
                        arrival=Timeline(record["timeline"]).arrival(record["posted"])))
    return stopped


WINDOW_WORDS = {"day": t("day"), "hour": t("hour")}   # the attempt policy's windows (grader.feedback.WINDOWS)
CAPPED, COUNTED = "capped", "counted"   # a graded attempt past the cap (shown nothing hidden), or one within it


def attempt_note(feedback: Feedback, record: dict, now: dt.datetime, released: bool) -> tuple[str, Text] | None:
    """How a new commit of a repository counts against the attempt cap: (QUEUED, what the student is told) when
    it waits for the next window; (CAPPED, ...) when it is graded past the cap; (COUNTED, the attempts left after
    it) within it; None without a cap, or once the feedback is published (nothing is hidden any more)."""
    attempts = feedback.attempts
    if attempts is None or released:
        return None
    used = attempts.used([parse_time(at) for at in record.get("attempts", [])], now)
    opens, per = iso(attempts.window(now)[1]), WINDOW_WORDS[attempts.per]
    if used < attempts.limit:
        return COUNTED, t("Graded attempts left this {per}: {left} of {limit} (the next window opens at {opens}).",
                          per=per, left=attempts.limit - used - 1, limit=attempts.limit, opens=opens)
    if attempts.past_cap == QUEUED:
        return QUEUED, t("Attempt cap reached ({limit} graded commits per {per}): this commit is graded when the "
                         "next window opens at {opens}.", limit=attempts.limit, per=per, opens=opens)
    return CAPPED, t("Attempt cap reached ({limit} graded commits per {per}): this commit is graded, but nothing of "
                     "the criteria not shown yet is shown before the next window opens at {opens}.",
                     limit=attempts.limit, per=per, opens=opens)


def publish(course: Course, github: GitHub, org: str, prefix: str, out: Path, lang: str = "en",
            clock: Callable[[], dt.datetime] = utc_now, feedback: Feedback | None = None) -> Outcome:
    """`grader classroom publish`: record the release in the gradebook (grader.feedback.PUBLISHED), then post to
    each repository's last posted commit its whole scorecard, as a comment and a status, through the same pending
    posts as `sync` (within GitHub's budget; what a rate limit or a refusal leaves is posted by the next publish or
    sync). A commit already released is not posted again."""
    feedback = feedback or load_feedback(course)
    mark_published(out, clock())
    state_file = out / STATE_FILE
    state = load_state(state_file)
    to_post: list[tuple[str, str]] = []
    for repository, record in sorted(state["repositories"].items()):
        student = repository[len(prefix) + 1:]
        if not repository.startswith(prefix + "-") or not student:
            continue
        pending = record.get("pending")
        queued = pending is not None and pending.get("queued")
        sha = pending["sha"] if pending is not None and not queued else record.get("posted")
        # a graded post still pending is replaced by its whole scorecard; a queued commit's notice stays as it is
        if not queued and sha is not None and record.get("released") != sha and not (pending or {}).get("release"):
            now = clock()
            commit_state, description, body = scorecard_comment(
                out / "students" / student, sha, lang,
                partial(student_view, course=course, now=now, published=True, feedback=feedback),
                course.templates)
            record["pending"] = {"sha": sha, "state": commit_state, "description": description, "body": body,
                                 "status": False, "release": True}
        if record.get("pending") is not None:
            to_post.append((student, repository))
    save_state(state_file, state)
    rows: list[Row] = []
    stopped = post_pending(github, org, state_file, state, to_post, rows, None, lang)
    left = sum(r.status in (RETRY, LEFT) for r in rows)
    return Outcome(sorted(rows, key=lambda r: r.repository), len(state["repositories"]), left, stopped, github.calls,
                   github.not_modified)


def token_from_environment() -> str:
    return os.environ.get("GRADER_TOKEN") or os.environ.get("GITHUB_TOKEN") or ""
