"""What a grading's reply becomes in the gradebook: a summary and one row per criterion, whatever happened.

Both batch engines (the warm pool here, Dask past this machine) get the same reply from a warm grading process:
the report's files, or the reason there are none. The client alone turns it into rows and writes the files.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

from grader.course import Course
from grader.i18n import Text, join, rendered, t
from grader.batch.gradebook import GRADER_ERROR
from grader.render.files import write_atomic
from grader.worker.protocol import Status



def now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


# In a reply: the report folder its producer has written the report's files to already (the reply's files are
# then only read).
WRITTEN_TO = "written_to"
# In a reply whose files are written already: the summary and rows its producer made of the report (`report_rows`),
# so that the batch's own process need not read report.json back.
ROWS = "rows"


def reply_rows(course: Course, reply: dict, report_dir: Path, graded_at: str) -> tuple[dict, list[dict]]:
    """Write the reply's report files to `report_dir` (unless its producer wrote them there: WRITTEN_TO) and return
    the submission's summary and rows; a reply without a readable report is a `grader_error`."""
    written = reply.get(WRITTEN_TO) == str(report_dir)
    if written and ROWS in reply:   # its producer made them of the report it held (a re-judging's report process)
        summary, rows = reply[ROWS]
        return {**summary, "graded_at": graded_at}, rows
    if not written:   # a report left by an earlier run must not be read as this one's (a producer removed it)
        (report_dir / "report.json").unlink(missing_ok=True)
    if reply.get("final_status"):   # a verdict the engine reached without a report (a worker-killing grading)
        return failure_rows(course, reply["final_status"], rendered(reply["error"]), graded_at)
    files = reply.get("files") or {}
    report = _parsed_report(files.get("report.json"))
    if report is None:
        reason = rendered(reply["error"]) if reply.get("error") else t("no report came back")
        return failure_rows(course, GRADER_ERROR, t("grading failed: {reason}; graded again on the next run",
                                                    reason=reason), graded_at)
    for name, text in files.items() if not written else ():
        write_atomic(report_dir / Path(name).name, text)
    return report_rows(report, report_dir, graded_at)


def report_rows(report: dict, report_dir: Path, graded_at: str) -> tuple[dict, list[dict]]:
    """A report's summary and rows (report.json's data), its files in `report_dir`: what reply_rows makes of a reply,
    for a producer that holds the report already (a re-judging's report process)."""
    rows = [{"exercise": e["id"], "criterion": c["id"], "kind": c["kind"], "status": c["status"],
             "points": c["points"], "max_points": c["max_points"], "message": c["message"]}
            for e in report["exercises"] for c in e["criteria"]]
    faults = [e for e in report["exercises"] if e["status"] == GRADER_ERROR]
    if faults:
        status = GRADER_ERROR
        where = join((t("{exercise} ({said})", exercise=e["id"], said=rendered(e["message"])) for e in faults),
                     t(", "))
        message = t("the grader failed on {where}; graded again on the next run", where=where).texts()
    else:
        status = Status.PASSED if {e["status"] for e in report["exercises"]} == {Status.PASSED} else "graded"
        message = t("{passed} of {total} criteria passed", passed=sum(r["status"] == Status.PASSED for r in rows),
                    total=len(rows)).texts()
    summary = {"score": report["score"], "max_score": report["max_score"], "percent": report["percent"],
               "status": status, "message": message, "report_dir": str(report_dir), "graded_at": graded_at,
               "sandbox": (report.get("sandbox") or {}).get("level")}
    return summary, rows


def _parsed_report(text: str | None) -> dict | None:
    try:
        report = json.loads(text) if text else None
    except ValueError:
        return None
    return report if isinstance(report, dict) and "exercises" in report else None


def failure_rows(course: Course, status: str, said: Text, graded_at: str) -> tuple[dict, list[dict]]:
    """A submission that could not be graded still gets every row: no points, the reason. Its criteria are
    `error` when the submission is at fault, `grader_error` when the grader is."""
    from grader.judge.listing import criteria_of

    criterion_status = Status.GRADER_ERROR if status == GRADER_ERROR else Status.ERROR
    message = said.texts()
    rows = [{"exercise": ex.id, "criterion": meta.id, "kind": meta.kind, "status": criterion_status, "points": 0.0,
             "max_points": ex.points.get(meta.id, 0.0), "message": message}
            for ex in course.exercises for meta in criteria_of(ex.id, course.solutions)]
    max_score = sum(r["max_points"] for r in rows)
    return {"score": 0.0, "max_score": max_score, "percent": 0.0, "status": status, "message": message,
            "report_dir": None, "graded_at": graded_at, "sandbox": None}, rows
