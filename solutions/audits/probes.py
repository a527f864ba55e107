"""Probes of exercise `audits` (audits.py): each audit run on every entry its model process serves.

No model of the course's is in this process. The grader's model process (grader/models) serves, per audit, correct
entries and broken ones in an order it draws from the grading's seed; this probe opens each in turn, hands the audit
its handle (for audit_gradients also tokens and targets drawn from the probe's seed) and records, per served index,
how the call ended: `returned`, `assertion` (an AssertionError: the audit rejected it), `crashed` (any other exception,
by its builtin type's name only), `timeout` (past CALL_LIMIT_S) or `skipped` (after a timeout, the audit's other
entries are not tried: one hanging audit costs that audit, not the exercise). Which index was which entry is for the
judge to say (it recomputes the order); nothing of what the audit said (its messages, its own exception classes) is
recorded, so nothing learnt inside the sandbox reaches a report through this record.
"""

import builtins
import signal

import torch

from grader.models.handles import ModelError, connection
from grader.worker.probe import ContractBreach, is_stub_raise, probe

AUDITS = ("causality", "targets", "registration", "gradients", "resume")
# One audit on one entry: past it the call is stopped and the audit's other entries skipped. A correct audit takes
# about 1 s on the slowest entry (a trainer, 3 runs) on a quiet machine: 30 s keeps its verdict the same on a busy one,
# and five audits that each hang still end within the exercise's 180 s.
CALL_LIMIT_S = 30.0
REPEAT_S = 0.25          # the stop is raised again this often while the audit goes on catching it
BATCH, MAX_T = 2, 8      # audit_gradients' tokens and targets: [BATCH, min(MAX_T, block_size)]


class AuditTimeout(BaseException):
    """Raised into an audit that ran past CALL_LIMIT_S."""


def ended(call, student_file: str) -> dict:
    """How one audit call ended; the alarm stops a call past CALL_LIMIT_S, and keeps stopping it while it catches."""
    expired = False

    def stop(signum, frame):
        nonlocal expired
        expired = True
        raise AuditTimeout()

    previous = signal.signal(signal.SIGALRM, stop)
    try:
        signal.setitimer(signal.ITIMER_REAL, CALL_LIMIT_S, REPEAT_S)
        try:
            try:
                call()
                outcome = {"returned": True}
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
        except AuditTimeout:
            outcome = {"timeout": CALL_LIMIT_S}
        except AssertionError:
            outcome = {"assertion": True}
        except ModelError:
            outcome = {"crashed": "RuntimeError", "model_call": True}
        except NotImplementedError as exc:
            if is_stub_raise(exc, student_file):
                raise   # the stub's marker: the exercise is not attempted
            outcome = {"crashed": "NotImplementedError"}
        except BaseException as exc:  # noqa: BLE001 - any other exception is the audit crashing on this entry
            outcome = {"crashed": builtin_name(exc)}
    except AuditTimeout:   # the stop came as the call ended, before the timer was disarmed
        outcome = {"timeout": CALL_LIMIT_S}
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    if expired:
        outcome = {"timeout": CALL_LIMIT_S}
    return outcome


def builtin_name(exc: BaseException) -> str:
    """The exception's type as a report may show it: a builtin's name, or "exception" for a class of the student's
    (whose name is student text, and could carry what the audit learnt)."""
    name = type(exc).__name__
    return name if getattr(builtins, name, None) is type(exc) else "exception"


def audit_inputs(ctx, handle, audit: str) -> tuple:
    if audit != "gradients":
        return (handle,)
    config = handle.config
    shape = (BATCH, min(MAX_T, int(config.block_size)))
    tokens = ctx.randint(0, int(config.vocab_size), shape)
    targets = ctx.randint(0, int(config.vocab_size), shape)
    return handle, tokens, targets


def run_audit(student, ctx, audit: str) -> None:
    name = f"audit_{audit}"
    fn = getattr(student, name, None)
    if not callable(fn):
        raise ContractBreach("the module has no function `{name}`, which the contract names", name=name)
    models = connection()
    if models is None:
        raise RuntimeError("the exercise's model process is not connected")
    served = models.count(audit)
    outcomes: list[dict] = []
    for index in range(served):
        if outcomes and ("timeout" in outcomes[-1] or "skipped" in outcomes[-1]):
            outcomes.append({"skipped": True})
            continue
        handle = models.open(audit, index)
        args = audit_inputs(ctx, handle, audit)
        outcomes.append(ended(lambda: fn(*[a.clone() if isinstance(a, torch.Tensor) else a for a in args]),
                              ctx.student_file))
    ctx.record(audit=audit, served=served, outcomes=outcomes)


@probe
def audit_causality(student, ctx):
    run_audit(student, ctx, "causality")


@probe
def audit_targets(student, ctx):
    run_audit(student, ctx, "targets")


@probe
def audit_registration(student, ctx):
    run_audit(student, ctx, "registration")


@probe
def audit_gradients(student, ctx):
    run_audit(student, ctx, "gradients")


@probe
def audit_resume(student, ctx):
    run_audit(student, ctx, "resume")
