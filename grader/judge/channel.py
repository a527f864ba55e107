"""What passes between a grading and its judging server (`grader/judge/server.py`): the keys of every message,
defined once, and how criteria and outcomes travel as JSON.

    grading -> server (stdin, a line each)   {"id", "exercises": [exercise...], "known": [outcome...]}
                                             {"id", "kill": true} for a child past its time
                                             {"id", "prepare": true, "exercises": [...]}: read their references
                                             and run their criteria once on them, ahead of a request (no reply)
    server -> grading (stdout, a line each)  {"id": "hello", "criteria": {exercise: [criterion...]}, "missing": {...}}
                                             {"id", "pid"} once the child judging a request is forked
                                             {"id", "exit", "cpu_s", "result"} once it has ended (exit < 0: killed
                                             by signal -exit; result: the lines the child wrote, as text)
    child -> its result file (a line each)   {"begin": [exercise, criterion]}, {"outcome": outcome},
                                             {"done": true}, or {"fault": traceback} (the judge's own failure)

An exercise of a request names its file, probes, observation folder, run summary, staged status and reference
folder; an outcome its exercise, criterion, status, message, evidence and, when blocked, the criterion at the root
of the chain (so that a child started after another's death says the same).
"""

from __future__ import annotations

from dataclasses import asdict

from grader.judge.criterion import CriterionMeta, Outcome

ID, HELLO, CRITERIA, MISSING, PID, EXIT, CPU_S = "id", "hello", "criteria", "missing", "pid", "exit", "cpu_s"
RESULT, EXERCISES, KNOWN, KILL, PREPARE = "result", "exercises", "known", "kill", "prepare"
BEGIN, OUTCOME, DONE, FAULT = "begin", "outcome", "done", "fault"
MAX_RESULT_BYTES = 32 << 20     # a child's result file: every criterion's outcome with evidence to spare
MAX_OUTCOME_BYTES = 256 << 10   # one outcome; a larger one keeps its verdict and drops its evidence


def meta_to_json(meta: CriterionMeta) -> dict:
    return asdict(meta)


def meta_from_json(data: dict) -> CriterionMeta:
    return CriterionMeta(data["id"], data["kind"], data["title"], data["hint"], tuple(data["requires"]))


def outcome_to_json(exercise: str, outcome: Outcome, blocked_by: str | None = None) -> dict:
    return {"exercise": exercise, "criterion": outcome.meta.id, "status": outcome.status, "message": outcome.message,
            "evidence": outcome.evidence, "hint": outcome.hint, "blocked_by": blocked_by, "partial": outcome.partial}


def outcome_from_json(data: dict, meta: CriterionMeta) -> Outcome:
    return Outcome(meta, data["status"], data["message"], data["evidence"], data.get("hint"), data.get("partial"))
