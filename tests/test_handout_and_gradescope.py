"""The student handout holds none of the hidden material (tests/test_handout_secrets.py searches its checker);
the Gradescope bundle grades a simulated /autograder layout."""

import json
import os
import shutil
import stat
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from grader.classroom.checker import CHECKS_DIR
from grader.course import load_course

from conftest import ROOT

# end to end: every test here grades in a sandbox (`pytest -m "not slow"` leaves them out)
pytestmark = pytest.mark.slow

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
    workflow = (handout / ".github" / "workflows" / "check.yml").read_text()
    assert "grader check" in workflow
    assert "secrets." not in workflow and "GRADER_TOKEN" not in workflow, "a student's workflow holds no secret"


def test_handout_holds_no_hidden_material(handout):
    files = [p for p in handout.rglob("*") if p.is_file()]
    assert not [p for p in files if p.suffix == ".sqlite" or "solutions" in p.parts]
    text = "\n".join(p.read_text(errors="replace") for p in files)
    assert str(COURSE.seed) not in text, "the course seed would reveal the hidden inputs"
    # line by line outside the checker's code, whose generic lines (`if isinstance(value, dict):`) solutions share;
    # tests/test_handout_secrets.py searches all of it for solution function bodies
    checker_code = (handout / "checker" / "grader", handout / "checker" / CHECKS_DIR)   # the package, the cut probes
    student_text = "\n".join(p.read_text(errors="replace") for p in files
                              if not any(p.is_relative_to(code) for code in checker_code))
    leaked = [line for line in solution_only_lines() if line in student_text]
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


# --- Gradescope: python selection, root-only hidden material, links, visibility ------------------------------

@pytest.fixture(scope="module")
def autograder(tmp_path_factory):
    """A simulated /autograder: the bundle extracted into source/, an upload whose `exercises` folder is a link
    to the bundle's own solutions, and gradescope-run's results."""
    root = tmp_path_factory.mktemp("gradescope") / "autograder"
    bundle = root.parent / "autograder.zip"
    done = subprocess.run([sys.executable, "-m", "grader", "gradescope", str(bundle)], capture_output=True,
                          text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr
    with zipfile.ZipFile(bundle) as zf:
        zf.extractall(root / "source")
    (root / "submission").mkdir()
    (root / "submission" / "exercises").symlink_to(root / "source" / "solutions")
    done = subprocess.run([sys.executable, "-m", "grader", "--course", str(root / "source"), "gradescope-run",
                           "--root", str(root)], capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert done.returncode == 0, done.stderr
    return root


def setup_sh(autograder) -> str:
    return (autograder / "source" / "setup.sh").read_text()


def test_setup_sh_chooses_python_3_11_or_newer_itself(autograder):
    text = setup_sh(autograder)
    assert "command -v python3)" not in text, "Ubuntu 22.04's python3 is 3.10"
    assert "bash scripts/setup.sh --print-python" in text, "one choice of Python: scripts/setup.sh's"
    assert "apt-get install -y -qq python3.11 python3.11-venv" in text
    assert "deadsnakes" in text and "exit 1" in text


def setup_print_python(path: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(ROOT / "scripts" / "setup.sh"), "--print-python"], capture_output=True,
                          text=True, env={"PATH": path, **env}, timeout=60)


def test_setup_prefers_a_system_python_to_one_first_on_path(tmp_path):
    """A pyenv Python under a home folder, first on PATH, is passed over for the system's, which the sandbox's
    other uid can read; a Python that others cannot read is told apart from one they can."""
    home = tmp_path / "home"
    (home / "bin").mkdir(parents=True)
    system = Path(os.path.realpath(sys.executable))   # this venv's base interpreter: a system Python
    for name in ("python3", "python3.12"):
        shutil.copyfile(system, home / "bin" / name)
        (home / "bin" / name).chmod(0o755)
    home.chmod(0o700)   # like /root: other users cannot enter it
    chosen = setup_print_python(f"{home / 'bin'}:/usr/bin:/bin")
    assert chosen.returncode == 0, chosen.stderr
    assert chosen.stdout.strip().startswith(("/usr/bin/", "/usr/local/bin/")), chosen.stdout
    script = (ROOT / "scripts" / "setup.sh").read_text()
    readable = script[script.index("READABLE_BY_OTHERS='") + len("READABLE_BY_OTHERS='"):]
    readable = readable[:readable.index("'\n")]
    copied = [str(home / "bin" / "python3"), "-c"]
    assert subprocess.run([*copied, "import sys, venv, ensurepip"], timeout=60).returncode == 0, "the copy runs"
    assert subprocess.run([*copied, readable], capture_output=True, timeout=60).returncode != 0, \
        "a Python in a folder others cannot enter counts as unreadable"
    assert subprocess.run([chosen.stdout.strip(), "-c", readable], timeout=60).returncode == 0
    given = setup_print_python("/usr/bin:/bin", GRADER_PYTHON="/opt/python/bin/python3")
    assert given.stdout.strip() == "/opt/python/bin/python3", "GRADER_PYTHON is taken as given"


def test_setup_sh_makes_the_hidden_material_root_only(autograder, tmp_path):
    source = tmp_path / "source"
    shutil.copytree(autograder / "source", source, ignore=shutil.ignore_patterns("__pycache__"))
    for path in source.rglob("*"):
        path.chmod(0o777 if path.is_dir() else 0o666)     # whatever modes the upload came with
    modes = [line for line in setup_sh(autograder).splitlines() if line.startswith("chmod ")]
    assert modes, "setup.sh sets no file modes"
    subprocess.run(["bash", "-ec", "\n".join(modes)], cwd=source, check=True, timeout=60)
    # the probes too: each exercise's child reads its own probe code before it drops to the student's uid
    secret = [source / "course.toml", source / "solutions"]
    for top in secret:
        for path in [top, *top.rglob("*")]:
            assert path.stat().st_mode & 0o077 == 0, f"{path.relative_to(source)} is readable by student code"
    for path in [source / "grader" / "worker" / "__main__.py", source / "grader" / "course.py"]:
        assert path.stat().st_mode & 0o004, f"{path.relative_to(source)} must stay readable for the worker"
    assert not [p for p in source.rglob("*") if p.stat().st_mode & 0o022], "nothing may be writable by others"


def test_without_namespaces_student_code_never_runs_as_root(monkeypatch):
    from grader.classroom import gradescope
    from grader.sandbox import levels

    monkeypatch.setattr(levels, "strict_missing", lambda: "namespaces cannot be created here")
    monkeypatch.setattr(gradescope.os, "geteuid", lambda: 0)
    sandbox = gradescope.gradescope_sandbox()
    assert sandbox.level == "basic" and sandbox.layers["own_uid"]
    monkeypatch.setattr(levels, "choose", lambda level: levels.Sandbox(level, {"own_uid": False}))
    with pytest.raises(gradescope.UnsafeToGrade, match="as root"):
        gradescope.gradescope_sandbox()


def test_a_linked_exercises_folder_scores_nothing(autograder):
    results = json.loads((autograder / "results" / "results.json").read_text())
    assert results["score"] == 0 and all(t["score"] == 0 for t in results["tests"])
    report = json.loads((autograder / "results" / "report.json").read_text())
    assert all(e["status"] == "error" and "symbolic link" in e["message"]["en"] for e in report["exercises"])
    assert "links in your upload are never followed" in results["output"] and "exercises" in results["output"]


def test_gather_follows_no_link_to_a_classmate_or_the_grader(tmp_path):
    from grader.classroom.gradescope import LINK_STAND_IN, gather_submission

    upload, target = tmp_path / "upload", tmp_path / "target"
    (tmp_path / "classmate" / "heads").mkdir(parents=True)
    (tmp_path / "classmate" / "heads" / "heads.py").write_text("# the classmate's work\n")
    upload.mkdir()
    (upload / "heads").symlink_to("../classmate/heads")
    (upload / "block.py").symlink_to("/proc/self/cwd/solutions/decoder_block/block.py")
    (upload / "stuff").symlink_to(ROOT / "solutions")
    (upload / "masks.py").write_text("# mine\n")
    notes = gather_submission(COURSE, upload, target)
    for ex in ("heads", "decoder_block"):
        staged = target / ex / COURSE.exercise(ex).file
        assert staged.is_symlink() and str(staged.readlink()) == LINK_STAND_IN
    assert (target / "masks" / "masks.py").read_text() == "# mine\n"
    assert sorted(p.relative_to(target).as_posix() for p in target.rglob("*.py")) == [
        "decoder_block/block.py", "heads/heads.py", "masks/masks.py"]
    assert notes and all(name in notes[0].render(lang)
                         for name in ("heads", "block.py", "stuff") for lang in ("en", "zh"))
    assert "符号链接" in notes[0].render("zh")


def test_a_bundle_built_for_chinese_grades_in_chinese(tmp_path):
    """`grader gradescope --lang zh` writes run_autograder to grade with --lang zh, and gradescope-run then writes
    results.json in Chinese: the summary, the status words and the grader's own messages."""
    root = tmp_path / "autograder"
    bundle = tmp_path / "autograder.zip"
    done = subprocess.run([sys.executable, "-m", "grader", "gradescope", str(bundle), "--lang", "zh"],
                          capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr
    with zipfile.ZipFile(bundle) as zf:
        run_autograder = zf.read("run_autograder").decode()
        zf.extractall(root / "source")
    assert "gradescope-run" in run_autograder and "--lang zh" in run_autograder
    (root / "submission").mkdir()   # nothing uploaded: every exercise not attempted, graded in seconds
    done = subprocess.run([sys.executable, "-m", "grader", "--course", str(root / "source"), "gradescope-run",
                           "--root", str(root), "--lang", "zh"], capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert done.returncode == 0, done.stderr
    results = json.loads((root / "results" / "results.json").read_text())
    assert results["output"].startswith(("得分：", "可见评分项：")) and "沙箱：" in results["output"]
    heads = next(t for t in results["tests"] if t["name"].startswith("heads: "))
    assert heads["output"].startswith("[未作答] 提交中没有 heads/heads.py") and "排查方向：" in heads["output"]
    report = json.loads((root / "results" / "report.json").read_text())
    zh_title = next(e for e in report["exercises"] if e["id"] == "heads")["criteria"][0]["title"]["zh"]
    assert heads["name"] == f"heads: {zh_title}"


def test_results_count_the_hidden_points_without_naming_them(autograder):
    results = json.loads((autograder / "results" / "results.json").read_text())
    report = json.loads((autograder / "results" / "report.json").read_text())
    course = load_course(autograder / "source")
    criteria = [(e["id"], c) for e in report["exercises"] for c in e["criteria"]]
    assert len(criteria) == len(results["tests"])
    for (ex_id, c), test in zip(criteria, results["tests"], strict=True):
        assert test["visibility"] == course.exercise(ex_id).gradescope_visibility(c["id"], c["kind"])
    hidden = [t for t in results["tests"] if t["visibility"] != "visible"]
    assert 0 < len(hidden) < len(results["tests"])
    assert f"{sum(t['max_score'] for t in hidden):g} more points" in results["output"]
    assert not [t for t in hidden if t["name"].split(": ", 1)[1] in results["output"]]
    assert f"Sandbox: {report['sandbox']['level']}" in results["output"]


def test_course_sets_visibility_by_criterion_and_kind(tmp_path):
    from conftest import course_copy

    from grader.course import CourseError

    folder = course_copy(tmp_path / "course", ["heads"])
    text = (folder / "course.toml").read_text()
    text = text.replace("visibility = {}", 'visibility = { "kind:values" = "after_due_date" }')
    text = text.replace('id = "heads"\n', 'id = "heads"\nvisibility = { round_trip = "hidden" }\n')
    (folder / "course.toml").write_text(text)
    heads = load_course(folder).exercise("heads")
    assert heads.gradescope_visibility("round_trip", "values") == "hidden"
    assert heads.gradescope_visibility("split_values", "values") == "after_due_date"
    assert heads.gradescope_visibility("split_shape", "shape") == "visible"
    assert heads.gradescope_visibility("rejects_indivisible", "errors") == "visible"
    (folder / "course.toml").write_text(text.replace('"hidden"', '"later"'))
    with pytest.raises(CourseError, match="later"):
        load_course(folder)


PEEK = """import os
seen = []
for path in {paths!r}:
    try:
        open(path).read(1)
        seen.append("read " + path)
    except OSError as exc:
        seen.append(type(exc).__name__ + " " + path)
raise RuntimeError(f"uid {{os.getuid()}}: " + "; ".join(seen))
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="only root can run student code as another uid")
def test_without_namespaces_student_code_cannot_read_the_hidden_material(autograder, monkeypatch, capsys):
    """The basic level as Gradescope runs it (root, no namespaces) on a bundle with setup.sh's file modes: the
    student's import reads what the worker needs but none of the hidden material."""
    import tempfile

    from grader.classroom.gradescope import run_in_gradescope
    from grader.sandbox import levels

    with tempfile.TemporaryDirectory(dir="/tmp") as tmp:
        root = Path(tmp) / "autograder"
        os.chmod(tmp, 0o755)   # reachable by every uid, so only the modes setup.sh sets can keep a file hidden
        shutil.copytree(autograder / "source", root / "source", ignore=shutil.ignore_patterns("__pycache__"))
        modes = [line for line in setup_sh(autograder).splitlines() if line.startswith("chmod ")]
        subprocess.run(["bash", "-ec", "\n".join(modes)], cwd=root / "source", check=True, timeout=60)
        secret = [root / "source" / p for p in ("solutions/heads/heads.py", "course.toml",
                                                "solutions/heads/criteria.py", "solutions/attention/probes.py")]
        public = root / "source" / "exercises" / "heads" / "README.md"
        (root / "submission").mkdir()
        (root / "submission" / "heads.py").write_text(PEEK.format(paths=[str(p) for p in [public, *secret]]))
        monkeypatch.setattr(levels, "strict_missing", lambda: "namespaces cannot be created here")
        results = json.loads(run_in_gradescope(load_course(root / "source"), root).read_text())
        report = json.loads((root / "results" / "report.json").read_text())
    message = next(e["message"]["en"] for e in report["exercises"] if e["id"] == "heads")
    assert f"read {public}" in message, message
    assert all(f"PermissionError {p}" in message for p in secret), message
    assert "uid 0:" not in message
    assert results["output"].splitlines()[-1] == "Sandbox: basic"   # the level only: no weak spot for students
    told = capsys.readouterr().out   # the autograder's stdout, which Gradescope shows the instructor alone
    assert "Sandbox note: weaker than strict (namespaces cannot be created here)" in told and "network" in told
