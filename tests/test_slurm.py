"""`grader batch --cluster slurm` on a real SLURM: a controller and a node daemon on this machine, with a munge
daemon of their own, started for these tests from a configuration in a temporary folder. dask-jobqueue submits
the grading workers as SLURM batch jobs; the gradebook ends as a run without Dask ends, and no job outlives the
batch."""

import os
import shutil
import socket
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import ROOT, course_copy
from grader.course import load_course
from grader.sandbox.levels import strict_missing
from grader.review.selftest import catalog_mutants

# end to end: every test here grades in a sandbox (`pytest -m "not slow"` leaves them out)
pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(bool(strict_missing()), reason="SLURM's daemons and the strict sandbox need root")]

NEEDED = "Debian's slurm-wlm and munge are needed: apt-get install -y slurm-wlm munge (scripts/setup.sh --test)"
DAEMONS = ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "sinfo")
START_S = 60


def binary(name: str) -> str | None:
    """The daemon or command's path (the daemons live in /usr/sbin, which not every PATH holds)."""
    return shutil.which(name) or next((str(p) for p in (Path("/usr/sbin", name),) if p.exists()), None)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(what: str, check, logs: list[Path], seconds: float = START_S) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.3)
    tails = "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')[-1500:]}" for p in logs if p.exists())
    pytest.fail(f"{what} within {seconds:g} s\n{tails}")


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    """A one-node SLURM cluster: the environment (SLURM_CONF) its commands need."""
    found = {name: binary(name) for name in DAEMONS}
    missing = [name for name, path in found.items() if path is None]
    assert not missing, f"{NEEDED} (missing: {', '.join(missing)})"
    root = tmp_path_factory.mktemp("slurm")
    os.chmod(root, 0o700)   # munged refuses a key or socket in a folder others may write to
    for folder in ("munge", "spool-ctld", "spool-d", "log"):
        (root / folder).mkdir(mode=0o700)
    key = root / "munge" / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o600)
    munge_socket = root / "munge" / "munge.socket"
    node = socket.gethostname().split(".")[0]
    conf = root / "slurm.conf"
    conf.write_text("\n".join([
        "ClusterName=grader-test",
        f"SlurmctldHost={node}(127.0.0.1)",
        "AuthType=auth/munge", "CredType=cred/munge", f"AuthInfo=socket={munge_socket}",
        "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none",   # no cgroups of SLURM's own
        "SchedulerType=sched/builtin", "SelectType=select/cons_tres", "SelectTypeParameters=CR_Core",
        "JobAcctGatherType=jobacct_gather/none", "AccountingStorageType=accounting_storage/none",
        "MpiDefault=none", "SlurmUser=root", "ReturnToService=2",
        f"SlurmctldPort={free_port()}", f"SlurmdPort={free_port()}",
        f"SlurmctldPidFile={root}/slurmctld.pid", f"SlurmdPidFile={root}/slurmd.pid",
        f"StateSaveLocation={root}/spool-ctld", f"SlurmdSpoolDir={root}/spool-d",
        f"SlurmctldLogFile={root}/log/slurmctld.log", f"SlurmdLogFile={root}/log/slurmd.log",
        f"NodeName={node} NodeAddr=127.0.0.1 CPUs={os.cpu_count()} RealMemory=8000 State=UNKNOWN",
        "PartitionName=grading Nodes=ALL Default=YES MaxTime=INFINITE State=UP", ""]))
    env = {**os.environ, "SLURM_CONF": str(conf)}
    logs = [root / "log" / name for name in ("munged.log", "slurmctld.log", "slurmd.log")]
    daemons = []
    try:
        daemons.append(subprocess.Popen(
            [found["munged"], "--foreground", "--force", f"--key-file={key}", f"--socket={munge_socket}",
             f"--pid-file={root}/munge/munged.pid", f"--log-file={root}/log/munged.log",
             f"--seed-file={root}/munge/munged.seed"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT))
        wait_for("munged did not start", munge_socket.exists, logs)
        daemons.append(subprocess.Popen([found["slurmctld"], "-D", "-i", "-f", str(conf)], env=env,
                                        stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT))
        daemons.append(subprocess.Popen([found["slurmd"], "-D", "-f", str(conf), "-N", node], env=env,
                                        stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT))

        def idle() -> bool:
            state = subprocess.run([found["sinfo"], "-h", "-o", "%T"], env=env, capture_output=True, text=True)
            return state.stdout.strip() == "idle"

        wait_for("the SLURM node did not come up idle", idle, logs)
        yield {**env, "PATH": os.pathsep.join([os.path.dirname(found["sbatch"]), env.get("PATH", "")])}
    finally:
        for daemon in reversed(daemons):
            daemon.kill()
            daemon.wait()


@pytest.fixture(scope="module")
def course_dir(tmp_path_factory):
    """One light exercise, and the jobs' settings in course.toml, as an instructor would write them."""
    folder = course_copy(tmp_path_factory.mktemp("course"), ["heads"])
    with open(folder / "course.toml", "a", encoding="utf-8") as fh:
        fh.write('\n[cluster.slurm]\nwalltime = "00:15:00"\nmemory = "2GB"\n')
    return folder


@pytest.fixture(scope="module")
def classroom(tmp_path_factory):
    """Two correct submissions (distinct files), a mutant, and an empty folder."""
    root = tmp_path_factory.mktemp("class")
    solution = (ROOT / "solutions" / "heads" / "heads.py").read_text()
    mutant = next(iter(catalog_mutants(load_course(ROOT), ROOT / "solutions", "heads").values()))
    for name, source in (("ada", solution + "\n# ada\n"), ("bo", solution + "\n# bo\n"), ("cy", mutant), ("di", None)):
        (root / name).mkdir()
        if source is not None:
            (root / name / "heads").mkdir()
            (root / name / "heads" / "heads.py").write_text(source)
    return root


def batch(course_dir: Path, classroom: Path, out: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "grader", "--course", str(course_dir), "batch", str(classroom), "--out", str(out),
            *extra]


def queued(env: dict) -> list[str]:
    return subprocess.run(["squeue", "-h", "-o", "%i %j %T"], env=env,
                          capture_output=True, text=True).stdout.split("\n")[:-1]


def test_a_class_graded_on_slurm_ends_as_a_local_run(slurm, course_dir, classroom, tmp_path):
    local = subprocess.run(batch(course_dir, classroom, tmp_path / "local", "--jobs", "1"), capture_output=True,
                           text=True, timeout=300)
    assert local.returncode == 0, local.stderr[-2000:]
    jobs_log = tmp_path / "jobs"
    on_slurm = subprocess.run(batch(course_dir, classroom, tmp_path / "slurm", "--cluster", "slurm", "--jobs", "2",
                                    "--cluster-option", f"log_directory={jobs_log}"),
                              capture_output=True, text=True, timeout=600, env=slurm, cwd=tmp_path)
    assert on_slurm.returncode == 0, on_slurm.stderr[-2000:]
    assert (tmp_path / "slurm" / "grades.csv").read_text() == (tmp_path / "local" / "grades.csv").read_text()
    # The workers ran as SLURM jobs (SLURM wrote each one's output where --cluster-option said), in the sandbox
    # the gradebook records, and none is left queued or running once the batch is over.
    assert {p.suffix for p in jobs_log.iterdir()} == {".err", ".out"}
    stored = sqlite3.connect(tmp_path / "slurm" / "gradebook.sqlite").execute(
        "SELECT DISTINCT sandbox FROM submissions WHERE status != 'empty'").fetchall()
    assert stored == [("strict",)]
    deadline = time.monotonic() + 60
    while queued(slurm) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not queued(slurm), "SLURM jobs outlived the batch"
