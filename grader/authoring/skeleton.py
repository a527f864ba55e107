"""`grader new-exercise ID --course DIR`: a working exercise, written from the templates beside this module.

The skeleton is a tiny generic exercise, `double(x)` returning `2 * x`, complete in both halves of a course folder:
what students see (exercises/<id>/: the stub, README.md in both languages, a public test) and what only the grader
sees (solutions/<id>/: the reference, probes.py with one probe, criteria.py with one criterion, the Chinese of their
sentences, one mutant and one variant), with its [[exercise]] table in course.toml. As written it passes
`grader selftest`; the instructor then turns it into the exercise they mean. A folder that is new or empty becomes a
course first (course.toml).

The templates are plain files (templates/*.tmpl, `string.Template` placeholders such as `$id`): what the skeleton
says is edited there, as text, never assembled here.
"""

from __future__ import annotations

import importlib.util
import keyword
import re
import secrets
import shutil
import string
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from grader.course import COURSE_FILE, CRITERIA_FILE, MUTANTS, PROBES_FILE, VARIANTS, CourseError, load_course
from grader.review.selftest import MUTANT_DIFF
from grader.review.unidiff import PatchError, apply_diff

TEMPLATES = Path(__file__).resolve().parent / "templates"
# An id names the exercise's folders, its course.toml table and (as `<id>.py`) the module students write, which the
# sandbox and the public tests import by that name: lower-case letters, digits and underscores, a letter first.
ID_PATTERN = re.compile(r"[a-z][a-z0-9_]{0,39}")
MUTANT = "squares_instead"         # the skeleton's known bug, under solutions/<id>/mutants/
VARIANT = "float32_sum"            # the skeleton's correct alternative, under solutions/<id>/variants/
MANIFEST = "manifest.toml"
CATALOG = "zh.po"                  # the Chinese of the sentences of its probes and criteria, beside them


class SkeletonError(Exception):
    """The exercise cannot be written as asked: one sentence saying why, and nothing was written."""


@dataclass(frozen=True)
class Written:
    root: Path                     # the course folder
    new_course: bool               # whether course.toml was written too
    files: tuple[Path, ...]        # every file written, course.toml included


def check_id(exercise_id: str) -> None:
    """SkeletonError unless `exercise_id` can name an exercise and, as `<id>.py`, the module students write."""
    if not ID_PATTERN.fullmatch(exercise_id):
        raise SkeletonError(f"{exercise_id!r} is not an exercise id: use 1 to 40 lower-case letters, digits and "
                            "underscores, starting with a letter")
    if keyword.iskeyword(exercise_id) or keyword.issoftkeyword(exercise_id):
        raise SkeletonError(f"{exercise_id!r} is a Python keyword, and students import their module by the id")
    if f"{exercise_id}.py" in (PROBES_FILE, CRITERIA_FILE):
        raise SkeletonError(f"{exercise_id!r} would name the student's file {exercise_id}.py, the name of the "
                            f"grader's own file beside the solution")
    if exercise_id in sys.stdlib_module_names or importlib.util.find_spec(exercise_id) is not None:
        raise SkeletonError(f"{exercise_id!r} is the name of an installed Python module, which the student's "
                            f"{exercise_id}.py would hide (or be hidden by)")


def render(template: str, **values: str) -> str:
    return string.Template((TEMPLATES / f"{template}.tmpl").read_text(encoding="utf-8")).substitute(values)


def exercise_files(exercise_id: str, solutions: str = "solutions") -> dict[str, str]:
    """Path in the course folder -> content, for every file of the exercise (course.toml aside)."""
    file = f"{exercise_id}.py"
    values = {"id": exercise_id, "file": file, "module": exercise_id}
    mine, theirs = f"{solutions}/{exercise_id}", f"exercises/{exercise_id}"
    files = {
        f"{theirs}/{file}": render("stub.py", **values),
        f"{theirs}/README.md": render("README.md", **values),
        f"{theirs}/test_{exercise_id}.py": render("test_public.py", **values),
        f"{mine}/{file}": render("solution.py", **values),
        f"{mine}/{PROBES_FILE}": render("probes.py", **values),
        f"{mine}/{CRITERIA_FILE}": render("criteria.py", **values),
        f"{mine}/{CATALOG}": render("zh.po", **values),
        f"{mine}/{MUTANTS}/{MUTANT}/{MUTANT_DIFF}": render("change.diff", **values),
        f"{mine}/{MUTANTS}/{MUTANT}/{MANIFEST}": render("mutant.toml", **values),
        f"{mine}/{VARIANTS}/{VARIANT}/{file}": render("variant.py", **values),
        f"{mine}/{VARIANTS}/{VARIANT}/{MANIFEST}": render("variant.toml", **values),
    }
    solution = files[f"{mine}/{file}"]
    try:   # the templates are edited by hand: a mutant that no longer applies is caught here, not in a selftest
        buggy = apply_diff(solution, files[f"{mine}/{MUTANTS}/{MUTANT}/{MUTANT_DIFF}"])
    except PatchError as exc:
        raise AssertionError(f"the skeleton's mutant does not apply to its solution: {exc}") from None
    assert buggy != solution, "the skeleton's mutant changes nothing"
    return files


def course_config(root: Path) -> str:
    """course.toml of a new course named after its folder, with a seed of its own."""
    name = root.name or "course"
    quoted = '"' + name.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return render("course.toml", name=quoted, seed=str(secrets.randbelow(10**9)))


def new_exercise(root: Path, exercise_id: str) -> Written:
    """Write exercise `exercise_id` into the course folder `root` (making the course when the folder is new or
    empty). SkeletonError, with nothing written, when the id is invalid or taken or the folder is no course."""
    check_id(exercise_id)
    root = root.absolute()
    config = root / COURSE_FILE
    if root.exists() and not root.is_dir():
        raise SkeletonError(f"{root} is a file, not a course folder")
    new_course = not config.exists()
    if new_course and root.exists() and any(root.iterdir()):
        raise SkeletonError(f"{root} holds files but no {COURSE_FILE}: name a course folder, or a new or empty one")
    solutions = "solutions"
    if not new_course:
        try:
            course = load_course(root)
        except CourseError as exc:
            raise SkeletonError(f"the course cannot be read as it is: {exc}") from None
        if any(ex.id == exercise_id for ex in course.exercises):
            raise SkeletonError(f"exercise {exercise_id!r} exists already in {config}")
        solutions = course.solutions.relative_to(root).as_posix()
    files = exercise_files(exercise_id, solutions)
    tops = [root / "exercises" / exercise_id, root / solutions / exercise_id]   # every file lies in one of them
    taken = [top for top in tops if top.exists()]
    if taken:
        raise SkeletonError(f"{taken[0]} exists already: exercise {exercise_id!r} would overwrite it")
    before = None if new_course else config.read_bytes()   # restored byte for byte should anything fail
    made_root = not root.exists()
    root.mkdir(parents=True, exist_ok=True)
    placed: list[Path] = []
    try:
        staging = Path(tempfile.mkdtemp(prefix=".new-exercise-", dir=root))
        try:
            for path, text in files.items():
                target = staging / path
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(text, encoding="utf-8", newline="\n")   # the same files on every system
            for top in tops:   # whole folders moved into place, so that a failure leaves no half-written exercise
                top.parent.mkdir(parents=True, exist_ok=True)
                (staging / top.relative_to(root)).rename(top)
                placed.append(top)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        entry = render("exercise.toml", id=exercise_id, file=f"{exercise_id}.py")
        if before is None:
            config.write_text(course_config(root) + entry, encoding="utf-8", newline="\n")
        else:   # appended in the file's own line ends, the instructor's text left as it is
            end = b"\r\n" if b"\r\n" in before else b"\n"
            config.write_bytes(before + (b"" if before.endswith(b"\n") or not before else end)
                               + entry.encode("utf-8").replace(b"\n", end))
        try:
            load_course(root).exercise(exercise_id)
        except CourseError as exc:
            raise SkeletonError(f"{config} does not read back with the new exercise ({exc}); it was left as it "
                                "was") from None
    except BaseException:
        for top in placed:
            shutil.rmtree(top, ignore_errors=True)
        if before is not None:
            config.write_bytes(before)
        elif made_root:
            shutil.rmtree(root, ignore_errors=True)
        else:   # the folder was empty: it is again
            config.unlink(missing_ok=True)
            for top in tops:
                for folder in (top, top.parent):
                    if folder.is_dir() and not any(folder.iterdir()):
                        folder.rmdir()
        raise
    return Written(root, new_course, (config, *(root / path for path in files)))
