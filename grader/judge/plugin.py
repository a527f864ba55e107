"""The pytest plugin of the judge: fixtures for observations, and the hook that turns outcomes into statuses."""

from __future__ import annotations

import traceback

import pytest

from grader.i18n import Text, t, verbatim
from grader.judge.criterion import VerdictRecorder
from grader.judge.jsonable import jsonable
from grader.judge.observations import Observations
from grader.judge.verdicts import Blocked, GraderFault, ImportFailed, NotAttempted, Verdict

VERDICT_KEY = pytest.StashKey[VerdictRecorder]()


class JudgePlugin:
    def __init__(self, observations: dict[str, Observations], references: dict[str, Observations]):
        self.observations = observations
        self.references = references
        self.statuses: dict[tuple[str, str], str] = {}
        self.messages: dict[tuple[str, str], Text] = {}   # what each criterion said: a blocked one repeats it
        self.blocked_by: dict[tuple[str, str], str] = {}  # a blocked criterion -> the unpassed one at the chain's root
        # exercise -> the criterion that reported its file's import error, and the hint it gave
        self.import_reported: dict[str, tuple[str, Text | None]] = {}

    @pytest.fixture
    def obs(self, request) -> Observations:
        return self.observations[request.module.EXERCISE]

    @pytest.fixture
    def ref(self, request) -> Observations:
        return self.references[request.module.EXERCISE]

    @pytest.fixture
    def verdict(self, request) -> VerdictRecorder:
        meta = request.function.criterion
        exercise = request.module.EXERCISE
        if exercise in self.import_reported:
            raise self._blocked_on_import(exercise)
        unmet = [r for r in meta.requires if self.statuses.get((exercise, r)) != "passed"]
        if unmet:
            if self.statuses.get((exercise, unmet[0])) == "not_attempted":
                raise NotAttempted(t("not attempted: it needs `{needed}`, which is not attempted yet", needed=unmet[0]))
            if self.statuses.get((exercise, unmet[0])) == "grader_error":
                raise GraderFault(t("not judged: it needs `{needed}`, which the grader failed to run", needed=unmet[0]))
            # a chain of blocked criteria names the one at its root: that is what to fix first
            root = self.blocked_by.get((exercise, unmet[0]), unmet[0])
            self.blocked_by[(exercise, meta.id)] = root
            said = self.messages.get((exercise, root))
            raise Blocked(t("not judged until `{root}` passes; fix that first ({said})", root=root, said=said) if said
                          else t("not judged until `{root}` passes; fix that first", root=root))
        recorder = VerdictRecorder()
        request.node.stash[VERDICT_KEY] = recorder
        return recorder

    def _blocked_on_import(self, exercise: str) -> Blocked:
        """What every criterion after the first says of a file that does not import: the error is said once."""
        first, hint = self.import_reported[exercise]
        blocked = Blocked(t("not judged: the file does not import (the error is reported under `{first}`)",
                            first=first))
        blocked.hint = hint
        return blocked

    def pytest_json_runtest_metadata(self, item, call):
        """Attach the criterion's outcome to pytest-json-report's record of the test."""
        meta = getattr(getattr(item, "function", None), "criterion", None)
        if meta is None or call.when == "teardown" or (call.when == "setup" and call.excinfo is None):
            return {}
        recorder = item.stash.get(VERDICT_KEY, VerdictRecorder())
        exc = call.excinfo.value if call.excinfo is not None else None
        if exc is None and not self.observations[item.module.EXERCISE].returned_a_result():
            # a criterion met by raising alone (an error asked for, a forbidden call never made) earns nothing
            status, message, evidence = "not_attempted", t(
                "not judged: no function of this exercise returned a result (every call raised), and this "
                "criterion is met by raising alone"), {}
        elif exc is None and not recorder.met:
            status, message, evidence = "grader_error", t(
                "the criterion ended without a verdict (it never called verdict.ok): this is the grader's fault, "
                "no point is taken for it; please report it"), recorder.evidence
        elif exc is None:
            status, message, evidence = "passed", recorder.message, recorder.evidence
        elif isinstance(exc, ImportFailed) and item.module.EXERCISE in self.import_reported:
            exc = self._blocked_on_import(item.module.EXERCISE)   # said once, by the exercise's first criterion
            status, message, evidence = exc.status, exc.message, {}
        elif isinstance(exc, Verdict):
            status, message, evidence = exc.status, exc.message, {**recorder.evidence, **exc.evidence}
            if isinstance(exc, ImportFailed):
                self.import_reported[item.module.EXERCISE] = (meta.id, exc.hint)
        else:
            frames = traceback.format_exception(type(exc), exc, exc.__traceback__, limit=-3)
            status = "grader_error"
            message = t("the grader could not judge this criterion ({error}); this is the grader's fault, no point "
                        "is taken for it: please report it", error=verbatim(f"{type(exc).__name__}: {exc}"))
            evidence = {"grader_traceback": "".join(frames)[-1500:]}
        self.statuses[(item.module.EXERCISE, meta.id)] = status
        self.messages[(item.module.EXERCISE, meta.id)] = message
        said = {"criterion": meta.id, "status": status, "message": message.texts(), "evidence": jsonable(evidence)}
        if isinstance(exc, Verdict) and exc.hint is not None:
            said["hint"] = exc.hint.texts()
        return said
