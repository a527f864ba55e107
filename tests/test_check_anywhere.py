"""`grader check` on every student's machine: the plain route (grader/grading/plain.py) gives the strict sandbox's
verdicts, runs where Linux-only modules and calls are missing, names each failing public test with pytest's reason,
passes on an untouched handout, and the student's `grader` offers only `check`."""

import os
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest

from grader.grading.precheck import PLAIN_SWITCH, check, check_sandbox
from grader.course import load_course
from grader.classroom.handout import write_handout
from grader.sandbox import levels
from grader.review.selftest import mutant_text
from grader.render.safe_text import markdown_text

from conftest import ROOT, course_copy

# end to end: every test here grades in a sandbox (`pytest -m "not slow"` leaves them out)
pytestmark = pytest.mark.slow

COURSE = load_course(ROOT)
HOSTILE = ROOT / "tests" / "hostile"
# Hostile cases whose verdict comes from what the code does, not from a limit only the sandbox has (memory, processes,
# file size, the network, reading or writing outside, forged observation files): one of each way a run ends that
# the sample does not show (an exit at import is in the next test)
SAME_EITHER_WAY = ("os_exit_call", "segfault", "output_flood", "monkeypatch_torch")
strict_only = pytest.mark.skipif(os.geteuid() != 0 or bool(levels.strict_missing()),
                                 reason="the comparison needs the strict sandbox (root)")


def verdicts(checked) -> dict:
    """Everything a report says of the submission's work (durations and timestamps aside), and the public tests."""
    exercises = {}
    for ex in checked.report.exercises if checked.report else []:
        exercises[ex.id] = (ex.status, ex.score, ex.message, ex.run.get("limit"),
                            [(c.id, c.status, c.points, c.message, c.evidence) for c in ex.criteria])
    tests = {e: (r.counts, r.failures, r.problem.texts() if r.problem else None) for e, r in checked.tests.items()}
    staged = {e: (s.status, s.message.texts() if s.message else None) for e, s in checked.staged.items()}
    return {"exercises": exercises, "tests": tests, "staged": staged}


@strict_only
@pytest.mark.slow
def test_the_plain_route_gives_the_strict_sandboxs_verdicts(tmp_path):
    """The sample submission (every exercise, partly wrong) and hostile cases, judged on the plain route and in the
    strict sandbox: the same statuses, points, messages and evidence, criterion for criterion. The checks run two
    at a time, as `grader batch` grades (a check waits on its children most of its time); the time limits are not
    what is compared, so every exercise has a generous one, which no check on a busy machine reaches."""
    import tomllib
    from concurrent.futures import ThreadPoolExecutor

    course = load_course(course_copy(tmp_path / "course", timeout_s={ex.id: 600 for ex in COURSE.exercises}))
    cases = [(ROOT / "examples" / "submissions" / "sample", [ex.id for ex in course.exercises])]
    for name in SAME_EITHER_WAY:
        manifest = tomllib.loads((HOSTILE / name / "manifest.toml").read_text(encoding="utf-8"))
        cases.append((HOSTILE / name, [manifest["exercise"]]))
    with ThreadPoolExecutor(2) as pool:
        checked = [(submission, pool.submit(check, course, submission, exercises, None),
                    pool.submit(check, course, submission, exercises, levels.choose("strict")))
                   for submission, exercises in cases]
        compared = 0
        for submission, plain_route, strict_route in checked:
            plain, boxed = verdicts(plain_route.result()), verdicts(strict_route.result())
            assert plain == boxed, submission.name
            compared += sum(len(v[4]) for v in plain["exercises"].values())
    assert compared > 150   # the sample alone has every exercise's criteria


def test_the_plain_route_is_chosen_wherever_the_strict_sandbox_is_missing(monkeypatch):
    monkeypatch.delenv(PLAIN_SWITCH, raising=False)
    for system in ("darwin", "win32", "cygwin"):
        monkeypatch.setattr(sys, "platform", system)
        assert check_sandbox() is None
    monkeypatch.setattr(sys, "platform", "linux")
    monkeypatch.setattr(levels, "strict_missing", lambda: "it needs root (to create namespaces and switch users)")
    assert check_sandbox() is None     # a student's own account: never the basic level, which hides nothing here
    monkeypatch.setattr(levels, "strict_missing", lambda: "")
    monkeypatch.setattr(levels, "choose", lambda level: f"the {level} sandbox")
    assert check_sandbox() == "the strict sandbox"     # positive control: Linux as root
    monkeypatch.setenv(PLAIN_SWITCH, "1")
    assert check_sandbox() is None


@pytest.fixture(scope="module")
def handout(tmp_path_factory):
    out = tmp_path_factory.mktemp("handout") / "student-repo"
    write_handout(COURSE, out)
    return out


def copy_of(handout: Path, where: Path, **files) -> Path:
    """A copy of the handout with `exercise=source` put in place of those exercises' stubs: a file, or a catalog
    mutant's folder (its diff applied to the solution)."""
    repo = where / "repo"
    shutil.copytree(handout, repo)
    for exercise, source in files.items():
        ex = COURSE.exercise(exercise)
        target = repo / "exercises" / ex.id / ex.file
        if source.is_dir():
            target.write_text(mutant_text(COURSE, ex.id, source), encoding="utf-8")
        else:
            shutil.copyfile(source, target)
    return repo


def grader_check(repo: Path, *args, python: str = sys.executable, **env):
    environment = {**os.environ, "PYTHONPATH": str(repo / "checker"), **env}
    environment.pop("GITHUB_STEP_SUMMARY", None) if "GITHUB_STEP_SUMMARY" not in env else None
    return subprocess.run([python, "-m", "grader", "check", *args], capture_output=True, text=True, cwd=repo,
                          env=environment, timeout=900)


def test_a_failing_public_test_is_named_with_pytests_reason(handout, tmp_path):
    repo = copy_of(handout, tmp_path, attention=ROOT / "solutions/attention/mutants/softmax_over_queries")
    summary = tmp_path / "summary.md"
    done = grader_check(repo, "attention", GITHUB_STEP_SUMMARY=str(summary), **{PLAIN_SWITCH: "1"})
    assert done.returncode == 1, done.stdout + done.stderr
    assert "✘ attention  public tests: 4 failed, 4 passed" in done.stdout
    named = "      ✘ test_scores_are_scaled_by_sqrt_d — AssertionError: expected 0.880797 (atol 1e-5), got 1.000000"
    assert named in done.stdout.splitlines()
    assert sum(line.startswith("      ✘ test_") for line in done.stdout.splitlines()) == 4
    card = summary.read_text(encoding="utf-8")
    assert ("| `attention` | public tests: test\\_scores\\_are\\_scaled\\_by\\_sqrt\\_d | ❌ AssertionError\\: "
            "expected 0.880797 (atol 1e-5), got 1.000000 |") in card
    zh = grader_check(repo, "attention", "--lang", "zh", **{PLAIN_SWITCH: "1"})
    assert "✘ attention  公开测试：4 个失败、4 个通过" in zh.stdout and named in zh.stdout.splitlines()
    assert zh.stdout.strip().splitlines()[-1] == "1 道练习中已开始 1 道：上面还有需要修改的地方。"


def test_a_file_that_does_not_import_is_named_by_the_public_tests_too(handout, tmp_path):
    broken = tmp_path / "heads.py"
    broken.write_text("def split_heads(x, n_heads:\n    pass\n")
    repo = copy_of(handout, tmp_path, heads=broken)
    done = grader_check(repo, "heads", **{PLAIN_SWITCH: "1"})
    assert done.returncode == 1
    lines = done.stdout.splitlines()
    assert "✘ heads  public tests: 1 error" in lines
    assert any(line.startswith("      ✘ test_heads.py — SyntaxError: ") for line in lines), done.stdout


def fake_non_linux_venv(where: Path) -> Path:
    """A virtual environment whose Python lacks, for the grader's own modules, what only Linux (or only POSIX) has:
    fcntl, resource, pwd, grp and termios cannot be imported; their `os` has no fork, geteuid, getuid, killpg,
    setpgid, wait4, sched_getaffinity, setresuid, O_NOFOLLOW or O_DIRECTORY and opens nothing relative to a folder's
    descriptor; libc has no prctl, mount, umount2 or pivot_root. (Other packages keep the real `os`: torch and pytest
    choose their own ways on each system.) Its site folder takes this environment's packages; every process started
    with its Python, the checker's children included, is the same."""
    venv.EnvBuilder(with_pip=False).create(where)
    site = next(where.glob("lib/python*/site-packages"))
    ours = next(Path(sys.prefix).glob("lib/python*/site-packages"))
    (site / "a_packages.pth").write_text(f"import site; site.addsitedir({str(ours)!r})\n")
    (site / "not_linux.py").write_text('''
import builtins, ctypes, os, types
BLOCKED = {"fcntl", "resource", "pwd", "grp", "termios"}
MISSING = {"fork", "geteuid", "getuid", "killpg", "setpgid", "wait4", "sched_getaffinity", "setresuid", "O_NOFOLLOW",
           "O_DIRECTORY"}
class _Os(types.ModuleType):
    def __getattr__(self, name):
        if name in MISSING:
            raise AttributeError(f"module 'os' has no attribute {name!r}")
        return set() if name == "supports_dir_fd" else getattr(os, name)
_os = _Os("os")
_import = builtins.__import__
def _for_the_grader(name, globals=None, locals=None, fromlist=(), level=0):
    if str((globals or {}).get("__name__", "")).startswith("grader") and level == 0:
        if name.split(".")[0] in BLOCKED:
            raise ImportError(f"No module named {name!r} (not on this system)")
        if name == "os":
            return _os
    return _import(name, globals, locals, fromlist, level)
builtins.__import__ = _for_the_grader
class _NoLinuxLibc:
    def __init__(self, libc):
        self._libc = libc
    def __getattr__(self, name):
        if name in ("prctl", "mount", "umount2", "pivot_root"):
            raise AttributeError(f"dlsym: symbol not found: {name}")
        return getattr(self._libc, name)
_CDLL = ctypes.CDLL
ctypes.CDLL = lambda name, *a, **k: _NoLinuxLibc(_CDLL(name, *a, **k)) if name is None else _CDLL(name, *a, **k)
''')
    (site / "z_not_linux.pth").write_text("import not_linux\n")
    return where / "bin" / "python"


@strict_only
@pytest.mark.slow
def test_check_without_linux_gives_what_the_strict_sandbox_gives(handout, tmp_path):
    """The check, parent and children, on a Python that lacks the Linux-only modules and calls: the same output,
    line for line, as the strict sandbox's, for a correct exercise, a wrong one, one that does not import, one
    that exits at import, a notebook and an untouched stub."""
    broken = tmp_path / "masks.py"
    broken.write_text("def causal_mask(T:\n    pass\n")
    repo = copy_of(handout, tmp_path, attention=COURSE.solution(COURSE.exercise("attention")),
                   heads=ROOT / "solutions/heads/mutants/split_missing_transpose", masks=broken,
                   decoder_block=HOSTILE / "sys_exit_import" / "decoder_block" / "block.py")
    notebook(COURSE.solution(COURSE.exercise("rope")).read_text(), repo / "exercises" / "rope" / "rope.ipynb")
    python = fake_non_linux_venv(tmp_path / "not-linux")
    env = {**os.environ, "PYTHONPATH": str(repo / "checker")}
    for linux_only, said in (("import grader.worker.syscalls", "symbol not found: mount"),
                             ("import grader.sandbox.uids as u; u._is_account(0)", "No module named 'pwd'"),
                             ("from grader.sandbox import levels; levels.strict_missing()", "no attribute 'geteuid'"),
                             ("import grader.worker.protocol as p; assert p.RELATIVE_OPEN", "AssertionError")):
        # positive controls: for the grader's code, what only Linux (or POSIX) has is gone
        refused = subprocess.run([str(python), "-c", linux_only], capture_output=True, text=True, cwd=repo, env=env)
        assert refused.returncode == 1 and said in refused.stderr, refused.stderr
    # the two checks side by side: each waits on its children most of its time
    with subprocess.Popen([str(python), "-m", "grader", "check"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True, cwd=repo, env={**env, PLAIN_SWITCH: "1"}) as started:
        boxed = grader_check(repo)
        out, err = started.communicate(timeout=900)
    simulated = subprocess.CompletedProcess(started.args, started.returncode, out, err)
    assert simulated.stderr == "", simulated.stderr
    assert simulated.stdout == boxed.stdout and simulated.returncode == boxed.returncode == 1
    for said in ("✔ attention  public tests: 8 passed", "✘ heads  public tests:", "✘ masks  public tests: 1 error",
                 "✔ rope  public tests:", "· embedding  not started"):
        assert said in simulated.stdout, simulated.stdout


def notebook(code: str, path: Path) -> None:
    """`code` as a notebook: one code cell for each top-level block, as a student splits a file into cells."""
    import nbformat

    cells = [nbformat.v4.new_code_cell(block) for block in code.rstrip("\n").split("\n\n\n")]
    nbformat.write(nbformat.v4.new_notebook(cells=cells), str(path))


def test_the_students_grader_offers_check_alone(handout):
    env = {**os.environ, "PYTHONPATH": str(handout / "checker")}
    helped = subprocess.run([sys.executable, "-m", "grader", "--help"], capture_output=True, text=True, cwd=handout,
                            env=env, timeout=120)
    assert helped.returncode == 0 and commands(helped.stdout) == {"check"} and "--course" not in helped.stdout
    refused = subprocess.run([sys.executable, "-m", "grader", "grade"], capture_output=True, text=True, cwd=handout,
                             env=env, timeout=120)
    assert refused.returncode == 2 and "invalid choice: 'grade'" in refused.stderr
    ours = subprocess.run([sys.executable, "-m", "grader", "--help"], capture_output=True, text=True, cwd=ROOT,
                          timeout=120)
    assert commands(ours.stdout) >= {"grade", "batch", "handout", "selftest", "check"}


def commands(help_text: str) -> set[str]:
    """The commands `grader --help` lists (argparse indents each by four spaces under COMMAND)."""
    return {line.split()[0] for line in help_text.splitlines() if line.startswith("    ") and line[4] != " "}


def test_check_names_the_written_answers_still_empty(handout, tmp_path):
    """The handout ships each exercise's answers.md template; `grader check` says which answers are still empty and
    which heading names no question, in the student's language, and the code's exit status is kept."""
    repo = copy_of(handout, tmp_path)
    answers = repo / "exercises" / "transformer_lm" / "answers.md"
    assert answers.read_text(encoding="utf-8").count("\n## ") == 2   # the template, as shipped
    done = grader_check(repo, "transformer_lm", **{PLAIN_SWITCH: "1"})
    assert done.returncode == 0, done.stdout + done.stderr   # nothing started: nothing fails
    assert "Written answers:" not in done.stdout.splitlines(), done.stdout   # nothing started, nothing written
    answers.write_text(answers.read_text(encoding="utf-8").replace(
        "## tensor_flow\n", "## tensor_flow\ntokens [B, T] -> logits [B, T, V]\n") + "## tensorflow\nmisnamed\n",
        encoding="utf-8")
    summary = tmp_path / "summary.md"
    done = grader_check(repo, "transformer_lm", GITHUB_STEP_SUMMARY=str(summary), **{PLAIN_SWITCH: "1"})
    lines = done.stdout.splitlines()
    assert "· transformer_lm/answers.md: tensor_flow is empty" not in lines
    assert "· transformer_lm/answers.md: reads_history is empty" in lines
    assert ("✘ transformer_lm/answers.md: the heading `## tensorflow` names no question of transformer_lm (its "
            "questions: tensor_flow, reads_history)") in lines
    empty = markdown_text("transformer_lm/answers.md: reads_history is empty")
    row = f"| `transformer_lm` | Written answers | ⬜ {empty} |"
    assert row in summary.read_text(encoding="utf-8")
    answers.write_text("## tensor_flow\nshapes\n## reads_history\nattention reads p or q\n", encoding="utf-8")
    zh = grader_check(repo, "transformer_lm", "--lang", "zh", **{PLAIN_SWITCH: "1"})
    assert "✔ transformer_lm/answers.md：每个问题都已作答" in zh.stdout.splitlines(), zh.stdout
