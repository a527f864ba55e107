"""Similar submissions: per exercise, the pairs whose code is near-identical once names and layout are set aside.

Theory of operation. copydetect reads each exercise file as pygments tokens, writes every name as V, F or O and
every string as S, drops comments and layout, hashes its k-grams and winnows them (MOSS's fingerprinting). The
exercise's stub is boilerplate: its fingerprints are taken out of every file, so the given code (signatures,
docstrings, imports) never counts. Two files' shares are how much of each is made of code the other holds; a pair
is flagged when both reach THRESHOLD. Renaming variables and reformatting change none of the fingerprints.

It informs and never grades: the pairs go to class.html (side by side, the shared code marked) and
similarity.csv, and nothing else reads them.

The comparison runs in a child process of its own: pygments tokenises student text with regular expressions a
crafted file could make slow, so the child has a time and a memory limit, and a failure there costs the class page
its similarity section only. It also fixes the hash seed: copydetect hashes with Python's hash(), salted per
process, and the same class must give the same pairs. Its exercises are compared in as many forked processes as it has
cores (each exercise's pairs are its own), at the end of a batch whose cores are otherwise idle.
"""

from __future__ import annotations

import io
import itertools
import json
import os
import resource
import subprocess
import sys
from dataclasses import dataclass
from functools import partial

from grader.course import Course, ExerciseConfig
from grader.i18n import Text, t, verbatim
from grader.subprocesses import die_with_parent

# Both files of a pair must be at least this share the other's code. Measured on this course's catalog (stub as
# boilerplate): the rope solution with every variable renamed and the code reformatted scores 0.93
# (tests/similarity/rope_renamed.py); honest independent correct implementations (each solution against
# solutions/*/variants, and the variants against one another: 89 pairs) score at most 0.72 (two layer_norm variants
# written from one skeleton), 72 of them below 0.4. 0.8 leaves room for a copy with a line or two changed, and stays
# clear of independent work. Three more pairs are flagged, rightly: two transformer_lm variants are the solution
# edited (a layer renamed: 1.0; the feed-forward as a Sequential: 0.93), not independent work.
THRESHOLD = 0.8
# copydetect's noise threshold: a match shorter than this many filtered characters is chance (its default).
NOISE = 25
# Every k-gram kept (window 1): the files are small, and winnowing would only lose matches.
WINDOW = 1
# A file whose own code (once the stub's is taken out) covers fewer filtered characters than this is too short to
# tell copying from the one obvious way to write it.
MIN_OWN = 80
TIMEOUT_S = 600          # the whole comparison, for the whole class
MEMORY_BYTES = 4 << 30   # the child's address space
LEFT, RIGHT = '<mark class="shared">', "</mark>"
CONTEXT_LINES = 6   # the lines kept around the shared code when the page shows it (copydetect's truncate)


class SimilarityFailed(Exception):
    """The comparison did not finish (the child's time or memory ran out, or it failed); `said` says how."""

    def __init__(self, said: Text):
        super().__init__(str(said))
        self.said = said


@dataclass(frozen=True)
class Submission:
    name: str
    content_hash: str
    files: dict[str, str]     # exercise id -> code


def compare(course: Course, submissions: list[Submission], processes: int = 1) -> list[dict]:
    """Every pair flagged, per exercise in course order, most similar first: {exercise, first, second, similarity,
    first_share, second_share, first_html, second_html}. Submissions with the same files (content hash) are left
    out: the class page flags them as identical already. `processes` above 1: the exercises are compared in that
    many forked processes at once (each exercise's pairs are its own: the result is the same)."""
    exercises = list(course.exercises)
    processes = min(processes, len(exercises))
    if processes <= 1 or not hasattr(os, "fork"):
        return [pair for ex in exercises for pair in _compare_exercise(course, ex, submissions)]
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    import copydetect  # noqa: F401 - imported before the fork, once
    from pygments import lexers

    for ex in exercises:   # a lexer class compiles its rules on its first use: here, once, not in every process
        lexers.get_lexer_for_filename(ex.file)

    # Largest first: the exercise that costs most starts first, and the rest fill in around it.
    order = sorted(range(len(exercises)), key=lambda i: -sum(len(s.files.get(exercises[i].id, ""))
                                                               for s in submissions))
    # An executor, not a Pool: a process that dies (a signal) fails the comparison at once, where a Pool would wait
    # for it until the child's time limit.
    # Each comparing process goes with the child that forked it: that child's time limit, which kills it alone,
    # ends the comparison.
    with ProcessPoolExecutor(processes, mp_context=multiprocessing.get_context("fork"), initializer=die_with_parent,
                             initargs=(os.getpid(),)) as pool:
        found = list(pool.map(partial(_compare_exercise, course, submissions=submissions),
                              [exercises[i] for i in order]))
    by_exercise = dict(zip(order, found, strict=True))
    return [pair for i in range(len(exercises)) for pair in by_exercise[i]]


def _compare_exercise(course: Course, ex: ExerciseConfig, submissions: list[Submission]) -> list[dict]:
    """The pairs flagged for one exercise, most similar first."""
    import numpy as np
    from copydetect import CodeFingerprint, compare_files
    from copydetect.utils import highlight_overlap

    stub = course.stub(ex).read_text(encoding="utf-8")
    boilerplate = np.array(sorted(CodeFingerprint(ex.file, NOISE, 1, fp=io.StringIO(stub)).hashes))
    prints = {}
    for s in submissions:
        code = s.files.get(ex.id)
        if code is None or code.strip() == stub.strip():
            continue
        fingerprint = CodeFingerprint(ex.file, NOISE, WINDOW, boilerplate=boilerplate, fp=io.StringIO(code))
        if fingerprint.token_coverage >= MIN_OWN:
            prints[s.name] = (s, fingerprint)
    found = []
    for a, b in itertools.combinations(sorted(prints), 2):
        (sa, fa), (sb, fb) = prints[a], prints[b]
        if sa.content_hash == sb.content_hash:
            continue
        _, (share_a, share_b), (slices_a, slices_b) = compare_files(fa, fb)
        similarity = min(float(share_a), float(share_b))
        if similarity < THRESHOLD:
            continue
        html_a, _ = highlight_overlap(fa.raw_code, slices_a, LEFT, RIGHT, CONTEXT_LINES, escape_html=True)
        html_b, _ = highlight_overlap(fb.raw_code, slices_b, LEFT, RIGHT, CONTEXT_LINES, escape_html=True)
        found.append({"exercise": ex.id, "first": a, "second": b, "similarity": round(similarity, 4),
                      "first_share": round(float(share_a), 4), "second_share": round(float(share_b), 4),
                      "first_html": html_a, "second_html": html_b})
    return sorted(found, key=lambda p: (-p["similarity"], p["first"], p["second"]))


def _limits() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_BYTES, MEMORY_BYTES))


def compare_in_child(course: Course, submissions: list[Submission], timeout_s: float = TIMEOUT_S) -> list[dict]:
    """`compare` in a child process with a time and a memory limit and a fixed hash seed; SimilarityFailed when
    it does not finish."""
    request = json.dumps({"course": str(course.root),
                          "submissions": [{"name": s.name, "content_hash": s.content_hash, "files": s.files}
                                          for s in submissions]})
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    try:
        done = subprocess.run([sys.executable, "-m", "grader.review.similarity"], input=request, capture_output=True,
                              text=True, timeout=timeout_s, env=env, preexec_fn=_limits)
    except subprocess.TimeoutExpired:
        raise SimilarityFailed(t("the comparison took more than {seconds:g} s", seconds=timeout_s)) from None
    if done.returncode != 0:
        raise SimilarityFailed(t("the comparison failed (exit {code}): {error}", code=done.returncode,
                                 error=verbatim(done.stderr.strip()[-500:])))
    try:
        return json.loads(done.stdout)
    except ValueError:
        raise SimilarityFailed(t("the comparison's answer is not JSON")) from None


def _without_plots() -> None:
    """copydetect's module imports matplotlib.pyplot (a third of a second of CPU) for its own reports' plots alone,
    which the comparison never draws: in the comparing child, an empty module stands in for it."""
    import types

    if "matplotlib" not in sys.modules:
        for name in ("matplotlib", "matplotlib.pyplot"):
            sys.modules[name] = types.ModuleType(name)


def main() -> None:
    from pathlib import Path

    from grader.course import load_course

    _without_plots()
    request = json.load(sys.stdin)
    course = load_course(Path(request["course"]))
    submissions = [Submission(s["name"], s["content_hash"], s["files"]) for s in request["submissions"]]
    json.dump(compare(course, submissions, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
                      else os.cpu_count() or 1), sys.stdout)


if __name__ == "__main__":
    main()
