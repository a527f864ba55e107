"""GitHub calls of `grader classroom sync` per graded commit: python bench/classroom_calls.py [--class N]

Against the local fake of GitHub's REST API that tests/test_classroom.py serves, with the whole course (every
exercise of course.toml) and a stand-in for the grading (what grader batch records, without running it: the calls
are the sync's alone), N repositories (default 30) through four runs:
  1. a first commit in which every file is the student's own;
  2. a new commit in each changing one exercise file;
  3. N more repositories whose first commit changes one file of the handout;
  4. nothing new.
Each run prints the calls sent, the 304s among them (free of GitHub's rate limit), those counted, and the counted
calls per graded commit (per repository when nothing was graded).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from conftest import course_copy  # noqa: E402 - the tests' folder, put first on sys.path above
from grader.classroom.github import GitHub, sync  # noqa: E402
from grader.course import load_course  # noqa: E402
from test_classroom import ORG, PREFIX, TOKEN, FakeGitHub, serve  # noqa: E402
from test_classroom_budget import recording_grader  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--class", dest="size", type=int, default=30, help="repositories (default 30)")
    size = parser.parse_args().size
    work = Path(tempfile.mkdtemp(prefix="classroom-calls-"))
    course = load_course(course_copy(work / "course"))
    handout = {f"exercises/{ex.id}/{ex.file}": (ROOT / "solutions" / ex.id / ex.file).read_text()
               for ex in course.exercises}
    fake = FakeGitHub()
    server = serve(fake)
    url, out = f"http://127.0.0.1:{server.server_address[1]}", work / "gradebook"

    def run(label: str, graded: int) -> None:
        done = sync(course, GitHub(TOKEN, url), ORG, PREFIX, out, recording_grader(course, []))
        assert not done.left, done.rows
        counted = done.calls - done.not_modified
        per = (f"{counted / graded:.1f} per graded commit" if graded else
               f"{counted / len(fake.repos):.2f} per repository")
        print(f"{label}: {done.calls} calls, {done.not_modified} of them 304, {counted} counted; {per}")

    def changed_one(i: int, files: dict[str, str]) -> dict[str, str]:
        ex = course.exercises[i % len(course.exercises)]
        path = f"exercises/{ex.id}/{ex.file}"
        return {**files, path: files[path] + f"# s{i}, changed\n"}

    try:
        own = {i: {p: text + f"# s{i}\n" for p, text in handout.items()} for i in range(size)}
        for i in range(size):
            fake.commit(f"{PREFIX}-s{i:03}", own[i])
        run(f"{len(course.exercises)} exercises, {size} repositories, a first commit of the student's own files", size)
        for i in range(size):
            fake.commit(f"{PREFIX}-s{i:03}", changed_one(i, own[i]))
        run("a new commit changing one exercise file", size)
        for i in range(size, 2 * size):
            fake.commit(f"{PREFIX}-s{i:03}", changed_one(i, handout))
        run(f"{size} more repositories, a first commit changing one file of the handout", size)
        run("nothing new", 0)
    finally:
        server.shutdown()


if __name__ == "__main__":
    main()
