"""Similar submissions flagged, never graded: per exercise, pairs whose code is near-identical once names and layout
are set aside (copydetect's winnowed fingerprints, the stub's code taken out). A copy with every variable renamed and
the code reformatted is flagged; honest independent correct implementations of the same exercise (the solution and
solutions/*/variants, written apart) are not; the stub alone, or what it gives, never counts.

The first half compares files directly; the second grades a class of four once and reads class.html and
similarity.csv."""

from __future__ import annotations

import csv
import io
import itertools

import pytest

from conftest import ROOT, course_copy, run_grader
from grader.course import load_course
from grader.review.similarity import THRESHOLD, SimilarityFailed, Submission, compare, compare_in_child

COURSE = load_course(ROOT)
ROPE = COURSE.exercise("rope")
SOLUTION = (ROOT / "solutions" / "rope" / "rope.py").read_text()
RENAMED = (ROOT / "tests" / "similarity" / "rope_renamed.py").read_text()   # the solution, renamed and reformatted
INDEPENDENT = {v.parent.name: v.read_text()
               for v in sorted((ROOT / "solutions" / "rope" / "variants").glob("*/rope.py"))}


def rope(name: str, code: str) -> Submission:
    return Submission(name, f"hash-{name}", {"rope": code})


def pairs_of(submissions: list[Submission]) -> dict[tuple[str, str], float]:
    return {(p["first"], p["second"]): p["similarity"] for p in compare(COURSE, submissions)}


def test_a_copy_with_names_changed_and_code_reformatted_is_flagged():
    assert "half" in SOLUTION and "half" not in RENAMED and RENAMED.count("\n") != SOLUTION.count("\n")
    [pair] = compare(COURSE, [rope("ann", SOLUTION), rope("ben", RENAMED)])
    assert (pair["exercise"], pair["first"], pair["second"]) == ("rope", "ann", "ben")
    assert pair["similarity"] >= THRESHOLD and min(pair["first_share"], pair["second_share"]) == pair["similarity"]
    # each side's shared code is marked, and the page gets it escaped
    assert '<mark class="shared">' in pair["first_html"] and "seq_len" in pair["second_html"]
    assert "<mark" not in pair["first_html"].replace('<mark class="shared">', "")


def test_honest_independent_solutions_of_the_same_exercise_are_not_flagged():
    assert len(INDEPENDENT) >= 3
    honest = [rope("solution", SOLUTION)] + [rope(name, code) for name, code in INDEPENDENT.items()]
    assert pairs_of(honest) == {}, "each written on its own"
    # the threshold's margin: the most alike of them stays well below it
    from copydetect import CodeFingerprint, compare_files

    import numpy as np

    boilerplate = np.array(sorted(CodeFingerprint("rope.py", 25, 1,
                                                  fp=io.StringIO(COURSE.stub(ROPE).read_text())).hashes))
    prints = [CodeFingerprint("rope.py", 25, 1, boilerplate=boilerplate, fp=io.StringIO(s.files["rope"]))
              for s in honest]
    closest = max(min(compare_files(a, b)[1]) for a, b in itertools.combinations(prints, 2))
    assert closest < THRESHOLD - 0.3


def test_the_stub_never_counts():
    """Two students who kept the stub's docstrings and signature and wrote a line each: nothing of theirs is alike."""
    stub = COURSE.stub(ROPE).read_text()
    body = "    raise NotImplementedError(\"rope: implement apply_rope\")"
    assert body in stub
    one = stub.replace(body, "    return x * 1.0")
    two = stub.replace(body, "    return x.clone()")
    assert compare(COURSE, [rope("one", one), rope("two", two), rope("stub", stub), rope("stub2", stub)]) == []


def test_the_same_files_are_left_to_the_identical_flag():
    same = [Submission("ann", "same", {"rope": SOLUTION}), Submission("ben", "same", {"rope": SOLUTION})]
    assert compare(COURSE, same) == []
    assert len(compare(COURSE, [rope("ann", SOLUTION), rope("ben", SOLUTION)])) == 1


def test_the_child_gives_the_same_pairs_every_time_and_a_limit_that_ends_it():
    submissions = [rope("ann", SOLUTION), rope("ben", RENAMED), *[rope(n, c) for n, c in INDEPENDENT.items()]]
    first = compare_in_child(COURSE, submissions)
    assert first == compare_in_child(COURSE, submissions) and [(p["first"], p["second"]) for p in first] == \
        [("ann", "ben")]
    with pytest.raises(SimilarityFailed, match="took more than"):
        compare_in_child(COURSE, submissions, timeout_s=0.01)   # less than importing Python takes


# --- A class graded once -----------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def compared(tmp_path_factory):
    folder = tmp_path_factory.mktemp("similar")
    course = course_copy(folder / "course", ["rope"])
    room = folder / "class"
    for name, code in (("ann", SOLUTION), ("ben", RENAMED), ("cat", INDEPENDENT["rotation_matrix"]),
                       ("dan", INDEPENDENT["complex_halves"])):
        (room / name / "rope").mkdir(parents=True)
        (room / name / "rope" / "rope.py").write_text(code)
    room.chmod(0o700)
    out = folder / "out"
    done = run_grader("--course", str(course), "batch", str(room), "--out", str(out), "--sandbox", "basic", "--jobs",
                      "2", timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    return out


@pytest.mark.slow
def test_the_class_page_shows_the_pair_side_by_side_and_flags_both_rows(compared):
    from browser import parse_dom, text_of, with_class

    dom = parse_dom((compared / "class.html").read_text(encoding="utf-8"))
    rows = {text_of(r.find(".//a[@class='submission']")): r for r in with_class(dom, "tr", "student")}
    flagged = {name for name, row in rows.items() if with_class(row, "span", "similar")}
    assert flagged == {"ann", "ben"}
    [pair] = [li for li in dom.iter("li") if li.get("data-exercise") == "rope" and li.get("data-pair")]
    assert pair.get("data-pair") == f"{rows['ann'].get('id')} {rows['ben'].get('id')}"
    flag = with_class(rows["ann"], "span", "similar")[0]
    assert flag.find("a").get("href") == "#" + pair.get("id")
    sides = pair.findall(".//pre")
    assert len(sides) == 2 and all(side.find("mark") is not None for side in sides)
    assert float(pair.get("data-similarity")) >= THRESHOLD


@pytest.mark.slow
def test_similarity_csv_lists_the_pair_and_no_grade_moves(compared):
    rows = list(csv.DictReader(io.StringIO((compared / "similarity.csv").read_text(encoding="utf-8"))))
    assert [(r["exercise"], r["first"], r["second"]) for r in rows] == [("rope", "ann", "ben")]
    assert float(rows[0]["similarity"]) >= THRESHOLD
    grades = {r["submission"]: r for r in csv.DictReader(io.StringIO((compared / "grades.csv").read_text()))}
    assert grades["ann"]["total (14)"] == grades["ben"]["total (14)"] == "14", "it informs, and grades nothing"
    assert {r["status"] for r in grades.values()} == {"complete"}


def test_the_pairs_are_compared_in_course_order_and_each_exercise_apart():
    heads = (ROOT / "solutions" / "heads" / "heads.py").read_text()
    submissions = [Submission("ann", "a", {"rope": SOLUTION, "heads": heads}),
                   Submission("ben", "b", {"rope": RENAMED, "heads": heads + "\n# mine\n"})]
    assert [p["exercise"] for p in compare(COURSE, submissions)] == ["heads", "rope"]



def test_compared_in_several_processes_the_pairs_are_the_same_and_in_course_order():
    heads = (ROOT / "solutions" / "heads" / "heads.py").read_text()
    long = "\n# " + "x" * 20_000 + "\n"   # rope's files the larger: its processes start first, out of course order
    submissions = [Submission("ann", "a", {"rope": SOLUTION + long, "heads": heads}),
                   Submission("ben", "b", {"rope": RENAMED + long, "heads": heads + "\n# mine\n"}),
                   Submission("cat", "c", {"rope": INDEPENDENT["rotation_matrix"] + long,
                                           "heads": heads + "\n# cat\n"})]
    alone = compare(COURSE, submissions)
    assert {p["exercise"] for p in alone} == {"heads", "rope"}
    assert compare(COURSE, submissions, processes=2) == alone

# transformer_lm's variants are the reference solution edited (a layer renamed, the feed-forward as a Sequential,
# the initialisation written per parameter), and so are training's two closure variants (the same steps moved into
# optimizer.step(closure)): copies by construction, which the comparison rightly flags; every other exercise's
# variants were written apart.
EDITED = ("solution", "renamed_inner_layers", "feedforward_sequential", "init_by_parameter")
EDITED_COPIES = {frozenset((a, b)) for i, a in enumerate(EDITED) for b in EDITED[i + 1:]}
CLOSURE_COPIES = ("closure_train_step", "closure_fit_loop")


def test_across_the_catalog_only_the_edited_copies_of_the_solution_are_flagged():
    flagged = set()
    for ex in COURSE.exercises:
        files = {"solution": (ROOT / "solutions" / ex.id / ex.file).read_text()}
        variants = sorted((ROOT / "solutions" / ex.id / "variants").glob(f"*/{ex.file}"))
        files |= {v.parent.name: v.read_text() for v in variants}
        submissions = [Submission(name, f"hash-{name}", {ex.id: code}) for name, code in files.items()]
        flagged |= {(ex.id, frozenset((p["first"], p["second"]))) for p in compare(COURSE, submissions)}
    assert flagged == ({("transformer_lm", pair) for pair in EDITED_COPIES}
                       | {("training", frozenset(("solution", closure))) for closure in CLOSURE_COPIES})
