"""Memory is capped by what student code uses, not by the address space the grader's own process maps.

The CUDA build of torch maps about 3.2 GB at `import torch` (its libraries' code and data, and reserved address
space), nearly none of it touched. An address-space cap of `memory_mb` made every exercise of such a worker end
before the student's import. Here the worker is given a mapping of that kind before it imports torch: a 4 GB
PROT_NONE reservation and 3.5 GB of file-backed private mappings (3 GB read-only like libraries' code, 0.5 GB
writable like their data, which the kernel counts as the process's data), of a sparse file, so that none of it
costs memory. Correct code must still get full marks, and a memory bomb next to it must still be stopped, with
`run.limit: memory`, at both levels. At the strict level the grading's memory control group also caps what the
exercise's processes use together, which no per-process limit sees.
"""

from __future__ import annotations

import mmap
import os
import re
import resource
from pathlib import Path

import pytest

from conftest import ROOT, course_copy
from grader.course import load_course
from grader.sandbox import cgroups, levels, rootfs
from grader.worker import jail

# end to end: every test here grades in a sandbox (`pytest -m "not slow"` leaves them out)
pytestmark = pytest.mark.slow

IS_ROOT = os.geteuid() == 0
BOMB_MB = 1024                 # decoder_block's memory_mb in the course copy: the bombs pass it
RESERVED_GB = 4 + 3 + 0.5      # what the worker maps before `import torch` (see RESERVE)
BACKING_BYTES = 7 << 29        # the sparse file the file-backed mappings are of: 3.5 GB
HEADS_SOLUTION = (ROOT / "solutions" / "heads" / "heads.py").read_text()
# Printed at import (what the student prints is kept in the report's output tail): the address-space cap the
# child got, which shows the worker's reservation was there, and counted in what the child had at fork.
HEADS_PRINTING_ITS_CAP = HEADS_SOLUTION + (
    "\n\nimport resource as _resource\nprint('address space cap:', _resource.getrlimit(_resource.RLIMIT_AS)[0])\n")
RESERVE = """
import mmap as _mmap, os as _os
_fd = _os.open({backing!r}, _os.O_RDONLY)
CUDA_LIKE = [_mmap.mmap(-1, 4 << 30, flags=_mmap.MAP_PRIVATE, prot=0)]   # reserved, never touched
CUDA_LIKE += [_mmap.mmap(_fd, 1 << 30, flags=_mmap.MAP_PRIVATE, prot=_mmap.PROT_READ, offset=i << 30)
              for i in range(3)]   # like libraries' code
CUDA_LIKE.append(_mmap.mmap(_fd, 1 << 29, flags=_mmap.MAP_PRIVATE, prot=_mmap.PROT_READ | _mmap.PROT_WRITE,
                            offset=3 << 30))   # like libraries' data: private and writable, counted as data
_os.close(_fd)
"""
# A memory bomb that touches what it takes, 64 MB at a time, as a list that grows does.
TOUCHING_BOMB = """
hog = []
while True:
    hog.append(torch.ones(16 << 20))
"""
# Two processes, each under the per-process caps (600 MB and 800 MB of BOMB_MB), over the group's limit together.
# The child takes its share first, so the probe's own process is the larger when the kernel chooses whom to kill.
TWO_PROCESS_BOMB = """
import os, time
ready_r, ready_w = os.pipe()
if os.fork() == 0:
    kept = torch.ones(150 << 20)   # 600 MB, touched
    os.write(ready_w, b"x")
    time.sleep(3600)
os.read(ready_r, 1)
kept = torch.ones(200 << 20)   # 800 MB, touched
time.sleep(3600)
"""


def block_with(body: str) -> str:
    """The reference block.py with count_block_parameters's body replaced by `body`."""
    source = (ROOT / "solutions" / "decoder_block" / "block.py").read_text()
    start = source.index("def count_block_parameters")
    end = source.index("\n\n\n", start)
    indented = "".join(f"    {line}\n" if line else "\n" for line in body.strip("\n").splitlines())
    return source[:start] + "def count_block_parameters(d_model, n_heads, d_ff):\n" + indented + source[end:]


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    folder = course_copy(tmp_path_factory.mktemp("course"), ["heads", "decoder_block"])
    toml = (folder / "course.toml").read_text()
    toml = re.sub(r'(?m)^(id = "decoder_block"\n)', rf"\1memory_mb = {BOMB_MB}\n", toml)
    (folder / "course.toml").write_text(toml)
    return load_course(folder)


@pytest.fixture(scope="module")
def backing(tmp_path_factory):
    """A sparse file to map: 3.5 GB long, no block of it written. In a folder every uid can reach (the basic
    level's worker, as root, maps it before any uid change; the strict box binds it)."""
    folder = tmp_path_factory.mktemp("cuda-like")
    for path in (folder, *folder.parents):
        path.chmod(path.stat().st_mode | 0o001) if IS_ROOT and path != Path("/") else None
    path = folder / "libcuda-like.so"
    with open(path, "wb") as fh:
        fh.truncate(BACKING_BYTES)
    path.chmod(0o644)
    return path


@pytest.fixture
def cuda_like_worker(monkeypatch, backing):
    """Every worker started from now on maps RESERVE before it imports torch: at the basic level through its
    command line, in the strict box through its copy of grader/worker/__init__.py (imported before torch)."""
    basic_command = levels._run_module

    def run_module(module: str) -> list[str]:
        command = basic_command(module)
        if module == "grader.worker":
            command[-1] = RESERVE.format(backing=str(backing)) + command[-1]
        return command

    monkeypatch.setattr(levels, "_run_module", run_module)
    plan = rootfs.plan()
    init = backing.parent / "worker-init.py"
    original = next(source for source, name in plan["lib"] if name == "grader/worker/__init__.py")
    init.write_text(Path(original).read_text() + RESERVE.format(backing=f"{rootfs.SITE}/{backing.name}"))
    lib = [[str(init) if name == "grader/worker/__init__.py" else source, name] for source, name in plan["lib"]]
    boxed = {**plan, "site": [*plan["site"], [str(backing), backing.name]], "lib": lib}
    monkeypatch.setattr(rootfs, "plan", lambda: boxed)


def graded(course, tmp_path, level: str, bomb: str) -> dict:
    from grader.grading.pipeline import grade

    submission = tmp_path / "submission"
    (submission / "heads").mkdir(parents=True)
    (submission / "heads" / "heads.py").write_text(HEADS_PRINTING_ITS_CAP)
    (submission / "decoder_block").mkdir()
    (submission / "decoder_block" / "block.py").write_text(block_with(bomb))
    report = grade(course, submission, ["heads", "decoder_block"], levels.choose(level))
    return {e.id: e for e in report.exercises}


def level_params():
    basic = pytest.param("basic", marks=pytest.mark.skipif(
        not IS_ROOT, reason="as root, the basic level's worker is given the reservation the same way"))
    strict = pytest.param("strict", marks=pytest.mark.skipif(bool(levels.strict_missing()),
                                                             reason="the strict sandbox is unavailable here"))
    return [strict, basic]


@pytest.mark.parametrize("level", level_params())
def test_a_cuda_sized_reservation_costs_no_marks_and_a_memory_bomb_is_still_stopped(course, tmp_path, level,
                                                                                    cuda_like_worker):
    exercises = graded(course, tmp_path, level, "import torch\n" + TOUCHING_BOMB)
    heads = exercises["heads"]
    assert heads.status == "passed" and heads.score == heads.max_score, [(c.id, c.status, c.message["en"])
                                                                         for c in heads.criteria]
    cap = int(re.search(r"address space cap: (\d+)", heads.run["output_tail"]).group(1))
    assert cap > (RESERVED_GB * 1024 + course.exercise("heads").limits.memory_mb) * 2**20, \
        "the child's address-space cap counts the reservation it inherited (else the test reproduces nothing)"

    bomb = exercises["decoder_block"]
    assert bomb.run["limit"] == "memory", bomb.run
    counted = next(c for c in bomb.criteria if c.id == "parameter_count_small")
    assert counted.status == "crashed"
    assert "ran out of memory" in counted.message["en"] and f"{BOMB_MB} MB" in counted.message["en"]
    assert next(c for c in bomb.criteria if c.id == "causality").status == "passed", "probes before it keep credit"


@pytest.mark.skipif(bool(levels.strict_missing()) or not cgroups.caps_memory(),
                    reason="needs the strict sandbox with a memory control group")
def test_processes_under_their_own_caps_are_stopped_together_by_the_memory_group(course, tmp_path):
    exercises = graded(course, tmp_path, "strict", "import torch\n" + TWO_PROCESS_BOMB)
    assert exercises["heads"].status == "passed"
    bomb = exercises["decoder_block"]
    assert bomb.run["limit"] == "memory", bomb.run
    counted = next(c for c in bomb.criteria if c.id == "parameter_count_small")
    assert counted.status == "crashed" and "ran out of memory" in counted.message["en"], counted.message["en"]


def test_what_a_process_maps_is_found_without_proc_as_proc_says():
    """The box has no /proc: the child finds what it maps by asking the kernel (jail._counted); here, where
    /proc is, both ways must agree, before and after a new mapping of each kind."""
    def both() -> tuple[tuple[int, int], tuple[int, int]]:
        return jail.mapped(), (jail._counted(resource.RLIMIT_AS, jail.PROT_NONE),
                               jail._counted(resource.RLIMIT_DATA, mmap.PROT_READ | mmap.PROT_WRITE))

    limits = [resource.getrlimit(limit) for limit in (resource.RLIMIT_AS, resource.RLIMIT_DATA)]
    before = both()
    assert before[0] == before[1]
    held = [mmap.mmap(-1, 256 << 20, flags=mmap.MAP_PRIVATE, prot=jail.PROT_NONE),
            mmap.mmap(-1, 64 << 20, flags=mmap.MAP_PRIVATE)]
    after = both()
    assert after[0] == after[1]
    assert after[0][0] - before[0][0] >= 320 << 20 and after[0][1] - before[0][1] >= 64 << 20
    assert [resource.getrlimit(limit) for limit in (resource.RLIMIT_AS, resource.RLIMIT_DATA)] == limits
    del held


# --- the real CUDA build (opt-in: a download of ~4.8 GB, never made by the suite itself) ---------------------------
CUDA_VENV = os.environ.get("GRADER_CUDA_VENV")   # a venv with the default (CUDA) torch and this grader's requirements
CUDA_USER = os.environ.get("GRADER_CUDA_USER")   # an unprivileged user to grade at the basic level as


@pytest.mark.skipif(not CUDA_VENV, reason="opt-in: set GRADER_CUDA_VENV to a venv built with `pip install torch` "
                                           "(the default CUDA build) and this grader's requirements")
@pytest.mark.parametrize("level", ["strict", "basic"])
def test_the_default_cuda_build_grades_the_solutions_to_full_marks(level):
    """This checkout's grader run by that venv's interpreter (its torch), on every solution: strict as root, basic as
    GRADER_CUDA_USER when given (as a student's `grader check` or a Gradescope container runs it), else as root."""
    import json
    import subprocess
    import tempfile

    python = str(Path(CUDA_VENV) / "bin" / "python")
    cuda = subprocess.run([python, "-c", "import torch; print(torch.version.cuda)"], capture_output=True, text=True,
                          timeout=600)
    assert cuda.returncode == 0 and cuda.stdout.strip() not in ("", "None"), f"not a CUDA build: {cuda.stdout}"
    as_user = ["runuser", "-u", CUDA_USER, "--"] if level == "basic" and CUDA_USER and IS_ROOT else []
    if level == "strict" and not IS_ROOT:
        pytest.skip("the strict level needs root")
    with tempfile.TemporaryDirectory(prefix="cuda-grading-") as out:
        os.chmod(out, 0o777)
        command = [*as_user, python, "-m", "grader", "grade", "solutions", "--sandbox", level, "--out", out]
        done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, timeout=1800)
        assert done.returncode == 0, done.stderr[-3000:]
        report = json.loads((Path(out) / "report.json").read_text())
    assert report["sandbox"]["level"] == level
    short = [(e["id"], e["status"], e["message"]["en"][:200])
             for e in report["exercises"] if e["score"] != e["max_score"]]
    assert not short and report["score"] == report["max_score"], short
