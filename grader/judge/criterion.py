"""A criterion is a pytest test in the judge with its metadata attached by a small decorator.

    @criterion("logits_shape", kind="shape", title=t("Logits are [B, T, V]"), hint=t("Project every position ..."))
    def test_logits_shape(obs, ref, verdict):
        got = obs.probe("forward").value("logits_shape")
        verdict.check(got == [2, 5, 11], t("logits have shape {got}; expected [2, 5, 11] = [B, T, V]", got=got))
        verdict.ok(t("logits have shape {got} = [B, T, V]", got=got))

Points are not here: they live in course.toml, where instructors change them. The title and hint are templates
like every message (their Chinese is in the exercise's catalog), written as literals: `grader.judge.listing` reads
them from the source, so that what needs a criterion's title never imports the criteria.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NoReturn

from grader.i18n import Text
from grader.judge.verdicts import CriterionFailed, as_text

KINDS = ("shape", "values", "gradient", "causality", "registration", "optimizer", "overfit", "resume",
         "param_count", "errors", "api", "determinism")


@dataclass(frozen=True)
class CriterionMeta:
    id: str
    kind: str
    title: dict[str, str]
    hint: dict[str, str]
    requires: tuple[str, ...] = ()


@dataclass(frozen=True)
class Outcome:
    """How one criterion ended: what the report shows of it."""

    meta: CriterionMeta
    status: str
    message: dict[str, str]   # language -> sentence
    evidence: dict
    hint: dict[str, str] | None = None   # language -> sentence, in place of the criterion's own hint
    # a failed criterion's share of its points (0 to 1; None: none), as `verdict.fraction` set it: a criterion whose
    # points follow a count (broken models caught of all served) earns that share without passing
    partial: float | None = None


def criterion(id: str, *, kind: str, title: Text, hint: Text, requires: tuple[str, ...] = ()):
    if kind not in KINDS:
        raise ValueError(f"criterion {id}: unknown kind {kind!r}")
    for text in (title, hint):
        if type(text) is not Text:
            raise ValueError(f"criterion {id}: a title and a hint are t(\"English template\"), their Chinese in "
                             f"the catalog (got {type(text).__name__})")

    def mark(fn):
        fn.criterion = CriterionMeta(id, kind, title.texts(), hint.texts(), tuple(requires))
        return fn

    return mark


@dataclass
class VerdictRecorder:
    """The `verdict` fixture: what a criterion observed, in words and numbers."""

    message: Text | None = None
    evidence: dict[str, Any] = field(default_factory=dict)
    # the share of its points the criterion earns if it fails (None: none, the rule); passing earns them all
    fraction: float | None = None
    met: bool = False   # set by `ok` alone: a criterion that returns without it has not passed

    def ok(self, message: Text, **evidence: Any) -> None:
        self.message = as_text(message)
        self.evidence.update(evidence)
        self.met = True

    def note(self, **evidence: Any) -> None:
        self.evidence.update(evidence)

    def fail(self, message: Text, **evidence: Any) -> NoReturn:
        self.evidence.update(evidence)
        raise CriterionFailed(message, **self.evidence)

    def check(self, condition: bool, message: Text, **evidence: Any) -> None:
        if not condition:
            self.fail(message, **evidence)
