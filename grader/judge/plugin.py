"""The judge's pytest plugin: the fixtures criteria take (`obs`, `ref`, `verdict`), and its own report hook.

Theory of operation. Each criterion is a pytest test. One submission's judging is a `Judging`, kept in the
config's stash under `JUDGING` (as pytest's junitxml keeps its LogXML under `xml_key`); a criterion's verdict
recorder is kept in its item's stash under `VERDICT`. The plugin's `pytest_runtest_makereport` wrapper sees how
each criterion ended (its call, or a setup that raised because a criterion it requires did not pass), makes
one `Outcome` of it and records it in the Judging, which hands it on (`on_outcome`: the judging server writes it
out as it comes). Nothing is read back from pytest's own reports, so the plugin makes them itself, lean
(`pytest_runtest_makereport_lean`: no failure's traceback formatted). The same plugin serves a session made for
one submission (`session.judge`) and the judging server's session, which judges submission after submission
with a fresh Judging each time (`grader/judge/server.py`).
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Literal, cast

import pytest

from grader.i18n import Text, rendered, t, verbatim
from grader.judge.criterion import CriterionMeta, Outcome, VerdictRecorder
from grader.judge.jsonable import jsonable
from grader.judge.limits import JudgeLimit, JudgeLimits, LimitExceeded, exceeded_message
from grader.judge.observations import Observations, out_of_memory
from grader.judge.verdicts import Blocked, GraderFault, ImportFailed, NotAttempted, Verdict
from grader.worker.protocol import Status


@dataclass
class Judging:
    """One submission's judging: its observations, the references, and how each criterion ended so far."""

    observations: Mapping[str, Observations]
    references: Mapping[str, Observations]
    limits: JudgeLimits | None = None        # what the process judging it may use (None: not limited)
    on_outcome: Callable[[str, Outcome], None] = lambda exercise, outcome: None
    outcomes: dict[tuple[str, str], Outcome] = field(default_factory=dict)   # (exercise, criterion) -> outcome
    blocked_by: dict[tuple[str, str], str] = field(default_factory=dict)    # a blocked criterion -> the chain's root
    # exercise -> the criterion that reported its file's import error, and the hint it gave
    import_reported: dict[str, tuple[str, Text | None]] = field(default_factory=dict)

    def record(self, exercise: str, outcome: Outcome) -> None:
        self.outcomes[(exercise, outcome.meta.id)] = outcome
        self.on_outcome(exercise, outcome)

    def status(self, exercise: str, criterion_id: str) -> str | None:
        done = self.outcomes.get((exercise, criterion_id))
        return done.status if done else None


JUDGING = pytest.StashKey[Judging]()
VERDICT = pytest.StashKey[VerdictRecorder]()


def criterion_of(item: pytest.Item) -> CriterionMeta | None:
    """The criterion a collected test is (None for any other test)."""
    return getattr(item.function, "criterion", None) if isinstance(item, pytest.Function) else None


def exercise_of(item: pytest.Function) -> str:
    """The exercise a criterion judges: its module's EXERCISE."""
    return item.module.EXERCISE


def blocked_on_import(judging: Judging, exercise: str) -> Blocked:
    """What every criterion after the first says of a file that does not import: the error is said once."""
    first, hint = judging.import_reported[exercise]
    blocked = Blocked(t("not judged: the file does not import (the error is reported under `{first}`)", first=first))
    blocked.hint = hint
    return blocked


def verdict_for(judging: Judging, exercise: str, meta: CriterionMeta) -> VerdictRecorder:
    """The `verdict` fixture's value: a fresh recorder, or the Verdict raised when the criterion is not judged (its
    file does not import, a criterion it requires did not pass)."""
    if exercise in judging.import_reported:
        raise blocked_on_import(judging, exercise)
    unmet = [r for r in meta.requires if judging.status(exercise, r) != Status.PASSED]
    if unmet:
        if judging.status(exercise, unmet[0]) == Status.NOT_ATTEMPTED:
            raise NotAttempted(t("not attempted: it needs `{needed}`, which is not attempted yet", needed=unmet[0]))
        if judging.status(exercise, unmet[0]) == Status.GRADER_ERROR:
            raise GraderFault(t("not judged: it needs `{needed}`, which the grader failed to run", needed=unmet[0]))
        # a chain of blocked criteria names the one at its root: that is what to fix first
        root = judging.blocked_by.get((exercise, unmet[0]), unmet[0])
        judging.blocked_by[(exercise, meta.id)] = root
        said = judging.outcomes.get((exercise, root))
        raise Blocked(t("not judged until `{root}` passes; fix that first ({said})", root=root,
                        said=rendered(said.message)) if said
                      else t("not judged until `{root}` passes; fix that first", root=root))
    return VerdictRecorder()


def record(item: pytest.Function, call: pytest.CallInfo, meta: CriterionMeta, judging: Judging) -> None:
    """Record how a criterion ended (its call, or a setup that raised), and forget its recorder: a criterion whose
    set-up raises in the next judging must not read this one's evidence."""
    judging.record(exercise_of(item), JudgePlugin._outcome(item, call, meta, judging))
    with contextlib.suppress(KeyError):
        del item.stash[VERDICT]
    if call.excinfo is not None and call.excinfo.tb is not None:
        # what the criterion held (a tensor too large, say) is freed before pytest formats its report
        traceback.clear_frames(call.excinfo.tb)


def partial_credit(status: str, fraction: float | None) -> float | None:
    """The share of its points a criterion keeps: only a failed one that set `verdict.fraction`, within 0 to 1 (NaN,
    or anything that is not a number, earns nothing)."""
    if status != Status.FAILED or fraction is None:
        return None
    try:
        share = float(fraction)
    except (TypeError, ValueError):
        return None
    return min(1.0, max(0.0, share)) if share == share else None


JUDGE_FIXTURES = frozenset({"obs", "ref", "verdict"})   # what the plugin's fixtures give a criterion


def runs_lean(item: pytest.Function) -> bool:
    """Whether `run_lean` may run the criterion: it takes the plugin's fixtures alone (which take pytest's
    `request`, that it is given nothing of) and carries no mark: nothing of pytest's set-up, skipping or teardown has
    anything to do for it."""
    return (set(_parameters(item.function)) <= JUDGE_FIXTURES and set(item.fixturenames) <= JUDGE_FIXTURES | {"request"}
            and next(item.iter_markers(), None) is None)


@functools.cache
def _parameters(function: Callable) -> tuple[str, ...]:
    """What a criterion takes, in order (read once, by the judging server before it forks)."""
    return tuple(inspect.signature(function).parameters)


def run_lean(item: pytest.Function, judging: Judging, timer: Callable[[], contextlib.AbstractContextManager]) -> None:
    """Run one criterion (`runs_lean`) as pytest's per-test protocol would, its fixtures given in the order it names
    them, its call under `timer`, its outcome recorded as the protocol's would be, with none of the protocol's
    hooks, reports or set-up state: those took more than most criteria themselves."""
    meta = criterion_of(item)
    assert meta is not None
    exercise = exercise_of(item)

    def fixtures() -> dict:
        given: dict = {}
        for name in _parameters(item.function):   # in the order named, as pytest sets them up
            if name == "verdict":
                given[name] = item.stash[VERDICT] = verdict_for(judging, exercise, meta)
            else:
                given[name] = (judging.observations if name == "obs" else judging.references)[exercise]
        return given

    reraise = (pytest.exit.Exception, KeyboardInterrupt)
    setup = pytest.CallInfo.from_call(fixtures, "setup", reraise=reraise)
    if setup.excinfo is not None:
        record(item, setup, meta, judging)
        return
    def timed_call() -> object:
        with timer():   # entered and left inside from_call: a limit reached as the timer is disarmed is caught too
            return item.obj(**setup.result)

    call = pytest.CallInfo.from_call(timed_call, "call", reraise=reraise)
    record(item, call, meta, judging)


class JudgePlugin:
    @pytest.fixture
    def obs(self, request) -> Observations:
        return request.config.stash[JUDGING].observations[request.module.EXERCISE]

    @pytest.fixture
    def ref(self, request) -> Observations:
        return request.config.stash[JUDGING].references[request.module.EXERCISE]

    @pytest.fixture
    def verdict(self, request) -> VerdictRecorder:
        recorder = verdict_for(request.config.stash[JUDGING], request.module.EXERCISE, request.function.criterion)
        request.node.stash[VERDICT] = recorder
        return recorder

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo):
        """Record the criterion's outcome once it has one: after its call, or after a setup that raised."""
        judging = item.config.stash.get(JUDGING, None)
        meta = criterion_of(item)
        if (judging is not None and meta is not None and isinstance(item, pytest.Function)
                and (call.when == "call" or (call.when == "setup" and call.excinfo is not None))):
            record(item, call, meta, judging)
        return (yield)

    @pytest.hookimpl(tryfirst=True, specname="pytest_runtest_makereport")
    def pytest_runtest_makereport_lean(self, item: pytest.Item, call: pytest.CallInfo) -> pytest.TestReport:
        """pytest's report of each phase of a criterion, without the failure's traceback formatted: nothing reads
        pytest's reports (the outcome is made of the call itself, above), and formatting a failed criterion's
        traceback (its module's source parsed again for every frame) took most of a failing submission's judging."""
        outcome: Literal["passed", "failed", "skipped"] = "passed"
        longrepr: tuple[str, int, str] | str | None = None
        if call.excinfo is not None and isinstance(call.excinfo.value, pytest.skip.Exception):
            outcome, longrepr = "skipped", (str(item.path), item.location[1] or 0, call.excinfo.typename)
        elif call.excinfo is not None:
            outcome, longrepr = "failed", call.excinfo.typename
        when = cast(Literal["setup", "call", "teardown"], call.when)   # a test's phases: never "collect"
        return pytest.TestReport(item.nodeid, item.location, {}, outcome, longrepr, when,
                                 duration=call.duration, start=call.start, stop=call.stop)

    @staticmethod
    def _outcome(item: pytest.Function, call: pytest.CallInfo, meta: CriterionMeta, judging: Judging) -> Outcome:
        recorder = item.stash.get(VERDICT, VerdictRecorder())
        exc = call.excinfo.value if call.excinfo is not None else None
        message: Text | None
        if exc is None and not judging.observations[exercise_of(item)].returned_a_result():
            # a criterion met by raising alone (an error asked for, a forbidden call never made) earns nothing
            status, message, evidence = Status.NOT_ATTEMPTED, t(
                "not judged: no function of this exercise returned a result (every call raised), and this "
                "criterion is met by raising alone"), {}
        elif exc is None and not recorder.met:
            status, message, evidence = Status.GRADER_ERROR, t(
                "the criterion ended without a verdict (it never called verdict.ok): this is the grader's fault, "
                "no point is taken for it; please report it"), recorder.evidence
        elif exc is None:
            status, message, evidence = Status.PASSED, recorder.message, recorder.evidence
        elif isinstance(exc, ImportFailed) and exercise_of(item) in judging.import_reported:
            exc = blocked_on_import(judging, exercise_of(item))   # said once, by the exercise's first criterion
            status, message, evidence = exc.status, exc.message, {}
        elif isinstance(exc, Verdict):
            status, message, evidence = exc.status, exc.message, {**recorder.evidence, **exc.evidence}
            if isinstance(exc, ImportFailed):
                judging.import_reported[exercise_of(item)] = (meta.id, exc.hint)
        elif isinstance(exc, LimitExceeded) or out_of_memory(exc):
            # judging this submission's data took more than the judge allows: that submission's failure alone
            limit = exc.limit if isinstance(exc, LimitExceeded) else JudgeLimit.MEMORY
            status, message, evidence = Status.ERROR, exceeded_message(limit, judging.limits), {"judge_limit": limit}
        else:
            frames = traceback.format_exception(type(exc), exc, exc.__traceback__, limit=-3)
            status = Status.GRADER_ERROR
            message = t("the grader could not judge this criterion ({error}); this is the grader's fault, no point "
                        "is taken for it: please report it", error=verbatim(f"{type(exc).__name__}: {exc}"))
            evidence = {"grader_traceback": "".join(frames)[-1500:]}
        said = message or t("the criterion ended without a verdict (it never called verdict.ok): this is the grader's "
                            "fault, no point is taken for it; please report it")
        hint = exc.hint.texts() if isinstance(exc, Verdict) and exc.hint is not None else None
        return Outcome(meta, status, said.texts(), jsonable(evidence), hint, partial_credit(status, recorder.fraction))
