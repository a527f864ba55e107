"""Re-judging a class of N stored submissions: `python bench/rejudge_bench.py [--n 100] [--jobs 2]`.

Grades two submissions (the reference solution and the bundled sample) once, with every exercise, then makes a
class of N by copying them under N names, their kept observations and gradebook rows with them (the same files,
so the same content hash: what a class of N graded before would hold), and times `grader batch --rejudge` over
it: every one of the N is judged again, each in a judging child of its own, and its reports written again.
"""

from __future__ import annotations

import argparse
import shutil
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from grader.batch import run_batch  # noqa: E402
from grader.course import load_course  # noqa: E402

TABLES = ("submissions", "results", "observed", "sources")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=100)
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args()
    course = load_course(ROOT)
    with tempfile.TemporaryDirectory(prefix="rejudge-bench-") as tmp:
        seeds = Path(tmp) / "seeds"
        shutil.copytree(ROOT / "examples" / "submissions" / "sample", seeds / "sample")
        for ex in course.exercises:
            (seeds / "reference" / ex.id).mkdir(parents=True)
            shutil.copyfile(course.solution(ex), seeds / "reference" / ex.id / ex.file)
        out = Path(tmp) / "out"
        t0 = time.monotonic()
        run_batch(course, seeds, out, args.jobs, False, "strict", "en")
        print(f"graded 2 submissions once: {time.monotonic() - t0:.1f} s")
        klass = Path(tmp) / "class"
        db = sqlite3.connect(out / "gradebook.sqlite")
        names = []
        for i in range(args.n):
            seed = ("reference", "sample")[i % 2]
            name = f"s{i:03d}"
            names.append(name)
            shutil.copytree(seeds / seed, klass / name)
            for table in TABLES:
                columns = [row[1] for row in db.execute(f"PRAGMA table_info({table})")]
                picked = ", ".join("?" if c == "submission" else c for c in columns)
                db.execute(f"INSERT OR REPLACE INTO {table} SELECT {picked} FROM {table} WHERE submission=?",
                           (name, seed))
        db.commit()
        db.close()
        t0 = time.monotonic()
        outcome = run_batch(course, klass, out, args.jobs, False, "strict", "en", rejudge=True)
        wall = time.monotonic() - t0
        assert outcome["rejudged"] == args.n, outcome
        print(f"re-judged {args.n} stored submissions (all {len(course.exercises)} exercises, --jobs {args.jobs}): "
              f"{wall:.1f} s, {wall / args.n:.3f} s per submission (class files and similarity included)")


if __name__ == "__main__":
    main()
