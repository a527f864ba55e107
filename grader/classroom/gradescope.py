"""Gradescope: `grader gradescope OUT.zip` builds the autograder bundle; inside Gradescope its
`run_autograder` calls `grader gradescope-run`, which grades /autograder/submission and writes
/autograder/results/results.json."""

from __future__ import annotations

import math
import os
import stat
import tempfile
import zipfile
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from grader.course import TOOL_ROOT, Course
from grader.feedback import visibility
from grader.i18n import Text, t, verbatim
from grader.nolinks import LINK, REGULAR, Lookup, links_under, read_without_links
from grader.render.safe_text import terminal_text

BUNDLED = ("course.toml", "pyproject.toml", "README.md", "exercises", "solutions", "templates", "grader", "scripts")
# Made root-only in the image: solutions/ (the reference code, the hidden criteria, the probes: what the hidden inputs
# are; each exercise's child reads its own before it drops to the student's uid) and course.toml (it holds the seed
# the hidden inputs derive from). In a container without namespaces nothing else hides them from student code.
HIDDEN_IN_BUNDLE = ("solutions", "course.toml")
MAX_UPLOADED_FILE_BYTES = 16 << 20   # staging refuses far less; this only bounds what is copied
# What stands in for an exercise whose path in the upload went through a link: a link of our own that points
# nowhere, so staging refuses the exercise as a link, and nothing could ever reach the original target.
LINK_STAND_IN = "/nonexistent/symbolic-link-in-the-upload"

# %-formatting, not str.format: the script's own ${...} braces would need doubling
SETUP_SH = """#!/usr/bin/env bash
# Gradescope runs this once, as root, when the autograder image is built (Ubuntu 22.04: python3 is 3.10).
set -euo pipefail
cd "$(dirname "$0")"
export DEBIAN_FRONTEND=noninteractive

# The grader needs Python 3.11+ with venv, installed system-wide: student code runs as another uid, which
# must be able to read the interpreter. scripts/setup.sh chooses it (a system one before any on PATH, such as the
# image's pyenv Python under root's home folder).
apt-get update -qq
apt-get install -y -qq util-linux >/dev/null   # unshare, for the strict sandbox where namespaces are allowed
python="$(bash scripts/setup.sh --print-python 2>/dev/null)" || {
    apt-get install -y -qq python3.11 python3.11-venv >/dev/null || true
    python="$(bash scripts/setup.sh --print-python)"
} || {
    echo "setup.sh: no Python 3.11 or newer with venv that other users can read, and apt-get could not install" \\
         "python3.11 and python3.11-venv (third-party archives such as deadsnakes are not reachable here): use a" \\
         "Gradescope base image that has Python 3.11+" >&2
    exit 1
}
echo "setup.sh: grading with $python ($("$python" --version))"
GRADER_PYTHON="$python" bash scripts/setup.sh

# Without namespaces (usual in Gradescope) no mount hides anything from student code: file modes must.
# Everything the worker imports stays readable by all; the hidden material becomes root-only.
chmod -R a+rX,go-w .
chmod -R go-rwx %(hidden)s
""" % {"hidden": " ".join(HIDDEN_IN_BUNDLE)}  # noqa: UP031
RUN_AUTOGRADER = """#!/usr/bin/env bash
# Gradescope runs this, as root, for every submission; students read its results in the language below.
cd /autograder/source
exec .venv/bin/python -m grader --course /autograder/source gradescope-run --root "${AUTOGRADER_ROOT:-/autograder}" \\
    --lang %(lang)s
"""


# Gradescope's Autograder Settings (gradescope-autograders.readthedocs.io, "Troubleshooting"): what an assignment gets
# unless the instructor chooses more in its settings page, and the longest timeout Gradescope allows.
GRADESCOPE_DEFAULT_MEMORY_MB = 768
GRADESCOPE_DEFAULT_TIMEOUT_MIN = 10
GRADESCOPE_DEFAULT_CPUS = 0.5
GRADESCOPE_MAX_TIMEOUT_MIN = 40
# What a grading of correct code holds at its peak: the grading process, the worker and each exercise's child, the
# judging server, torch imported in the worker and the judge. bench/gradescope_footprint.py, grading the reference
# solutions (11 exercises), measured a peak Pss of 520 to 728 MB over three runs (basic and strict); rounded up.
GRADER_OWN_MEMORY_MB = 1024
# Each exercise's child and the judging server run one thread each, at the same time; an exercise's timeout_s is
# wall-clock time, so below one vCPU its code gets only that share of it in CPU time.
GRADER_CPUS = 1.0


@dataclass(frozen=True)
class Hardware:
    """An autograder's memory, timeout and CPUs: what a course needs, or a Gradescope setting."""

    memory_mb: int
    timeout_min: int
    cpus: float

    def short(self) -> str:
        return f"{self.memory_mb} MB, {self.timeout_min} minutes, {self.cpus:g} vCPU"


def needs(course: Course) -> tuple[Hardware, list[str]]:
    """What one submission's grading can take under course.toml's limits, and how each figure is made: every
    exercise may use its memory_mb while the judge uses its own on the exercise before; the exercises run one after
    another, each until its timeout_s, after the worker's start-up (importing torch)."""
    from grader.sandbox.supervisor import STARTUP_SECONDS

    largest = max((ex.limits.memory_mb for ex in course.exercises), default=0)
    memory = GRADER_OWN_MEMORY_MB + largest + course.judge_limits.memory_mb
    seconds = STARTUP_SECONDS + sum(ex.limits.timeout_s for ex in course.exercises)
    made = [f"memory: {memory} MB = the grader with torch ({GRADER_OWN_MEMORY_MB} MB) + the largest exercise "
            f"memory_mb ({largest} MB) + [judge] memory_mb ({course.judge_limits.memory_mb} MB)",
            f"timeout: {math.ceil(seconds / 60)} minutes = start-up ({STARTUP_SECONDS:g} s) + the timeout_s of "
            f"{len(course.exercises)} exercises ({seconds - STARTUP_SECONDS:g} s), rounded up to a minute",
            f"CPU: {GRADER_CPUS:g} vCPU = one for the exercise running (timeout_s is wall-clock time; the judge's work "
            "overlaps it)"]
    return Hardware(memory, math.ceil(seconds / 60), GRADER_CPUS), made


def settings_text(course: Course) -> str:
    """The Autograder Settings the course needs, as `grader gradescope` prints them and the bundle's README.md
    opens with them."""
    needed, made = needs(course)
    return "\n".join([
        "## Gradescope Autograder Settings for this course",
        "",
        f"Choose at least {needed.short()} in the assignment's Autograder Settings (Gradescope's default is "
        f"{GRADESCOPE_DEFAULT_MEMORY_MB} MB, {GRADESCOPE_DEFAULT_TIMEOUT_MIN} minutes and "
        f"{GRADESCOPE_DEFAULT_CPUS:g} vCPU). Computed from course.toml:",
        "",
        *(f"- {line}" for line in made),
        "",
        "With less, a submission that uses what course.toml allows is killed by Gradescope before the grader's own "
        "limit stops it, and the student gets no results.",
        ""])


def shortfall(course: Course, chosen: Hardware) -> tuple[list[str], list[str]]:
    """What `chosen` gives less of than the course needs, one phrase each: memory and time (a grading past them is
    killed, and the student gets no results), then CPU (a grading below it is slower, and its code gets less CPU
    time within its wall-clock timeout_s)."""
    needed, _ = needs(course)
    fatal, slow = [], []
    if chosen.memory_mb < needed.memory_mb:
        fatal.append(f"{chosen.memory_mb} MB of memory where the course needs {needed.memory_mb} MB")
    if chosen.timeout_min < needed.timeout_min:
        fatal.append(f"{chosen.timeout_min} minutes where the course needs {needed.timeout_min}")
    if chosen.cpus < needed.cpus:
        slow.append(f"{chosen.cpus:g} vCPU where the course needs {needed.cpus:g}")
    return fatal, slow


class UnsafeToGrade(Exception):
    """Grading here would run student code with access to the hidden material; the message says why."""


def build_bundle(course: Course, out: Path, lang: str = "en") -> list[str]:
    """The zip Gradescope asks for: setup.sh and run_autograder at the top (grading in `lang`), the course
    beside them."""
    names = []
    out.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, text in (("setup.sh", SETUP_SH), ("run_autograder", RUN_AUTOGRADER % {"lang": lang})):
            info = zipfile.ZipInfo(name)
            info.external_attr = (stat.S_IFREG | 0o755) << 16
            zf.writestr(info, text)
            names.append(name)
        for top in BUNDLED:
            # the course's own parts from its folder; the grader's (its package, pyproject, scripts, and the report
            # templates of a course without its own) from the grader's checkout, where the course folder has none
            base = course.root if (course.root / top).exists() else TOOL_ROOT
            path = base / top
            if top == "README.md" and path.is_file():   # opened by whoever sets the assignment up: settings first
                zf.writestr(top, settings_text(course) + "\n" + path.read_text(encoding="utf-8"))
                names.append(top)
                continue
            files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
            for f in files:
                rel = f.relative_to(base)
                if "__pycache__" in rel.parts or f.suffix == ".pyc":
                    continue
                zf.write(f, rel.as_posix())
                names.append(rel.as_posix())
    return names


def gather_submission(course: Course, uploaded: Path, target: Path) -> list[Text]:
    """Lay an upload out like exercises/: students upload their folder, or just the files (the file names
    of the exercises are all different, so a flat upload maps without ambiguity). Only regular files are
    copied and no link is followed on the way; an exercise reached through a link is handed to staging as a
    link, which makes it an error. Returns what the student should be told about the upload."""
    for ex in course.exercises:
        found = _find_in_upload(uploaded, ex.id, ex.file)
        if found.kind not in (REGULAR, LINK):
            continue
        (target / ex.id).mkdir(parents=True, exist_ok=True)
        if found.kind == LINK:
            os.symlink(LINK_STAND_IN, target / ex.id / ex.file)
        else:
            (target / ex.id / ex.file).write_bytes(found.data)
    links = links_under(uploaded)
    if not links:
        return []
    # terminal_text: a name is the student's choice, and may hold a newline or bytes that are not UTF-8
    return [t("Symbolic links in your upload are never followed (submit plain files): {links}",
              links=verbatim(", ".join(terminal_text(link) for link in links)))]


def _find_in_upload(uploaded: Path, exercise_id: str, filename: str) -> Lookup:
    for parts in ((exercise_id, filename), ("exercises", exercise_id, filename), (filename,)):
        found = read_without_links(uploaded, parts, MAX_UPLOADED_FILE_BYTES)
        if found.kind in (REGULAR, LINK):
            return found
    matches = [os.path.relpath(os.path.join(folder, filename), uploaded)
               for folder, _, files in os.walk(uploaded) if filename in files]  # os.walk enters no link
    if len(matches) != 1:
        return Lookup("absent")
    return read_without_links(uploaded, matches[0].split(os.sep), MAX_UPLOADED_FILE_BYTES)


def gradescope_sandbox():
    """Strict where the container allows namespaces; otherwise basic, which as root must still run student code
    under a uid of its own (the hidden files are root-only, see SETUP_SH): never as root."""
    from grader.sandbox.levels import choose, strict_missing

    sandbox = choose("basic" if strict_missing() else "strict")
    if os.geteuid() == 0 and not sandbox.layers.get("own_uid"):
        raise UnsafeToGrade(f"the {sandbox.level} sandbox would run student code as root, which can read the "
                            "solutions and the hidden criteria")
    return sandbox


METADATA = "submission_metadata.json"


def late_work(course: Course, report, root: Path) -> list[Text]:
    """Under course.toml's [policy], the report's grade with the lateness Gradescope's submission_metadata.json says
    (grader.policy.gradescope_lateness): its score then is the final grade. What the student should be told when
    the file cannot be read (no penalty is taken)."""
    import json

    from grader.batch.grades import grade_of
    from grader.policy import gradescope_lateness, load_policy

    policy = load_policy(course)
    if policy is None:
        return []
    try:
        metadata = json.loads((root / METADATA).read_text(encoding="utf-8"))
        late = gradescope_lateness(policy, metadata)
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        return [t("The submission time could not be read from {file} ({error}): no late penalty applied.",
                  file=METADATA, error=verbatim(f"{type(exc).__name__}: {exc}"))]
    if late is None:
        return []
    rows = [{"exercise": ex.id, "criterion": c.id, "points": c.points, "max_points": c.max_points}
            for ex in report.exercises for c in ex.criteria]
    report.grade = grade_of(course, rows, (), late).record()
    return []


def run_in_gradescope(course: Course, root: Path, lang: str = "en") -> Path:
    from grader.grading.pipeline import cache_root, grade
    from grader.render.exports import render_gradescope
    from grader.render.files import write_atomic, write_reports

    results = root / "results"
    sandbox = gradescope_sandbox()
    # The reference observations give the expected answers away: root-only, like the solutions.
    cache_root().mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(cache_root(), 0o700)
    with tempfile.TemporaryDirectory(prefix="gradescope-") as tmp:
        submission = Path(tmp) / "submission"
        submission.mkdir()
        notes = gather_submission(course, root / "submission", submission)
        report = grade(course, submission, [e.id for e in course.exercises], sandbox)
    notes += late_work(course, report, root)
    write_reports(report, results, course.templates, lang, ("json", "html"))

    # the course's feedback policy (grader.feedback), which Gradescope applies: its `visibility` values are ours
    write_atomic(results / "results.json", render_gradescope(report, lang, partial(visibility, course), notes))
    os.chmod(results, 0o755)
    for line in instructor_lines(report.sandbox, lang):
        print(line)
    return results / "results.json"


def instructor_lines(sandbox: dict, lang: str = "en") -> list[str]:
    """What the instructor should know of the sandbox a submission was graded in: its level, why it is not
    stricter, and the layers it lacked. For the autograder's stdout only, which results.json keeps hidden from
    students (`stdout_visibility`): it says what student code could reach, so the students' output names the level
    alone."""
    lines = [t("Sandbox: {level}", level=verbatim(sandbox["level"])).render(lang)]
    if sandbox.get("note"):   # the sandbox's own words (grader.sandbox.levels): English
        lines.append(t("Sandbox note: {note}", note=verbatim(sandbox["note"])).render(lang))
    missing = [name for name, present in sandbox.get("layers", {}).items() if not present]
    if missing:
        lines.append(t("Sandbox layers missing here: {layers}", layers=verbatim(", ".join(missing))).render(lang))
    return lines
