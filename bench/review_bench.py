"""How long `grader review` takes to show a grading page and to save a grade, for a class of N students.

Builds a gradebook of N submissions (rows written directly, no grading; each record holding a written answer of
about a paragraph to heads/tensor_flow; the whole course's questions on the index), then times through Starlette's
TestClient, in this process:

    .venv/bin/python bench/review_bench.py [--students 200] [--repeat 5]

- the index (every question's progress), a grading page, the rubric page;
- a save, which writes the class files again (grader.batch.manual.rewrite_after_review).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from starlette.testclient import TestClient  # noqa: E402

from conftest import course_copy  # noqa: E402
from grader.batch.gradebook import Gradebook  # noqa: E402
from grader.course import load_course  # noqa: E402
from grader.review_app.app import ReviewSettings, create_app, student_id  # noqa: E402
from test_review_app import store_class  # noqa: E402


def timed(call, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--students", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        course = load_course(course_copy(folder / "course"))   # every question on the index
        book = Gradebook(folder / "out" / "gradebook.sqlite")
        paragraph = "Split C into H heads of D = C / H, then transpose to [B, H, T, D]. " * 8
        store_class(course, book, {f"s{n:04d}": f"{paragraph} ({n % 7})" for n in range(args.students)})
        book.close()
        settings = ReviewSettings(out=folder / "out", course=course, tas={"t": "ta"})
        client = TestClient(create_app(settings))
        pages = {"index": "/t/", "grading page": "/t/q/heads/tensor_flow/3",
                 "rubric page": "/t/rubric/heads/tensor_flow"}
        for name, path in pages.items():
            assert client.get(path).status_code == 200
            print(f"{name}: {timed(lambda path=path: client.get(path), args.repeat) * 1000:.0f} ms")
        students = iter(f"s{n:04d}" for n in range(args.students))

        def save() -> None:
            reply = client.post("/t/save/heads/tensor_flow", json={
                "student": student_id(settings, next(students)), "items": ["1"], "expected_version": None})
            assert reply.status_code == 200 and reply.json()["written"], reply.text

        print(f"save (class files written again): {timed(save, args.repeat) * 1000:.0f} ms")
    print(f"({args.students} students, median of {args.repeat})")


if __name__ == "__main__":
    main()
