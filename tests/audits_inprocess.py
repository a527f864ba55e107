"""Exercise `audits` in one process: the served catalog, the reference audits, and the handles COURSE.md section 12
lists, made here over the built objects (the grader's handles cross a process boundary to a model process; these
only copy tensors, which is the same contract). For tests/test_audits_catalog.py and bench/audits_catalog.py."""
from __future__ import annotations

import dataclasses
import importlib.util
import sys
import types
from collections.abc import Callable
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
AUDITS_DIR = ROOT / "solutions" / "audits"


def import_path(name: str, path: Path) -> types.ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module   # dataclasses look their module up while the class body runs
    spec.loader.exec_module(module)
    return module


served = import_path("course_audits_served", AUDITS_DIR / "served.py")
reference = import_path("course_audits_reference", AUDITS_DIR / "audits.py")
ENTRIES = served.catalog(ROOT)
SEED = 1234


# -- the handle ----------------------------------------------------------------------------------------------------

class ModelHandle:
    """COURSE.md section 12's model handle, in process: every tensor crosses it as a copy."""

    def __init__(self, module: torch.nn.Module):
        self._module = module

    def __call__(self, tokens: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            return self._module(tokens.clone())["logits"].detach().clone()

    def eval(self) -> None:
        self._module.eval()

    def train(self) -> None:
        self._module.train()

    @property
    def config(self) -> types.SimpleNamespace:
        config = self._module.config
        return types.SimpleNamespace(**{f.name: getattr(config, f.name) for f in dataclasses.fields(config)})

    def named_parameters(self) -> list[tuple[str, torch.Tensor]]:
        return [(name, p.detach().clone()) for name, p in self._module.named_parameters()]

    def gradients(self, tokens: torch.Tensor, targets: torch.Tensor) -> dict[str, torch.Tensor | None]:
        self._module.zero_grad(set_to_none=True)
        names = [name for name, _ in self._module.named_parameters()]
        try:
            self._module(tokens.clone(), targets=targets.clone())["loss"].backward()
        except Exception:   # a loss whose backward raises: no parameter got a gradient
            return dict.fromkeys(names)
        return {name: None if p.grad is None else p.grad.detach().clone()
                for name, p in self._module.named_parameters()}


def handed(entry, seed: int = SEED) -> object:
    """What the audit of `entry` receives: a model handle, make_batch, or the trainer (whose calls copy already)."""
    built = served.build(ROOT, entry, seed)
    if entry.audit in ("causality", "registration", "gradients"):
        return ModelHandle(built)
    if entry.audit == "targets":
        return lambda texts: tuple(t.clone() for t in built(list(texts)))
    return built


def gradients_batch(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Tokens and targets for audit_gradients as the grader draws them: random ids, [2, block_size]."""
    values = served.config_values(ROOT, "gradients")
    generator = torch.Generator().manual_seed(seed)
    shape = (2, values["block_size"])
    return (torch.randint(0, values["vocab_size"], shape, generator=generator),
            torch.randint(0, values["vocab_size"], shape, generator=generator))


def run_audit(audit: Callable, entry, seed: int = SEED) -> None:
    subject = handed(entry, seed)
    if entry.audit == "gradients":
        audit(subject, *gradients_batch(seed))
    else:
        audit(subject)


def verdict(audit: Callable, entry, seed: int = SEED) -> str:
    """"accepted", "rejected" (AssertionError) or "crashed: <type>"."""
    try:
        run_audit(audit, entry, seed)
    except AssertionError:
        return "rejected"
    except Exception as exc:
        return f"crashed: {type(exc).__name__}: {exc}"
    return "accepted"
