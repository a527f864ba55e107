"""A course folder for the audits tests: the bundled course cut down to exercise `audits`, whose solutions folder
holds the course's served catalog when it has one, else the tests' small stand-in (tests/audits_standin/served.py),
and the course's reference audits when it has them, else one of the correct audit variants."""

from __future__ import annotations

import shutil
import socket
from contextlib import contextmanager
from pathlib import Path

from conftest import ROOT, course_copy

AUDITS = ROOT / "solutions" / "audits"
STANDIN = Path(__file__).resolve().parent / "audits_standin" / "served.py"
STANDIN_REFERENCE = AUDITS / "variants" / "single_token_trials" / "audits.py"


def audits_course(folder: Path, standin: bool = False, timeout_s: float | None = None) -> Path:
    """The course folder (every exercise of course.toml: the catalog builds its entries from the others' references;
    grade it with `--exercise audits`). `standin`: serve the stand-in catalog even where the course has its own."""
    course_copy(folder, None, {"audits": timeout_s} if timeout_s else None)
    (folder / "solutions").unlink()
    solutions = folder / "solutions"
    solutions.mkdir()
    for item in (ROOT / "solutions").iterdir():
        if item.name != "audits":
            (solutions / item.name).symlink_to(item)
    shutil.copytree(AUDITS, solutions / "audits", ignore=shutil.ignore_patterns("__pycache__"))
    served = solutions / "audits" / "served.py"
    if standin or not served.is_file():
        shutil.copyfile(STANDIN, served)
    reference = solutions / "audits" / "audits.py"
    if standin or not reference.is_file():
        shutil.copyfile(STANDIN_REFERENCE, reference)
    return folder


def submission(folder: Path, source: str | Path) -> Path:
    """A submission folder holding only audits/audits.py."""
    target = folder / "audits" / "audits.py"
    target.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(source, Path):
        shutil.copyfile(source, target)
    else:
        target.write_text(source)
    return folder


@contextmanager
def model_process(served: Path, folder: Path, limits=None, seed: int = 3):
    """A model process serving `served`, listening in `folder`: yields (its host, a connection to it); stopped after."""
    from grader.models import handles
    from grader.models.host import ModelHost, ModelLimits

    host = ModelHost("audits", served, seed, folder, limits or ModelLimits(quantum_s=0.001, open_quantum_s=0.001))
    host.start()
    try:
        sock = socket.socket(socket.AF_UNIX)
        sock.connect(str(folder / host.name))
        yield host, handles.Connection(sock.fileno(), sock.fileno(), keep=sock)
    finally:
        host.stop()
