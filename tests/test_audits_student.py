"""Exercise 12 `audits` as students get it: the public tests tell a correct audit from a broken one, their in-process
handles offer exactly the grader's handle calls, the handout and the Gradescope bundle carry the exercise, and
class.html says per audit how many broken implementations the class's audits caught.

(That the public tests pass on the reference and on every audit variant, and fail on the stub, is
tests/test_public_tests.py's and tests/test_public_tests_variants.py's, for every exercise.)"""

from __future__ import annotations

import importlib.util
import json
import sys
import types
import zipfile
from pathlib import Path

import pytest
import torch

from browser import dump_dom, parse_dom, text_of
from conftest import ROOT
from grader.batch.catches import Catches, catches_of, report_catches
from grader.batch.gradebook import Gradebook, class_summary
from grader.course import load_course
from grader.judge.session import criteria_of
from grader.render.templated import render_class
from grader.review.unidiff import apply_diff

COURSE = load_course(ROOT)
EX = COURSE.exercise("audits")
FOLDER = ROOT / "exercises" / "audits"
AUDITS = ("causality", "targets", "registration", "gradients", "resume")


def mutant(name: str) -> bytes:
    """The reference audits with one catalog mutant's change applied."""
    diff = (ROOT / "solutions" / "audits" / "mutants" / name / "change.diff").read_text(encoding="utf-8")
    return apply_diff(COURSE.solution(EX).read_text(encoding="utf-8"), diff).encode("utf-8")


# --- the public tests -----------------------------------------------------------------------------------------

@pytest.mark.slow
def test_public_tests_pass_on_the_reference_and_fail_on_broken_audits(tmp_path):
    """Each broken audit fails exactly the public tests that show its defect; the reference passes them all."""
    from test_public_tests import run_public_tests

    runs = run_public_tests(tmp_path, {
        ("audits", "reference"): COURSE.solution(EX).read_bytes(),
        ("audits", "all_return_none"): mutant("all_return_none"),
        ("audits", "causality_no_eval"): mutant("causality_no_eval"),
        ("audits", "targets_one_text_only"): mutant("targets_one_text_only"),
    })
    code, output = runs["audits", "reference"]
    assert code == 0, output[-3000:]

    def failed(name: str) -> set[str]:
        code, output = runs["audits", name]
        assert code == 1, output[-3000:]
        return {line.split("::")[1].split(" ")[0] for line in output.splitlines() if line.startswith("FAILED ")}

    never_raises = failed("all_return_none")
    assert never_raises and all("_rejects_" in test for test in never_raises)   # it accepts every public wheat
    assert len(never_raises) == sum(line.startswith("def test_") and "_rejects_" in line
                                    for line in (FOLDER / "test_audits.py").read_text().splitlines())
    assert failed("causality_no_eval") == {"test_causality_puts_the_model_in_eval_first"}
    assert failed("targets_one_text_only") == {"test_targets_rejects_left_padding"}


def public_module() -> types.ModuleType:
    """exercises/audits/test_audits.py, imported beside the stub it tests."""
    stub_spec = importlib.util.spec_from_file_location("audits", COURSE.stub(EX))
    spec = importlib.util.spec_from_file_location("public_audits_tests", FOLDER / "test_audits.py")
    assert stub_spec and stub_spec.loader and spec and spec.loader
    stub = importlib.util.module_from_spec(stub_spec)
    stub_spec.loader.exec_module(stub)
    saved = sys.modules.get("audits")
    sys.modules["audits"] = stub
    try:
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        if saved is None:
            sys.modules.pop("audits", None)
        else:
            sys.modules["audits"] = saved
    return module


def calls(cls: type) -> set[str]:
    """The calls an object of `cls` offers: its public names, and being called."""
    return {name for name in dir(cls) if not name.startswith("_")} | ({"__call__"} & set(vars(cls)))


def test_public_handles_offer_exactly_the_graders_calls():
    """An audit written against the public handles uses no call the grader's handles lack, and the other way round."""
    from grader.models import handles

    public = public_module()
    assert calls(public.ModelHandle) == calls(handles.Model) == {
        "__call__", "eval", "train", "config", "named_parameters", "gradients"}
    assert calls(public.Trainer) - {"config", "batch", "keeps_optimizer", "keeps_rng", "seed"} == calls(
        handles.Trainer) == {"new", "load"}
    assert calls(public.Run) == calls(handles.Run) == {"step", "save", "parameters"}
    model = public.causal_model()
    assert model.eval() is model and model.train() is model   # as the grader's handles return themselves
    assert issubclass(public.ModelError, RuntimeError) and not issubclass(public.ModelError, AssertionError)


def test_public_handles_copy_and_a_crash_is_no_catch():
    public = public_module()
    model = public.connected_model()
    name, value = model.named_parameters()[0]
    value.zero_()
    assert dict(model.named_parameters())[name].abs().sum() > 0, "named_parameters() must hand out copies"
    with pytest.raises(RuntimeError) as raised:   # the model refuses T > block_size: a crash, not an AssertionError
        model(torch.zeros(1, model.config.block_size + 1, dtype=torch.long))
    assert not isinstance(raised.value, AssertionError) and "ValueError" in str(raised.value)


def test_the_dropout_wheat_needs_eval():
    """The positive control of the public "eval first" test: in train() mode the model gives two different sets of
    logits for the same tokens, and in eval() mode one."""
    public = public_module()
    model = public.causal_model(dropout=0.5)
    tokens = torch.arange(6).view(1, 6) % model.config.vocab_size
    assert not torch.equal(model(tokens), model(tokens))
    model.eval()
    assert torch.equal(model(tokens), model(tokens))


def test_mutate_mutates_the_five_audits_and_the_helpers_they_call():
    """`grader selftest --mutate` mutates what the stub leaves to students: every audit, and the reference's helpers."""
    from grader.review.mutation import student_functions

    stub, solution = COURSE.stub(EX).read_text(), COURSE.solution(EX).read_text()
    assert {f"audit_{a}" for a in AUDITS} <= student_functions(stub, solution)


# --- handout and Gradescope -----------------------------------------------------------------------------------

def test_handout_and_gradescope_bundle_carry_the_exercise(tmp_path):
    from grader.classroom.gradescope import build_bundle
    from grader.classroom.handout import write_handout
    from grader.grading.answers import answers_template

    write_handout(COURSE, tmp_path / "handout")
    shipped = tmp_path / "handout" / "exercises" / "audits"
    assert sorted(p.name for p in shipped.iterdir()) == ["README.md", "answers.md", "audits.py", "test_audits.py"]
    assert (shipped / "audits.py").read_bytes() == COURSE.stub(EX).read_bytes()
    assert (shipped / "answers.md").read_text(encoding="utf-8") == answers_template(EX)
    assert not list((tmp_path / "handout").rglob("served*")) and not list((tmp_path / "handout").rglob("mutants"))
    assert "`exercises/audits/answers.md`" in (tmp_path / "handout" / "README.md").read_text(encoding="utf-8")

    names = build_bundle(COURSE, tmp_path / "autograder.zip")
    for name in ("exercises/audits/audits.py", "exercises/audits/test_audits.py", "solutions/audits/audits.py",
                 "solutions/audits/probes.py", "solutions/audits/criteria.py", "solutions/audits/served.py",
                 "solutions/audits/zh.po"):
        assert name in names, name
    with zipfile.ZipFile(tmp_path / "autograder.zip") as zf:
        assert 'id = "audits"' in zf.read("course.toml").decode("utf-8")


# --- class.html -----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("evidence", [
    None, [], {"caught": 1}, {"caught": True, "total": 2}, {"caught": 3, "total": 2}, {"caught": 0, "total": 0},
    {"caught": 1, "total": 2, "missed": ["a", "b"]}, {"caught": 1, "total": 2, "missed": "a"},
    {"caught": 1.0, "total": 2},
])
def test_malformed_counts_count_for_nothing(evidence):
    assert catches_of(evidence) is None


def test_counts_are_read_from_a_report(tmp_path):
    assert catches_of({"caught": 1, "total": 3, "missed": ["a", 7, "b"], "crashed": []}) == Catches(1, 3, ("a", "b"))
    assert report_catches(None) == {} and report_catches(tmp_path / "absent") == {}
    (tmp_path / "report.json").write_text("{not json")
    assert report_catches(tmp_path) == {}


# (caught per audit, the keys missed per audit) of three students; the last key is a hostile one
CLASS = {
    "ann": ({a: 4 for a in AUDITS}, {}),
    "bo": ({"causality": 3, "targets": 4, "registration": 2, "gradients": 4, "resume": 0},
           {"causality": ["generated/first_position_sees_second"],
            "registration": ["generated/head_stored_transposed", "<img src=x onerror=alert(1)>"],
            "resume": ["checkpoint/mutants/no_rng_state", "a", "b", "c"]}),
    "cy": ({"causality": 3, "targets": 4, "registration": 4, "gradients": 4, "resume": 4},
           {"causality": ["generated/first_position_sees_second"]}),
}


def write_class(out: Path, malformed: str = "di") -> Gradebook:
    """A gradebook and report.json files written by hand: three students with counts for each audit, and one whose
    report carries malformed counts (left out of every tally)."""
    book = Gradebook(out / "gradebook.sqlite")
    for name in [*CLASS, malformed]:
        caught, missed = CLASS.get(name, ({}, {}))
        report_dir = out / "students" / name
        report_dir.mkdir(parents=True)
        exercises, rows = [], []
        for ex in COURSE.exercises:
            criteria = []
            for meta in criteria_of(ex.id):
                audit = meta.id.removesuffix("_catches_broken")
                evidence = {}
                if ex.id == "audits" and audit in AUDITS:
                    evidence = ({"caught": caught[audit], "total": 4, "missed": missed.get(audit, [])}
                                if name in CLASS else {"caught": "4", "total": 4})
                criteria.append({"id": meta.id, "evidence": evidence})
                points = ex.points[meta.id] * (caught[audit] / 4 if audit in caught else 1.0)
                rows.append({"exercise": ex.id, "criterion": meta.id, "kind": meta.kind,
                             "status": "passed" if points == ex.points[meta.id] else "failed", "points": points,
                             "max_points": ex.points[meta.id], "message": {"en": "m", "zh": "m"}})
            exercises.append({"id": ex.id, "criteria": criteria})
        (report_dir / "report.json").write_text(json.dumps({"exercises": exercises}), encoding="utf-8")
        score, top = sum(r["points"] for r in rows), sum(r["max_points"] for r in rows)
        book.store(name, f"hash-{name}", "key", {
            "score": score, "max_score": top, "percent": round(100 * score / top, 2), "status": "graded",
            "message": {"en": "m", "zh": "m"}, "graded_at": "t", "report_dir": str(report_dir)}, rows)
    return book


def test_class_summary_counts_each_audits_catches(tmp_path):
    book = write_class(tmp_path)
    try:
        summary = class_summary(COURSE, book, "key")
    finally:
        book.close()
    by_audit = {c.criterion.removesuffix("_catches_broken"): c for c in summary.catches}
    assert list(by_audit) == list(AUDITS) and {c.exercise for c in summary.catches} == {"audits"}
    causality = by_audit["causality"]
    assert (causality.students, causality.caught, causality.total, causality.caught_all) == (3, 10, 12, 1)
    assert causality.missed == [("generated/first_position_sees_second", 2)]
    resume = by_audit["resume"]
    assert (resume.caught, resume.total, resume.caught_all) == (8, 12, 2)
    assert resume.missed == [("a", 1), ("b", 1), ("c", 1), ("checkpoint/mutants/no_rng_state", 1)]
    assert causality.title["en"] == dict(
        (m.id, m.title) for m in criteria_of("audits"))["causality_catches_broken"]["en"]


def test_class_without_such_evidence_has_no_catches_section(tmp_path):
    from conftest import course_copy

    course = load_course(course_copy(tmp_path / "course", ["heads"]))
    book = Gradebook(tmp_path / "gradebook.sqlite")
    try:
        summary = class_summary(course, book, "key")
    finally:
        book.close()
    assert summary.catches == []
    assert 'id="catches"' not in render_class(summary, course, course.templates, "en")


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_class_html_shows_per_audit_how_many_the_class_caught(tmp_path, lang):
    """In Chromium: one line per audit with the class's catches, the keys missed most, and a key that looks like
    markup shown as text."""
    book = write_class(tmp_path)
    try:
        summary = class_summary(COURSE, book, "key")
    finally:
        book.close()
    page = tmp_path / "class.html"
    page.write_text(render_class(summary, COURSE, COURSE.templates, lang), encoding="utf-8")
    dom, console = dump_dom(page, tmp_path / "profile")
    root = parse_dom(dom)
    section = next(s for s in root.iter("section") if s.get("id") == "catches")
    lines = {li.get("data-catches"): li for li in section.iter("li")}
    assert list(lines) == [f"audits/{a}_catches_broken" for a in AUDITS]
    causality = lines["audits/causality_catches_broken"]
    assert (causality.get("data-caught"), causality.get("data-total"), causality.get("data-caught-all"),
            causality.get("data-students")) == ("10", "12", "1", "3")
    text = text_of(causality)
    assert "10 / 12 (83%)" in text and "generated/first_position_sees_second (2)" in text
    registration = text_of(lines["audits/registration_catches_broken"])
    assert "<img src=x onerror=alert(1)> (1)" in registration
    assert not [img for img in root.iter("img")] and not console
    assert any(a.get("href") == "#catches" for a in root.iter("a"))
