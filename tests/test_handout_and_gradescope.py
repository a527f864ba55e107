"""The student handout holds none of the hidden material; the Gradescope bundle grades a simulated
/autograder layout."""

import json
import stat
import subprocess
import sys
import zipfile

import pytest

from grader.course import load_course

from conftest import ROOT

COURSE = load_course(ROOT)


@pytest.fixture(scope="module")
def handout(tmp_path_factory):
    out = tmp_path_factory.mktemp("handout") / "student-repo"
    done = subprocess.run([sys.executable, "-m", "grader", "handout", str(out)], capture_output=True, text=True,
                          cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr
    return out


def solution_only_lines():
    """Lines of the reference solutions that appear nowhere in exercises/: what a handout must never show.
    (Some solution code is handed out on purpose: later exercises' stubs ship a working model.)"""
    handed_out = "\n".join(p.read_text(errors="replace") for p in (ROOT / "exercises").rglob("*") if p.is_file())
    secret = set()
    for ex in COURSE.exercises:
        for line in COURSE.solution(ex).read_text().splitlines():
            text = line.strip()
            if len(text) > 25 and not text.startswith(("#", '"""')) and text not in handed_out:
                secret.add(text)
    assert len(secret) > 100, "the check needs solution code that is not handed out"
    return secret


def test_handout_has_every_exercise_and_a_workflow(handout):
    for ex in COURSE.exercises:
        assert (handout / "exercises" / ex.id / ex.file).read_bytes() == COURSE.stub(ex).read_bytes()
        assert (handout / "exercises" / ex.id / "README.md").is_file()
        assert list((handout / "exercises" / ex.id).glob("test_*.py"))
    workflow = (handout / ".github" / "workflows" / "grade.yml").read_text()
    assert "GITHUB_STEP_SUMMARY" in workflow and "grader grade exercises" in workflow


def test_handout_holds_no_hidden_material(handout):
    files = [p for p in handout.rglob("*") if p.is_file()]
    names = {p.name for p in files}
    assert not names & {"course.toml", "judge.ini"}
    assert not [p for p in files if p.suffix in (".safetensors", ".sqlite") or "solutions" in p.parts
                or "grader" in p.parts]
    text = "\n".join(p.read_text(errors="replace") for p in files)
    assert str(COURSE.seed) not in text, "the course seed would reveal the hidden inputs"
    assert "grader.judge" not in text and "@criterion(" not in text and "@probe" not in text
    leaked = [line for line in solution_only_lines() if line in text]
    assert leaked == [], f"solution lines in the handout: {leaked[:3]}"


def test_handout_refuses_a_non_empty_folder(handout):
    done = subprocess.run([sys.executable, "-m", "grader", "handout", str(handout)], capture_output=True, text=True,
                          cwd=ROOT, timeout=120)
    assert done.returncode == 2 and "not empty" in done.stderr


def test_gradescope_bundle_grades_a_flat_upload(tmp_path):
    bundle = tmp_path / "autograder.zip"
    done = subprocess.run([sys.executable, "-m", "grader", "gradescope", str(bundle)], capture_output=True,
                          text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr
    autograder = tmp_path / "autograder"
    with zipfile.ZipFile(bundle) as zf:
        for name in ("setup.sh", "run_autograder"):
            assert stat.S_IMODE(zf.getinfo(name).external_attr >> 16) & 0o111, f"{name} is not executable"
        assert not [n for n in zf.namelist() if n.startswith(("tests/", ".git/", "reports/", ".venv/"))]
        zf.extractall(autograder / "source")
    upload = autograder / "submission"
    upload.mkdir()
    ex = COURSE.exercise("decoder_block")
    (upload / ex.file).write_bytes(COURSE.solution(ex).read_bytes())   # a flat upload, as Gradescope users do
    done = subprocess.run([sys.executable, "-m", "grader", "--course", str(autograder / "source"), "gradescope-run",
                           "--root", str(autograder)], capture_output=True, text=True, cwd=ROOT, timeout=900)
    assert done.returncode == 0, done.stderr
    results = json.loads((autograder / "results" / "results.json").read_text())
    by_exercise = {}
    for test in results["tests"]:
        by_exercise.setdefault(test["name"].split(":")[0], []).append(test)
    assert all(t["status"] == "passed" for t in by_exercise["decoder_block"])
    assert all(t["score"] == 0 for name, tests in by_exercise.items() if name != "decoder_block" for t in tests)
    assert isinstance(results["execution_time"], (int, float))
