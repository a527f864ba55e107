"""The handout installs and checks as its README says, run by an unprivileged user with Debian's own Python (the
uv route in tests/test_student_install_uv.py, a file of its own so that the two routes install side by side).

The user (`student`, created here) gets a fresh handout in a folder of its own and runs the README's commands:
the venv route (`python3 -m venv .venv`, `install-torch.sh`, `pip install -e ./checker`, `grader check`) and the uv
route (`uv run --extra cpu grader check`). torch is never downloaded: pip is given this machine's CPU-only wheel
(root's pip finds it through its find-links; the user's pip would otherwise fetch PyPI's 4.8 GB CUDA build), and
uv is given a local copy of PyTorch's CPU-only index holding that wheel in place of the real index's address,
which this machine cannot reach. Everything else comes from PyPI, as on a student's machine.
"""

import os
import pwd
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from grader.course import load_course
from grader.classroom.handout import torch_version, write_handout

from conftest import ROOT

COURSE = load_course(ROOT)
USER = "student"
SYSTEM_PYTHON = Path("/usr/bin/python3")
CPU_INDEX = "https://download.pytorch.org/whl/cpu"
# How this machine reaches PyPI (its certificate authorities, a proxy), as a student's machine would be set up
NETWORK = {k: v for k, v in os.environ.items() if k in ("SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE",
                                                         "HTTPS_PROXY", "HTTP_PROXY", "NO_PROXY", "https_proxy",
                                                         "http_proxy", "no_proxy")}

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(os.geteuid() != 0, reason="creating the unprivileged user needs root"),
              pytest.mark.skipif(not SYSTEM_PYTHON.is_file(), reason="no system Python at /usr/bin/python3")]


def local_cpu_wheel() -> Path | None:
    """This machine's CPU-only torch wheel, where root's pip finds it (PIP_FIND_LINKS or pip's configuration)."""
    places = os.environ.get("PIP_FIND_LINKS", "").split()
    configured = subprocess.run([sys.executable, "-m", "pip", "config", "get", "global.find-links"],
                                capture_output=True, text=True)
    places += configured.stdout.split()
    for place in places:
        folder = Path(place.removeprefix("file://"))
        found = sorted(folder.glob(f"torch-{torch_version(COURSE)}+cpu-*.whl")) if folder.is_dir() else []
        if found:
            return found[0]
    return None


@pytest.fixture(scope="module")
def wheel() -> Path:
    found = local_cpu_wheel()
    if found is None:
        pytest.skip("no local CPU-only torch wheel: the user's pip would download PyPI's 4.8 GB CUDA build")
    return found


@pytest.fixture(scope="module")
def student():
    """The unprivileged user: uid and gid, made once (no home folder: each test gives it one)."""
    try:
        pwd.getpwnam(USER)
    except KeyError:   # both routes' files may ask at once, each on a worker of its own: either one makes it
        subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", USER],
                       capture_output=True)
    entry = pwd.getpwnam(USER)
    return entry.pw_uid, entry.pw_gid


@pytest.fixture()
def home(student):
    """A world-enterable folder under /tmp that the user owns, removed afterwards."""
    folder = Path(tempfile.mkdtemp(prefix="student-install-", dir="/tmp"))
    folder.chmod(0o755)
    os.chown(folder, *student)
    yield folder
    # A venv with torch in it is tens of thousands of files, a minute to unlink on a busy machine: moved out of the
    # way at once and removed in the background while the next tests run.
    trash = folder.with_name(folder.name + ".removed")
    folder.rename(trash)
    subprocess.Popen(["rm", "-rf", "--one-file-system", str(trash)], stdin=subprocess.DEVNULL,
                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)


def handout_for(student, home: Path) -> Path:
    repo = home / "repo"
    write_handout(COURSE, repo)
    for path in [repo, *repo.rglob("*")]:
        os.lchown(path, *student)
    return repo


def as_student(student, home: Path, command: list[str], cwd: Path, **env) -> subprocess.CompletedProcess:
    """`command` as the user, with a plain environment of its own (no root's pip configuration)."""
    (home / "tmp").mkdir(exist_ok=True)
    os.chown(home / "tmp", *student)
    environment = {"HOME": str(home), "PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "TMPDIR": str(home / "tmp"),
                   "PIP_DISABLE_PIP_VERSION_CHECK": "1", **NETWORK, **env}
    return subprocess.run(command, cwd=cwd, env=environment, user=student[0], group=student[1], extra_groups=[],
                          capture_output=True, text=True, timeout=1200)


def test_the_venv_route_installs_and_checks_as_a_student(student, home, wheel):
    repo = handout_for(student, home)
    shutil.copyfile(COURSE.solution(COURSE.exercise("attention")), repo / "exercises" / "attention" / "attention.py")

    refused = as_student(student, home, ["bash", "checker/install-torch.sh", str(SYSTEM_PYTHON)], repo)
    if (SYSTEM_PYTHON.parent.parent / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}"
            / "EXTERNALLY-MANAGED").is_file():   # PEP 668, as on Debian 12: said before pip would say it
        assert refused.returncode == 2, refused.stdout + refused.stderr
        assert "PEP 668" in refused.stderr and "-m venv .venv" in refused.stderr
        assert "CPU-only index" not in refused.stdout + refused.stderr

    steps = [[str(SYSTEM_PYTHON), "-m", "venv", ".venv"],
             ["bash", "checker/install-torch.sh", ".venv/bin/python"],
             [".venv/bin/python", "-m", "pip", "install", "--quiet", "-e", "./checker"]]
    said = {}
    for step in steps:
        # pip byte-compiles every module it installs, torch's thousands too: the work of minutes of CPU on a busy
        # machine, and not what is tested (Python compiles what it imports, on first use, into the user's venv)
        done = as_student(student, home, step, repo, PIP_FIND_LINKS=str(wheel.parent), PIP_NO_COMPILE="1")
        assert done.returncode == 0, f"{step}: {done.stdout[-3000:]}{done.stderr[-3000:]}"
        said[step[1]] = done.stdout + done.stderr
    installed = said["checker/install-torch.sh"]
    assert f"torch: installed {torch_version(COURSE)}+cpu (CPU only)" in installed, installed
    if "could not be used" in installed:   # the CPU-only index unreachable (as here): the real cause is named
        assert f"PyTorch's CPU-only index ({CPU_INDEX}) could not be used: https://download.pytorch.org could not " \
               "be reached" in installed, installed
        assert "4.8 GB with 15 nvidia-* packages" in installed
    packages = as_student(student, home, [".venv/bin/python", "-m", "pip", "list"], repo).stdout
    assert "nvidia" not in packages and "torch" in packages

    helped = as_student(student, home, [".venv/bin/grader", "--help"], repo)
    listed = {line.split()[0] for line in helped.stdout.splitlines() if line.startswith("    ") and line[4] != " "}
    assert helped.returncode == 0 and listed == {"check"}, helped.stdout

    checked = as_student(student, home, [".venv/bin/grader", "check"], repo)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "✔ attention  public tests: 8 passed" in checked.stdout
    assert "visible criteria: 4 / 4 passed" in checked.stdout
    assert checked.stdout.strip().splitlines()[-1] == \
        f"1 of {len(COURSE.exercises)} exercises started: their public tests and visible criteria pass."
