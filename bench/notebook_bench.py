"""What reading notebooks costs: the reading child's wall and CPU time for notebooks at and past each cap
(grader/grading/notebooks.py), and what `content_hash` with the similarity check's sources (the batch's loop over
submissions, before any grading) costs a submission of files, of one notebook per exercise, and of one tagged
notebook:

    .venv/bin/python bench/notebook_bench.py [--repeat 3]

Each figure is the median of `--repeat` runs, every notebook read afresh (no cache).
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from grader.batch.gradebook import content_hash  # noqa: E402
from grader.batch.run import exercise_sources  # noqa: E402
from grader.course import load_course  # noqa: E402
from grader.grading import notebooks  # noqa: E402


def raw(cells: list, metadata: object = None) -> str:
    return json.dumps({"cells": cells, "metadata": metadata or {}, "nbformat": 4, "nbformat_minor": 5})


def cell(source: str, i: int = 0, outputs: list | None = None, tags: list | None = None) -> dict:
    return {"cell_type": "code", "execution_count": None, "id": f"c{i}", "metadata": {"tags": tags or []},
            "outputs": outputs or [], "source": source}


def timed(fn) -> tuple[float, float]:
    """(wall, CPU of this process and its children) of one call, in seconds."""
    def cpu() -> float:
        own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
        return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime
    wall, used = time.perf_counter(), cpu()
    fn()
    return time.perf_counter() - wall, cpu() - used


def median_of(repeat: int, fn) -> tuple[float, float]:
    runs = []
    for _ in range(repeat):
        notebooks._read_cache.clear()
        runs.append(timed(fn))
    return statistics.median(w for w, _ in runs), statistics.median(c for _, c in runs)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=3)
    repeat = parser.parse_args().repeat
    stream = {"output_type": "stream", "name": "stdout", "text": "a"}
    cases = {
        "cells at the cap": raw([cell("x = 1", i) for i in range(notebooks.MAX_CELLS)]),
        "values near the cap": raw([cell("x = 1", 0, [stream] * (notebooks.MAX_VALUES // 4 - 100))]),
        "a 15 MiB picture": raw([cell("x = 1", 0, [{"output_type": "display_data", "metadata": {},
                                                      "data": {"image/png": "A" * (15 << 20)}}])]),
        "cells past the cap": raw([cell("x = 1", i) for i in range(4 * notebooks.MAX_CELLS)]),
        "values past the cap": raw([cell("x = 1", 0, [stream] * notebooks.MAX_VALUES)]),
        "nested 100,000 deep": raw([cell("x = 1")], {"deep": "*"}).replace('"*"', "[" * 100_000 + "]" * 100_000),
    }
    print(f"{'notebook':24} {'bytes':>10} {'wall s':>7} {'CPU s':>6}  read as")
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "sub"
        (folder / "rope").mkdir(parents=True)
        for name, text in cases.items():
            (folder / "rope" / "rope.ipynb").write_text(text)
            wall, cpu = median_of(repeat, lambda: notebooks.notebook_code(folder, "rope"))
            found = notebooks.notebook_code(folder, "rope")
            said = "code" if found.problem is None else found.problem.render("en").split(";")[0][:60]
            print(f"{name:24} {len(text):>10,} {wall:>7.2f} {cpu:>6.2f}  {said}")

        course = load_course(ROOT)
        files, own, tagged = (Path(tmp) / name for name in ("files", "own", "tagged"))
        everything = []
        for ex in course.exercises:
            code = course.solution(ex).read_text(encoding="utf-8")
            (files / ex.id).mkdir(parents=True)
            (files / ex.id / ex.file).write_text(code, encoding="utf-8")
            (own / ex.id).mkdir(parents=True)
            (own / ex.id / f"{ex.id}.ipynb").write_text(raw([cell(code)]), encoding="utf-8")
            everything.append(cell(code, len(everything), tags=[ex.id]))
        tagged.mkdir()
        (tagged / "course.ipynb").write_text(raw(everything), encoding="utf-8")
        print(f"\n{len(course.exercises)} exercises: content_hash and exercise_sources of one submission")
        for name, sub in (("files", files), ("a notebook per exercise", own), ("one tagged notebook", tagged)):
            wall, cpu = median_of(repeat, lambda sub=sub: (content_hash(course, sub), exercise_sources(course, sub)))
            print(f"{name:24} {wall:>7.2f} s wall {cpu:>6.2f} s CPU")


if __name__ == "__main__":
    main()
