"""The handout a student gets holds no solution body, no hidden criterion and no reference tensor a hidden criterion
reads; its checker judges the visible criteria without solutions/, and `grader check` says what it checked."""

import ast
import inspect
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from grader.course import load_course
from grader.grading.pipeline import reference_folders
from grader.classroom.handout import write_handout
from grader.classroom.checker import probes_read, visible_tests

from conftest import ROOT, criteria_module

# end to end: every test here grades in a sandbox (`pytest -m "not slow"` leaves them out)
pytestmark = pytest.mark.slow

COURSE = load_course(ROOT)


@pytest.fixture(scope="module")
def handout(tmp_path_factory):
    out = tmp_path_factory.mktemp("handout") / "student-repo"
    write_handout(COURSE, out)
    return out


def function_bodies(source: str) -> dict[str, str]:
    """qualified name -> the function's body without its docstring, normalised by ast.unparse."""
    bodies = {}

    def visit(node, prefix=""):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                body = child.body[1:] if ast.get_docstring(child) is not None else child.body
                bodies[prefix + child.name] = "\n".join(ast.unparse(s) for s in body)
                visit(child, prefix + child.name + ".")
            elif isinstance(child, ast.ClassDef):
                visit(child, prefix + child.name + ".")

    visit(ast.parse(source))
    return bodies


def all_criteria():
    for ex in COURSE.exercises:
        module = criteria_module(ex.id)
        for name, fn in vars(module).items():
            if name.startswith("test_") and hasattr(fn, "criterion"):
                yield ex, fn


def hidden_ids() -> set[str]:
    ids = {(fn.criterion.id, ex.is_visible(fn.criterion.id, fn.criterion.kind)) for ex, fn in all_criteria()}
    return {i for i, shown in ids if not shown} - {i for i, shown in ids if shown}


def test_no_solution_body_is_handed_out(handout):
    handed_out_on_purpose = set()          # later exercises' stubs ship a working model
    for ex in COURSE.exercises:
        handed_out_on_purpose |= set(function_bodies(COURSE.stub(ex).read_text()).values())
    secret = {}
    for ex in COURSE.exercises:
        stub = function_bodies(COURSE.stub(ex).read_text())
        for name, body in function_bodies(COURSE.solution(ex).read_text()).items():
            if body != stub.get(name) and body not in handed_out_on_purpose:
                secret[body] = f"{ex.id}: {name}"
    assert len(secret) > 20, "the search needs solution code that is not handed out"
    found = []
    for path in handout.rglob("*.py"):
        found += [f"{secret[b]} in {path.relative_to(handout)}" for b in function_bodies(path.read_text()).values()
                  if b in secret]
    assert found == []


def test_no_hidden_criterion_is_handed_out(handout):
    ids = hidden_ids()
    assert len(ids) > 50
    text = "\n".join(p.read_text(errors="replace") for p in handout.rglob("*") if p.is_file())
    # public tests may share a criterion's name; the checker's code may not
    checker = "\n".join(p.read_text() for p in (handout / "checker" / "grader").rglob("*.py"))
    patterns = [p for i in ids for p in (f'criterion("{i}"', f"'{i}'", f"\n{i} = ") if p in text]
    patterns += [f"def test_{i}(" for i in ids if f"def test_{i}(" in checker]
    assert patterns == []
    assert not (handout / "checker" / "solutions").exists() and str(COURSE.seed) not in text


def test_the_checkers_catalogs_hold_only_the_sentences_of_its_own_code(handout):
    """A hidden criterion's message templates say what it checks: the checker's catalogs keep only the templates
    of the code it ships, each still translated."""
    from grader.i18n import extract_templates, read_catalog

    from grader.classroom.checker import CHECKS_DIR

    def catalogs_of(package: Path, solutions: Path) -> dict[str, dict[str, str]]:
        """domain -> its catalog: the package's in its locale folder, each exercise's beside its criteria."""
        own = {po.stem: read_catalog(po) for po in (package / "locale" / "zh" / "LC_MESSAGES").glob("*.po")}
        return {**own, **{po.parent.name: read_catalog(po) for po in solutions.glob("*/zh.po")}}

    package, checks = handout / "checker" / "grader", handout / "checker" / CHECKS_DIR
    shipped = extract_templates(package, checks)   # the package and its cut course code
    catalogs = catalogs_of(package, checks)
    assert {domain: set(entries) for domain, entries in catalogs.items()} == \
           {domain: set(templates) for domain, templates in shipped.items()}
    ours = catalogs_of(ROOT / "grader", ROOT / "solutions")
    assert all(catalogs[d][m] == ours[d][m] for d in catalogs for m in catalogs[d]), "a translation was lost"
    withheld = {m for domain, templates in extract_templates().items() if domain != "grader" for m in templates} - {
        m for templates in shipped.values() for m in templates}
    assert len(withheld) > 50, "the search needs hidden criteria's sentences"
    text = "\n".join(p.read_text(errors="replace") for p in handout.rglob("*") if p.is_file())
    # a sentence (not a fragment such as " and " that any file may hold), quoted whole as a catalog or a source
    # file writes it (a withheld sentence may begin a longer one that is shipped)
    assert [m for m in withheld if len(m) >= 25 and f'"{m}"' in text] == []


def test_no_reference_tensor_of_a_hidden_criterion_is_handed_out(handout):
    from safetensors.torch import load_file

    handed_out = b"".join(p.read_bytes() for p in handout.rglob("*") if p.is_file())
    searched = 0
    for ex in COURSE.exercises:
        hidden_source = "\n".join(inspect.getsource(fn) for e, fn in all_criteria()
                                  if e.id == ex.id and not ex.is_visible(fn.criterion.id, fn.criterion.kind))
        folder = reference_folders(COURSE, [ex])[ex.id]
        for probe in sorted(probes_read(hidden_source)):
            tensors = folder / f"{probe}.safetensors"
            for key, tensor in (load_file(str(tensors)).items() if tensors.is_file() else []):
                data = tensor.contiguous().numpy().tobytes()
                if len(data) >= 32 and tensor.unique().numel() > 2:   # long and varied: a match is no accident
                    searched += 1
                    assert data not in handed_out, f"{ex.id}: probe {probe}'s {key} is in the handout"
    assert searched > 50


def test_the_checker_ships_only_references_its_visible_criteria_read(handout):
    for folder in (handout / "checker" / "references").iterdir():
        ex = COURSE.exercise(folder.name)
        source = "\n".join(inspect.getsource(fn) for fn in visible_tests(COURSE, ex).values())
        shipped = {p.stem for p in folder.glob("*.json")} - {"_import"}
        assert shipped and shipped <= probes_read(source)


def run_check(handout, *args):
    env = {**os.environ, "PYTHONPATH": str(handout / "checker")}
    env.pop("GITHUB_STEP_SUMMARY", None)
    return subprocess.run([sys.executable, "-m", "grader", "check", *args], capture_output=True, text=True,
                          cwd=handout, env=env, timeout=600)


def test_a_fresh_repository_gets_one_line_per_exercise_and_passes(handout):
    """An untouched handout (its CI's first push) is green: nothing started is nothing wrong."""
    done = run_check(handout)
    lines = done.stdout.strip().splitlines()
    assert done.returncode == 0, done.stdout + done.stderr
    assert lines[0].startswith(f"Checking {handout / 'exercises'} ")
    assert len([line for line in lines if "not started" in line]) == len(COURSE.exercises)
    assert len(lines) <= len(COURSE.exercises) + 3
    assert lines[-1] == f"0 of {len(COURSE.exercises)} exercises started: nothing to check yet."


def test_check_in_chinese_says_everything_in_chinese(handout, tmp_path):
    """`grader check --lang zh`: the heading, each untouched exercise, the closing line and the CI scorecard."""
    summary = tmp_path / "summary.md"
    env = {**os.environ, "PYTHONPATH": str(handout / "checker"), "GITHUB_STEP_SUMMARY": str(summary)}
    done = subprocess.run([sys.executable, "-m", "grader", "check", "--lang", "zh"], capture_output=True, text=True,
                          cwd=handout, env=env, timeout=600)
    lines = done.stdout.strip().splitlines()
    assert done.returncode == 0
    assert lines[0].startswith(f"正在检查 {handout / 'exercises'}（{len(COURSE.exercises)} 道练习）")
    assert len([line for line in lines if "尚未开始" in line]) == len(COURSE.exercises)
    assert lines[-1] == f"{len(COURSE.exercises)} 道练习中已开始 0 道：暂时没有需要检查的内容。"
    card = summary.read_text(encoding="utf-8")
    assert card.startswith("## 可见评分卡\n") and "| 练习 | 评分项 | 结果 |" in card and "not started" not in card
    refused = subprocess.run([sys.executable, "-m", "grader", "check", "--lang", "zh"], capture_output=True,
                             text=True, cwd=tmp_path, timeout=120)
    assert refused.returncode == 2 and "中没有 exercises/ 文件夹" in refused.stderr


def test_the_checker_judges_visible_criteria_without_solutions(handout, tmp_path):
    repo = tmp_path / "repo"
    shutil.copytree(handout, repo)
    ex = COURSE.exercise("checkpoint")        # its visible criteria read stored reference observations
    shutil.copyfile(COURSE.solution(ex), repo / "exercises" / ex.id / ex.file)
    done = run_check(repo, ex.id)
    assert done.returncode == 0, done.stdout[-2000:]
    shown = len(visible_tests(COURSE, ex))
    assert f"visible criteria: {shown} / {shown} passed" in done.stdout


def test_check_refuses_the_course_stubs_and_a_folder_without_exercises(tmp_path):
    done = subprocess.run([sys.executable, "-m", "grader", "check"], capture_output=True, text=True, cwd=ROOT,
                          timeout=120)
    assert done.returncode == 2 and "course's own stubs" in done.stderr and len(done.stderr.splitlines()) == 1
    done = subprocess.run([sys.executable, "-m", "grader", "check"], capture_output=True, text=True, cwd=tmp_path,
                          timeout=120)
    assert done.returncode == 2 and "no exercises/ folder" in done.stderr


@pytest.mark.parametrize("summary, zh", [("1 failed, 7 passed", "1 个失败、7 个通过"), ("8 passed", "8 个通过"),
                                         ("1 error, 2 warnings", "1 个出错、2 个警告"),
                                         ("ERROR: file or directory not found: x",
                                          "ERROR: file or directory not found: x")])
def test_check_says_pytests_counts_in_the_students_language(summary, zh):
    from grader.grading.precheck import pytest_counts

    said = pytest_counts(summary)
    assert said.render("en") == summary and said.render("zh") == zh
