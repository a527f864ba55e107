"""A class like one an instructor meets in the first week, for tests/test_class_view.py and scripts/screenshots.py:
six entries and a roster of seven.

- `sample`: the bundled sample submission, partly wrong, checkpoint not started (matched by email);
- `sol_ution`: the reference solutions, full marks (by name);
- `stubs`: the handout untouched, every exercise the stub (by email);
- `li_si.zip` and `张三`: the same files, byte for byte (a zip and a folder named in Chinese): embedding right, heads
  a syntax error (tried, no point), masks with the causal mask reversed (some points), the rest not started;
- `sun_ba.zip`: not a zip at all;
- Wang Wu, on the roster, submitted nothing.
"""

from __future__ import annotations

import shutil
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = ROOT / "examples" / "submissions" / "sample"

ROSTER = ("id,name,email\n"
          "2024001,Sam Ple,sample@uni.edu\n"
          "2024002,Sol Ution,sol@uni.edu\n"
          "2024003,Stu Bbs,stubs@uni.edu\n"
          "2024004,Li Si,li_si@uni.edu\n"
          "2024005,Sun Ba,sun_ba@uni.edu\n"
          "2024006,张三,zhangsan@uni.edu\n"
          "2024007,Wang Wu,wangwu@uni.edu\n")
# what each entry is, for the tests to say what they expect of it
IDENTICAL = ("li_si.zip", "张三")
BROKEN_ZIP = "sun_ba.zip"
SYNTAX_ERROR = "import torch\n\n\ndef split_heads(x, n_heads:\n    return x\n"


def _copy(course, source_of, folder: Path) -> None:
    for ex in course.exercises:
        source = source_of(ex)
        if source is not None:
            (folder / ex.id).mkdir(parents=True, exist_ok=True)
            (folder / ex.id / ex.file).write_bytes(source)


def partly_done(course) -> dict[str, bytes]:
    """exercise id -> the file li_si and 张三 hand in."""
    masks = course.solution(course.exercise("masks")).read_text(encoding="utf-8")
    assert ".tril()" in masks, "the masks solution must build its causal mask with .tril()"
    return {"embedding": course.solution(course.exercise("embedding")).read_bytes(),
            "heads": SYNTAX_ERROR.encode(), "masks": masks.replace(".tril()", ".triu()").encode()}


def build_class(course, folder: Path) -> tuple[Path, Path]:
    """Write the class into `folder`: (the class folder, the roster CSV)."""
    room = folder / "class"
    room.mkdir(parents=True)
    shutil.copytree(SAMPLE, room / "sample")
    _copy(course, lambda ex: course.solution(ex).read_bytes(), room / "sol_ution")
    _copy(course, lambda ex: course.stub(ex).read_bytes(), room / "stubs")
    done = partly_done(course)
    _copy(course, lambda ex: done.get(ex.id), room / "张三")
    with zipfile.ZipFile(room / "li_si.zip", "w") as zf:   # zipped as students do: their folder inside
        for ex_id, data in done.items():
            zf.writestr(f"li_si/{ex_id}/{course.exercise(ex_id).file}", data)
    (room / BROKEN_ZIP).write_bytes(b"PK\x03\x04 this is not a zip archive\n")
    roster = folder / "roster.csv"
    roster.write_text(ROSTER, encoding="utf-8")
    return room, roster
