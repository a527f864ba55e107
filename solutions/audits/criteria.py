"""Hidden criteria of exercise `audits`: each audit judged against the correct models (wheats) and the broken ones
(chaffs) the grader's model process served it.

The probe recorded how each call ended per served index; which entry each index was is recomputed here from the
seed the model process used (the run's `served_seed`) and the served module's catalog, exactly as the model process
ordered them (grader/models/wire.py `served_order`). What this says of an entry is its description in words, never
its code, and never anything the audit itself said.
"""

import importlib.util
import math
import sys
from functools import cache
from pathlib import Path

from grader.i18n import Text, join, rendered, t, verbatim
from grader.judge.criterion import criterion
from grader.judge.verdicts import GraderFault

EXERCISE = "audits"
SHOWN = 6   # entries a message names before it says how many more


@cache
def _catalog() -> tuple:
    """The served module's entries, in its fixed order (imported here, in the judge, never in the sandbox)."""
    here = Path(__file__).resolve()
    spec = importlib.util.spec_from_file_location("audits_served_catalog", here.with_name("served.py"))
    if spec is None or spec.loader is None:
        raise RuntimeError("the audits exercise has no served.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module   # dataclasses look their module up
    spec.loader.exec_module(module)
    return tuple(module.catalog(here.parents[2]))


def served(obs, audit: str) -> list[tuple[object, dict]]:
    """(entry, how the audit ended on it) for every entry served to `audit`, in the order served."""
    from grader.models.wire import served_order

    p = obs.probe(f"audit_{audit}")
    outcomes, count = p.value("outcomes"), p.value("served")
    entries = [e for e in _catalog() if e.audit == audit]
    seed = obs.run.served_seed if obs.run is not None else None
    if seed is None:
        raise GraderFault(t("not judged: the run does not say how its models were ordered; this is the grader's "
                            "fault, no point is taken for it"))
    if count != len(entries) or not isinstance(outcomes, list) or len(outcomes) != count:
        raise GraderFault(t("not judged: the model process served {served} entries to audit_{audit} and the catalog "
                            "lists {listed}; this is the grader's fault, no point is taken for it",
                            served=count, audit=audit, listed=len(entries)))
    order = served_order(seed, audit, len(entries))
    return [(entries[order[i]], outcomes[i] if isinstance(outcomes[i], dict) else {}) for i in range(count)]


def described(entry) -> Text:
    return rendered(dict(entry.description))


def named(entry) -> Text:
    """The description as a phrase inside a sentence: without its closing full stop."""
    return rendered({lang: text.rstrip().rstrip(".。") for lang, text in entry.description.items()})


def how(outcome: dict) -> Text:
    """How an audit's call ended, in words (never what the audit said)."""
    if outcome.get("assertion"):
        return t("it raised AssertionError")
    if "timeout" in outcome:
        return t("it ran past {seconds:g} s and was stopped", seconds=outcome["timeout"])
    if outcome.get("skipped"):
        return t("it was not run (an earlier call of this audit ran past its time)")
    if outcome.get("model_call"):
        return t("it crashed: a call of the model handle failed (RuntimeError); pass what the contract says")
    if "crashed" in outcome:
        return t("it crashed with {error}", error=verbatim(outcome["crashed"]))
    if outcome.get("returned"):
        return t("it returned None")
    return t("no outcome was recorded")


def listed(parts: list[Text]) -> Text:
    shown = parts[:SHOWN]
    if len(parts) > SHOWN:
        shown.append(t("and {count} more", count=len(parts) - SHOWN))
    return join(shown, t("; "))


def accepts_correct(obs, verdict, audit: str) -> None:
    judged = served(obs, audit)
    wheats = [(e, o) for e, o in judged if e.wheat]
    chaffs = [(e, o) for e, o in judged if not e.wheat]
    refused = [(e, o) for e, o in wheats if not o.get("returned")]
    caught = [e for e, o in chaffs if o.get("assertion")]
    verdict.note(wheats=len(wheats), refused=[e.key for e, _ in refused], caught=len(caught), chaffs=len(chaffs))
    stopped = next((o for _, o in judged if "timeout" in o), None)
    if stopped is not None:
        verdict.fail(t("audit_{audit} ran past {seconds:g} s on one of the models it was given and was stopped; the "
                       "models after it were not tried", audit=audit, seconds=stopped["timeout"]))
    if refused:
        verdict.fail(t("audit_{audit} must accept every correct model, and it did not accept {count} of {total}: "
                       "{cases}", audit=audit, count=len(refused), total=len(wheats),
                       cases=listed([t("{how} on a correct model ({what})", how=how(o), what=described(e))
                                     for e, o in refused])))
    if not caught:
        verdict.fail(t("audit_{audit} accepted every correct model but rejected none of the {total} broken ones: an "
                       "audit that never raises proves nothing", audit=audit, total=len(chaffs)))
    verdict.ok(t("audit_{audit} accepted all {total} correct models and rejected at least one broken one",
                 audit=audit, total=len(wheats)))


def catches_broken(obs, verdict, audit: str) -> None:
    judged = served(obs, audit)
    chaffs = [(e, o) for e, o in judged if not e.wheat]
    if not chaffs:
        raise GraderFault(t("not judged: the catalog serves no broken model to audit_{audit}; this is the grader's "
                            "fault, no point is taken for it", audit=audit))
    caught = [e for e, o in chaffs if o.get("assertion")]
    missed = [(e, o) for e, o in chaffs if not o.get("assertion")]
    crashed = [e for e, o in missed if "crashed" in o]
    share = len(caught) / len(chaffs)
    verdict.fraction = share if math.isfinite(share) else 0.0
    experiments = [t("seed 004's fault experiment `{name}` ({what}): {result}", name=verbatim(e.fault_experiment),
                     what=named(e), result=t("rejected") if o.get("assertion") else t("missed"))
                   for e, o in chaffs if e.fault_experiment]
    evidence = {"caught": len(caught), "total": len(chaffs), "missed": [e.key for e, _ in missed],
                "crashed": [e.key for e in crashed]}
    said = join(experiments, t("; ")) if experiments else None
    if missed:
        message = t("audit_{audit} rejected {caught} of {total} broken models with AssertionError; it missed: {cases}",
                    audit=audit, caught=len(caught), total=len(chaffs),
                    cases=listed([t("{what} ({how})", what=described(e), how=how(o)) for e, o in missed]))
        verdict.fail(t("{message}. {experiments}", message=message, experiments=said) if said else message,
                     **evidence)
    message = t("audit_{audit} rejected all {total} broken models with AssertionError", audit=audit,
                total=len(chaffs))
    verdict.ok(t("{message}. {experiments}", message=message, experiments=said) if said else message, **evidence)


@criterion("causality_accepts_correct", kind="causality",
           title=t("audit_causality accepts every correct model and rejects at least one broken one"),
           hint=t("Put the model in eval() first, change the tokens from a position t on, and compare only the logits "
                  "before t, with atol 1e-6: dropout is not a leak, and a correct model must pass."))
def test_causality_accepts_correct(obs, verdict):
    accepts_correct(obs, verdict, "causality")


@criterion("causality_catches_broken", kind="causality", requires=("causality_accepts_correct",),
           title=t("audit_causality rejects each broken model with AssertionError (points by the share rejected)"),
           hint=t("Try every position t, not only the last, and compare with atol 1e-6: a small leak, or one from an "
                  "early position only, must raise AssertionError."))
def test_causality_catches_broken(obs, verdict):
    catches_broken(obs, verdict, "causality")


@criterion("targets_accepts_correct", kind="values",
           title=t("audit_targets accepts every correct model and rejects at least one broken one"),
           hint=t("A correct make_batch shifts each text's ids left by one for the targets and right-pads inputs and "
                  "targets with PAD (id 0): accept any batch that does exactly that."))
def test_targets_accepts_correct(obs, verdict):
    accepts_correct(obs, verdict, "targets")


@criterion("targets_catches_broken", kind="values", requires=("targets_accepts_correct",),
           title=t("audit_targets rejects each broken model with AssertionError (points by the share rejected)"),
           hint=t("Check every row, texts of different lengths included: targets[:, t] == ids[t + 1] where the text "
                  "goes on, PAD after its end, in both inputs and targets."))
def test_targets_catches_broken(obs, verdict):
    catches_broken(obs, verdict, "targets")


@criterion("registration_accepts_correct", kind="registration",
           title=t("audit_registration accepts every correct model and rejects at least one broken one"),
           hint=t("Derive the expected names and shapes from model.config and exercise 9's architecture, and compare "
                  "them with model.named_parameters(): a correct model has exactly those."))
def test_registration_accepts_correct(obs, verdict):
    accepts_correct(obs, verdict, "registration")


@criterion("registration_catches_broken", kind="registration", requires=("registration_accepts_correct",),
           title=t("audit_registration rejects each broken model with AssertionError (points by the share "
                   "rejected)"),
           hint=t("Compare names and shapes, not only the count: a parameter missing, renamed or of another shape, and "
                  "blocks shared or held in a Python list, must raise AssertionError."))
def test_registration_catches_broken(obs, verdict):
    catches_broken(obs, verdict, "registration")


@criterion("gradients_accepts_correct", kind="gradient",
           title=t("audit_gradients accepts every correct model and rejects at least one broken one"),
           hint=t("Call model.gradients(tokens, targets) once and check every registered parameter: a correct model "
                  "gives each a finite gradient that is not all zero."))
def test_gradients_accepts_correct(obs, verdict):
    accepts_correct(obs, verdict, "gradients")


@criterion("gradients_catches_broken", kind="gradient", requires=("gradients_accepts_correct",),
           title=t("audit_gradients rejects each broken model with AssertionError (points by the share rejected)"),
           hint=t("A gradient that is None, all zero, or not finite (NaN, inf) must raise AssertionError, for every "
                  "parameter, not only the first."))
def test_gradients_catches_broken(obs, verdict):
    catches_broken(obs, verdict, "gradients")


@criterion("resume_accepts_correct", kind="resume",
           title=t("audit_resume accepts every correct model and rejects at least one broken one"),
           hint=t("Compare two runs started with trainer.new(): 2k straight steps, and k steps, save, trainer.load, k "
                  "more; a correct trainer gives the same parameters bit for bit."))
def test_resume_accepts_correct(obs, verdict):
    accepts_correct(obs, verdict, "resume")


@criterion("resume_catches_broken", kind="resume", requires=("resume_accepts_correct",),
           title=t("audit_resume rejects each broken model with AssertionError (points by the share rejected)"),
           hint=t("Compare the resumed run with a different straight run, never a run with itself, bit for bit "
                  "(torch.equal): a lost optimizer state or RNG state must raise AssertionError."))
def test_resume_catches_broken(obs, verdict):
    catches_broken(obs, verdict, "resume")
