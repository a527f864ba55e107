"""Turn whole-file mutants (solutions/<exercise>/mutants/<bug>/<file>) into diffs against the solutions.

    python scripts/mutants_to_diffs.py [CATALOG]     (default: solutions/ of this checkout)

For each mutant folder that still holds a copy of the student file, writes change.diff (a unified diff from
solutions/<exercise>/<file> to the copy), checks that applying it to the solution gives the copy back byte for
byte, and only then removes the copy. A copy identical to the solution (no bug) or one whose diff does not
reproduce it is left as it is and reported; the exit status is 1 when any was. Folders already converted are
left alone, so it can be rerun after merging a branch that added whole-file mutants.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from grader.course import load_course  # noqa: E402
from grader.review.selftest import MUTANT_DIFF  # noqa: E402
from grader.review.unidiff import apply_diff, make_diff  # noqa: E402


def convert(catalog: Path) -> tuple[list[Path], list[str]]:
    """(the folders converted, what could not be)."""
    course = load_course(ROOT)
    converted, refused = [], []
    for ex in course.exercises:
        solution_path = course.solution(ex)
        solution = solution_path.read_bytes().decode("utf-8")
        for folder in sorted((catalog / ex.id / "mutants").glob("*/")):
            copy = folder / ex.file
            if not copy.is_file():
                continue
            mutant = copy.read_bytes().decode("utf-8")
            others = sorted(p.name for p in folder.glob("*.py") if p.name != ex.file)
            if others:
                refused.append(f"{folder}: files other than {ex.file} ({', '.join(others)}); convert it by hand")
                continue
            if mutant == solution:
                refused.append(f"{copy} is the solution itself: it has no bug to keep")
                continue
            diff = make_diff(solution, mutant, f"a/solutions/{ex.id}/{ex.file}", f"b/solutions/{ex.id}/{ex.file}")
            if apply_diff(solution, diff).encode("utf-8") != mutant.encode("utf-8"):
                refused.append(f"{copy}: its diff does not reproduce it byte for byte; left as it is")
                continue
            (folder / MUTANT_DIFF).write_bytes(diff.encode("utf-8"))
            copy.unlink()
            converted.append(folder)
    return converted, refused


def main() -> int:
    catalog = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "solutions"
    converted, refused = convert(catalog)
    for folder in converted:
        print(f"converted {folder}")
    for why in refused:
        print(f"not converted: {why}", file=sys.stderr)
    print(f"{len(converted)} mutants converted, {len(refused)} not")
    return 1 if refused else 0


if __name__ == "__main__":
    sys.exit(main())
