"""The handout's uv route (`uv run --extra cpu grader check`), installed and run by an unprivileged user with Debian's
own Python, as tests/test_student_install.py says (whose user, folders and torch wheel it shares)."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

from grader.classroom.handout import torch_version

from test_student_install import (COURSE, CPU_INDEX, SYSTEM_PYTHON, as_student, handout_for, home, pytestmark,
                                  student, wheel)

__all__ = ["home", "pytestmark", "student", "wheel"]   # the fixtures and marks this file takes from the venv route's


def test_the_uv_route_installs_the_cpu_build_and_checks_as_a_student(student, home, wheel):
    repo = handout_for(student, home)
    shutil.copyfile(COURSE.solution(COURSE.exercise("attention")), repo / "exercises" / "attention" / "attention.py")
    # PyTorch's CPU-only index, served from this machine: a PEP 503 page for torch naming the local wheel
    index = home / "index"
    (index / "torch").mkdir(parents=True)
    digest = subprocess.run(["sha256sum", str(wheel)], capture_output=True, text=True, check=True).stdout.split()[0]
    (index / "torch" / "index.html").write_text(
        f'<html><body><a href="{wheel.as_uri()}#sha256={digest}">{wheel.name}</a></body></html>\n')
    project = (repo / "pyproject.toml").read_text()
    assert project.count(CPU_INDEX) == 1
    (repo / "pyproject.toml").write_text(project.replace(CPU_INDEX, index.as_uri()))
    uv = home / "uv"
    shutil.copyfile(Path(sys.executable).parent / "uv", uv)
    uv.chmod(0o755)
    for path in [index, *index.rglob("*")]:
        os.lchown(path, *student)

    done = as_student(student, home, [str(uv), "run", "--extra", "cpu", "grader", "check", "attention"], repo,
                      UV_PYTHON=str(SYSTEM_PYTHON), UV_PYTHON_DOWNLOADS="never", UV_CACHE_DIR=str(home / "uv-cache"))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "✔ attention  public tests: 8 passed" in done.stdout and "visible criteria: 4 / 4 passed" in done.stdout
    venv = repo / ".venv"
    assert f"home = {SYSTEM_PYTHON.parent}" in (venv / "pyvenv.cfg").read_text()
    site = next(venv.glob("lib/python*/site-packages"))
    assert [p.name for p in site.glob("torch-*.dist-info")] == [f"torch-{torch_version(COURSE)}+cpu.dist-info"]
    assert not list(site.glob("nvidia*"))
    # the lock keeps both extras apart: the CPU build for `cpu`, PyPI's build (Apple's GPU on a Mac) for `mps`
    lock = (repo / "uv.lock").read_text()
    assert f'version = "{torch_version(COURSE)}+cpu"' in lock and 'registry = "https://pypi.org/simple"' in lock
