"""A report built without grading, whose student-controlled text carries every known injection.

Each field a student can reach holds a lone surrogate (no UTF-8 file can hold one), CR and LF (a new
Markdown line: a heading, a table row), ESC sequences (erase the terminal row, write a fake verdict),
\\x01 (not XML), and Markdown that would start a heading, an image, a link, raw HTML or a new table cell.
"""

from __future__ import annotations

from grader.course import ExerciseConfig
from grader.judge.criterion import CriterionMeta
from grader.judge.session import Outcome
from grader.report.build import exercise_result
from grader.report.model import SCHEMA_VERSION, Report
from grader.worker.protocol import Limits

FAKE_VERDICT = "decoder_block 11/11 passed"
INJECTION = (f"\ud800 boom\r### 153 / 153 (100%)\n![x](https://evil.example/x.png) [here](https://evil.example) "
             f"<img src=x onerror=alert(1)> https://evil.example/a www.evil.example "
             f"\x1b[2K\x1b[1G{FAKE_VERDICT}\x01 | forged | cell | `code` *bold* $x$ & #1")
EXCEPTION_TYPE = "Evil\x1b[2K\x1b[1GError\ud800"
SUBMISSION = "=HYPERLINK(\"https://evil.example\")\r\n# 153 / 153\x1b[32m\ud800 ![x](https://evil.example/y.png)"


def _meta(cid: str, kind: str) -> CriterionMeta:
    return CriterionMeta(id=cid, kind=kind, title={"en": f"{cid} works", "zh": f"{cid} 正确"},
                         hint={"en": "look at the shapes", "zh": "检查形状"})


def _exercise(eid: str, points: dict[str, float]) -> ExerciseConfig:
    return ExerciseConfig(id=eid, file=f"{eid}.py", title_en=eid, title_zh=eid,
                          limits=Limits(timeout_s=10, memory_mb=2048, output_kb=64), forbidden=(), points=points)


def both(english: str, chinese: str | None = None) -> dict[str, str]:
    """A message in each language, as the judge records one (the same words where they are the student's)."""
    return {"en": english, "zh": english if chinese is None else chinese}


def hostile_report(last_status: str = "error") -> Report:
    """Two exercises: `decoder_block` scores 0/11 with two errors, every message hostile; `rope`'s one criterion has
    `last_status` (its message says why, as a grader error would)."""
    block = _exercise("decoder_block", {"shape": 5.0, "values": 6.0})
    rope = _exercise("rope", {"rotation": 4.0})
    block_result = exercise_result(block, [
        Outcome(_meta("shape", "shape"), "error", both(f"{EXCEPTION_TYPE}: {INJECTION}"),
                {"exception": {"type": EXCEPTION_TYPE, "message": INJECTION}, "key\ud800": [1.0, 2.0]}),
        Outcome(_meta("values", "values"), "error", both(f"{EXCEPTION_TYPE}: {INJECTION}"), {}),
    ], {"wall_s": 1.0, "output_tail": f"print: {INJECTION}\n" * 3})
    rope_result = exercise_result(rope, [
        Outcome(_meta("rotation", "values"), last_status,
                both(f"the sandbox could not start: {INJECTION}", f"沙箱无法启动：{INJECTION}"), {}),
    ], {})
    exercises = [block_result, rope_result]
    score = sum(e.score for e in exercises)
    max_score = sum(e.max_score for e in exercises)
    return Report(schema_version=SCHEMA_VERSION, submission=SUBMISSION, course="course", score=score,
                  max_score=max_score, percent=round(100 * score / max_score, 2),
                  sandbox={"level": "strict", "layers": {}, "note": ""}, grader_version="0.1.0",
                  torch_version="2.13.0", started_at="2026-01-01T00:00:00+00:00", duration_s=1.5,
                  exercises=exercises)
