"""The wheats and chaffs of exercise `audits`: what each of the five audits is run against.

A wheat is a correct implementation the audit must accept; a chaff has one described defect of the audit's
property and must be rejected with AssertionError. The list lives in served.toml beside this file (which catalog
entries are wheats and chaffs of which audit, with a description in English and Chinese); the code of each lives in
the course: the `transformer_lm`, `training` and `checkpoint` references, their variants (whole files) and mutants
(change.diff against the reference, applied by the selftest's patcher), and generated ones in generated/ (whole
files, or diffs against the reference that served.toml names as their `base`).

Trusted code: imported only by the grader's model process (which builds what an audit talks to through a handle) and
by the judge. Never by a process that runs student code: nothing here may reach a student's audit but behaviour.
"""
from __future__ import annotations

import functools
import sys
import tomllib
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from grader.review.unidiff import PatchError, apply_diff

AUDITS = ("causality", "targets", "registration", "gradients", "resume")
FAULT_EXPERIMENTS = ("mask_removed", "labels_not_shifted")  # seed 004's two named fault experiments
HERE = Path(__file__).resolve().parent
TABLE = "served.toml"          # the data: every entry of every audit, in a fixed order
GENERATED = "generated"        # generated wheats and chaffs: <name>.py whole files, <name>.diff against a base
MUTANT_DIFF = "change.diff"    # a catalog mutant's one bug (grader/review/selftest.py's layout)
MODULE_NAME = "model"          # every loaded source gets this module name: a wheat and a chaff look alike


REQUIRED = {"key": str, "wheat": bool, "en": str, "zh": str}   # what every entry of served.toml must say


class ServedError(Exception):
    """served.toml or a source it names cannot be used as it is: the message names the entry and the file."""


@dataclass(frozen=True)
class Entry:
    audit: str                   # one of AUDITS
    key: str                     # stable id: "transformer_lm/mutants/future_leak_mask_removed", "generated/<name>"
    wheat: bool                  # True: correct (must be accepted); False: a chaff (must be rejected)
    description: dict[str, str]  # {"en": ..., "zh": ...}: the variant or the defect in words, shown to students
    fault_experiment: str | None = None   # "mask_removed" | "labels_not_shifted" (seed 004's named experiments)


# -- the data ------------------------------------------------------------------------------------------------------

@functools.lru_cache(maxsize=8)
def _table(course_root: Path) -> dict[str, Any]:
    path = _solutions(course_root) / "audits" / TABLE
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ServedError(f"{path}: {exc}") from None


@functools.lru_cache(maxsize=8)
def _course(course_root: Path) -> dict[str, Any]:
    return tomllib.loads((course_root / "course.toml").read_text(encoding="utf-8"))


def _solutions(course_root: Path) -> Path:
    """The course's solutions folder: course.toml's `[course] solutions`, else <root>/solutions."""
    folder = _course(course_root).get("course", {}).get("solutions", "solutions")
    return course_root / folder


def _exercise_file(course_root: Path, exercise_id: str) -> str:
    for ex in _course(course_root).get("exercise", ()):
        if ex.get("id") == exercise_id:
            return str(ex["file"])
    raise ServedError(f"course.toml has no exercise {exercise_id!r}, which {TABLE} draws on")


def _spec(course_root: Path, audit: str, key: str) -> dict[str, Any]:
    for row in _table(course_root).get(audit, ()):
        if row["key"] == key:
            return row
    raise ServedError(f"{TABLE} has no {audit} entry {key!r}")


def catalog(course_root: Path) -> list[Entry]:
    """Every entry of every audit, in served.toml's order (audits in AUDITS order)."""
    course_root = Path(course_root).resolve()
    table = _table(course_root)
    entries = []
    for audit in AUDITS:
        seen = set()
        for row in table.get(audit, ()):
            lacking = [name for name in REQUIRED if not isinstance(row.get(name), REQUIRED[name])]
            if lacking:
                raise ServedError(f"{TABLE}: a {audit} entry ({row.get('key', 'without a key')}) lacks "
                                  f"{', '.join(lacking)} (or has another type)")
            key = row["key"]
            if key in seen:
                raise ServedError(f"{TABLE}: {audit} lists {key!r} twice")
            seen.add(key)
            fault = row.get("fault_experiment")
            if fault is not None and fault not in FAULT_EXPERIMENTS:
                raise ServedError(f"{TABLE}: {audit} {key!r} names an unknown fault experiment {fault!r}")
            entries.append(Entry(audit, key, row["wheat"], {"en": row["en"], "zh": row["zh"]}, fault))
    return entries


# -- sources -------------------------------------------------------------------------------------------------------

def source_text(course_root: Path, key: str, base: str | None = None) -> str:
    """The code a key names: "<exercise>" the reference, "<exercise>/variants/<name>" a whole file,
    "<exercise>/mutants/<name>" its change.diff applied to the reference, "generated/<name>" generated/<name>.py, or
    generated/<name>.diff applied to the code `base` names."""
    try:
        return _source_text(course_root, key, base)
    except OSError as exc:
        raise ServedError(f"{TABLE} names {key!r}, whose code cannot be read: {exc}") from None


def _source_text(course_root: Path, key: str, base: str | None) -> str:
    solutions = _solutions(course_root)
    parts = key.split("/")
    if parts[0] == GENERATED:
        whole = solutions / "audits" / GENERATED / f"{parts[1]}.py"
        if whole.is_file():
            return whole.read_text(encoding="utf-8")
        if base is None:
            raise ServedError(f"{key}: no {whole.name}, and no base to apply {parts[1]}.diff to")
        return _patched(_source_text(course_root, base, None), whole.with_suffix(".diff"))
    exercise = parts[0]
    file = _exercise_file(course_root, exercise)
    if len(parts) == 1:
        return (solutions / exercise / file).read_text(encoding="utf-8")
    if parts[1] == "variants":
        return (solutions / exercise / "variants" / parts[2] / file).read_text(encoding="utf-8")
    if parts[1] == "mutants":
        return _patched(_source_text(course_root, exercise, None), solutions / exercise / "mutants" / parts[2] / MUTANT_DIFF)
    raise ServedError(f"{key}: not a source key")


def _patched(text: str, diff: Path) -> str:
    try:
        patched = apply_diff(text, diff.read_text(encoding="utf-8"))
    except PatchError as exc:
        raise ServedError(f"{diff} cannot be applied: {exc}") from None
    if patched == text:
        raise ServedError(f"{diff} changes nothing")
    return patched


@functools.lru_cache(maxsize=128)
def _module(text: str) -> types.ModuleType:
    """`text` run as a fresh module named MODULE_NAME (cached by text: loading the same code twice gives one module)."""
    module = types.ModuleType(MODULE_NAME)
    module.__file__ = f"{MODULE_NAME}.py"
    previous = sys.modules.get(MODULE_NAME)
    sys.modules[MODULE_NAME] = module   # dataclasses look their module up while the class body runs
    try:
        exec(compile(text, module.__file__, "exec"), module.__dict__)
    finally:
        if previous is None:
            sys.modules.pop(MODULE_NAME, None)
        else:
            sys.modules[MODULE_NAME] = previous
    return module


def _load(course_root: Path, key: str, base: str | None = None) -> types.ModuleType:
    return _module(source_text(course_root, key, base))


# -- builds --------------------------------------------------------------------------------------------------------

def config_values(course_root: Path, audit: str) -> dict[str, Any]:
    """The tiny Config every model of `audit` is built with (served.toml's [config], then the audit's overrides)."""
    table = _table(Path(course_root).resolve())
    return {**table["config"], **table.get("config_" + audit, {})}


def _model(course_root: Path, spec: dict[str, Any], audit: str, seed: int) -> torch.nn.Module:
    module = _load(course_root, spec["key"], spec.get("base"))
    values = {**config_values(course_root, audit), **spec.get("config", {})}
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = module.TransformerLM(module.Config(**values))
    if spec.get("train", False):
        model.train()
    else:
        model.eval()
    return model


def build(course_root: Path, entry: Entry, seed: int) -> object:
    """What `entry`'s audit is handed: a model (causality, registration, gradients), a make_batch function (targets)
    or a trainer (resume). The same (entry, seed) always builds the same thing."""
    course_root = Path(course_root).resolve()
    spec = _spec(course_root, entry.audit, entry.key)
    if entry.audit in ("causality", "registration", "gradients"):
        return _model(course_root, spec, entry.audit, seed)
    if entry.audit == "targets":
        return _load(course_root, entry.key, spec.get("base")).make_batch
    if entry.audit == "resume":
        return _trainer(course_root, spec, seed)
    raise ServedError(f"unknown audit {entry.audit!r}")


# -- the resume audit's trainer ------------------------------------------------------------------------------------

class Run:
    """One training run: a model, its optimizer, the fixed batch, and a torch random state of its own, swapped in
    around each step and save so that runs interleaved by an audit do not draw from each other's generator."""

    def __init__(self, trainer: Trainer, model: torch.nn.Module, optimizer: torch.optim.Optimizer,
                 rng: torch.Tensor, steps: int = 0):
        self._trainer, self._model, self._optimizer, self._rng, self._steps = trainer, model, optimizer, rng, steps

    def step(self) -> float:
        with torch.random.fork_rng(devices=[]):
            torch.set_rng_state(self._rng)
            loss = self._trainer.training.train_step(self._model, self._optimizer, *self._trainer.batch)
            self._rng = torch.get_rng_state()
        self._steps += 1
        return float(loss)

    def save(self, path: str) -> None:
        with torch.random.fork_rng(devices=[]):
            torch.set_rng_state(self._rng)   # the generator save_checkpoint records is this run's
            self._trainer.checkpoint.save_checkpoint(path, self._model, self._optimizer, self._steps)
            self._rng = torch.get_rng_state()

    def parameters(self) -> dict[str, torch.Tensor]:
        return {name: p.detach().clone() for name, p in self._model.named_parameters()}


class Trainer:
    """model + make_optimizer + train_step + save_checkpoint / load_checkpoint, on a fixed batch with dropout on."""

    def __init__(self, model: types.ModuleType, training: types.ModuleType, checkpoint: types.ModuleType,
                 config: dict[str, Any], lr: float, seed: int):
        self.model_code, self.training, self.checkpoint = model, training, checkpoint
        self.config, self.lr, self.seed = config, lr, seed
        generator = torch.Generator().manual_seed(seed)
        shape = (2, config["block_size"])
        self.batch = (torch.randint(0, config["vocab_size"], shape, generator=generator),
                      torch.randint(0, config["vocab_size"], shape, generator=generator))

    def _fresh(self, seed: int) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
        torch.manual_seed(seed)
        model = self.model_code.TransformerLM(self.model_code.Config(**self.config))
        return model, self.training.make_optimizer(model, lr=self.lr)

    def new(self) -> Run:
        with torch.random.fork_rng(devices=[]):
            model, optimizer = self._fresh(self.seed)
            return Run(self, model, optimizer, torch.get_rng_state())

    def load(self, path: str) -> Run:
        with torch.random.fork_rng(devices=[]):
            # Another seed than new(): a load that restores nothing starts from weights and a generator of its own.
            model, optimizer = self._fresh(self.seed + 1)
            info = self.checkpoint.load_checkpoint(path, model, optimizer)
            steps = info.get("step", 0) if isinstance(info, dict) else 0
            return Run(self, model, optimizer, torch.get_rng_state(), int(steps))


def _trainer(course_root: Path, spec: dict[str, Any], seed: int) -> Trainer:
    sources = spec.get("sources", {})
    base = spec.get("base")

    def code(part: str) -> types.ModuleType:
        key = sources.get(part, part)
        return _load(course_root, key, base if key.startswith(GENERATED + "/") else None)

    lr = float(_table(course_root)["trainer"]["lr"])
    return Trainer(code("transformer_lm"), code("training"), code("checkpoint"), config_values(course_root, "resume"),
                   lr, seed)
