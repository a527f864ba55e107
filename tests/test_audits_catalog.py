"""Exercise `audits`: the served wheats and chaffs against the reference audits, in this process.

Every wheat of solutions/audits/served.toml is accepted by the reference audit, every chaff rejected with
AssertionError; each mutant of the audits (one known way to write an audit wrong) misses at least one chaff or
raises a false alarm on a wheat, so the catalog tells those audits apart from the reference; the correct audits
written another way agree on every entry; builds are deterministic for a seed. The models are driven through
in-process handles with the calls COURSE.md section 12 lists (tests/audits_inprocess.py).
"""
from __future__ import annotations

import math
import os
import tempfile
import tomllib
import types

import pytest
import torch
from audits_inprocess import AUDITS_DIR, ROOT, ENTRIES, handed, import_path, reference, served, verdict


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """Tiny models on a shared machine: one intra-op thread is faster than two that wait on each other."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


# -- the catalog ---------------------------------------------------------------------------------------------------

def test_every_audit_has_wheats_and_chaffs_described_in_both_languages():
    assert {e.audit for e in ENTRIES} == set(served.AUDITS)
    for audit in served.AUDITS:
        mine = [e for e in ENTRIES if e.audit == audit]
        assert any(e.wheat for e in mine) and any(not e.wheat for e in mine), audit
        assert len({e.key for e in mine}) == len(mine), audit
    for e in ENTRIES:
        assert e.description["en"].strip() and e.description["zh"].strip(), e.key
        assert any("\u4e00" <= ch <= "\u9fff" for ch in e.description["zh"]), e.key
        assert "def " not in e.description["en"] and "self." not in e.description["en"], e.key


def test_seed_004s_fault_experiments_are_named_chaffs():
    named = {(e.audit, e.fault_experiment) for e in ENTRIES if e.fault_experiment}
    assert named == {("causality", "mask_removed"), ("targets", "labels_not_shifted")}
    assert all(not e.wheat for e in ENTRIES if e.fault_experiment)


def test_the_catalog_draws_on_every_kind_of_course_asset():
    keys = {e.key for e in ENTRIES}
    for kind in ("/variants/", "/mutants/", "generated/"):
        assert any(kind in k for k in keys), kind
    assert "transformer_lm" in keys


@pytest.mark.parametrize("entry", [e for e in ENTRIES if e.wheat], ids=lambda e: f"{e.audit}:{e.key}")
def test_reference_accepts_every_wheat(entry):
    assert verdict(getattr(reference, f"audit_{entry.audit}"), entry) == "accepted"


@pytest.mark.parametrize("entry", [e for e in ENTRIES if not e.wheat], ids=lambda e: f"{e.audit}:{e.key}")
def test_reference_rejects_every_chaff(entry):
    assert verdict(getattr(reference, f"audit_{entry.audit}"), entry) == "rejected"


AUDIT_VARIANTS = sorted((AUDITS_DIR / "variants").glob("*/audits.py"))


def test_the_course_has_audit_variants_to_cross_check():
    assert len(AUDIT_VARIANTS) >= 2, "solutions/audits/variants holds the correct audits written from COURSE.md alone"


@pytest.mark.parametrize("path", AUDIT_VARIANTS, ids=lambda p: p.parent.name)
def test_correct_audits_written_another_way_agree_on_every_entry(path):
    """The catalog is not tuned to the reference: every correct audit accepts the wheats and rejects the chaffs."""
    variant = import_path(f"course_audits_variant_{path.parent.name}", path)
    wrong = [(e.audit, e.key, got) for e in ENTRIES
             if (got := verdict(getattr(variant, f"audit_{e.audit}"), e)) != ("accepted" if e.wheat else "rejected")]
    assert not wrong


def test_verdicts_hold_for_other_seeds():
    """The grading seed changes every model's weights and the gradient batch: the verdicts must not depend on it."""
    wrong = []
    for seed in (0, 20261130):
        for e in ENTRIES:
            got = verdict(getattr(reference, f"audit_{e.audit}"), e, seed)
            if got != ("accepted" if e.wheat else "rejected"):
                wrong.append((seed, e.audit, e.key, got))
    assert not wrong


def test_some_causality_wheats_come_in_training_mode_with_dropout():
    """The positive control of causality_no_eval's false alarm: a wheat whose two forwards differ until eval()."""
    wheats = [e for e in ENTRIES if e.audit == "causality" and e.wheat]
    noisy = 0
    for entry in wheats:
        handle = handed(entry)
        tokens = torch.randint(0, 8, (2, 8), generator=torch.Generator().manual_seed(0))
        noisy += not torch.equal(handle(tokens), handle(tokens))
    assert noisy >= 2


def test_small_leak_is_small():
    """generated/mask_finite_penalty leaks, but by far less than 1.0 (what a tolerance of 1.0 lets through)."""
    entry = next(e for e in ENTRIES if e.key == "generated/mask_finite_penalty")
    handle = handed(entry)
    handle.eval()
    tokens = torch.randint(0, 8, (2, 8), generator=torch.Generator().manual_seed(0))
    changed = tokens.clone()
    changed[:, -1] = (changed[:, -1] + 1) % 8
    leak = float((handle(tokens)[:, :-1] - handle(changed)[:, :-1]).abs().max())
    assert 1e-6 < leak < 1e-2


# -- the audits' mutants: each misses a chaff (or raises a false alarm), so the catalog grades it ---------------------

def _causality(model, *, atol: float = 1e-6, last_only: bool = False, use_eval: bool = True) -> None:
    if use_eval:
        model.eval()
    tokens = torch.randint(0, model.config.vocab_size, (2, model.config.block_size),
                           generator=torch.Generator().manual_seed(0))
    before = model(tokens)
    positions = [tokens.shape[1] - 1] if last_only else range(1, tokens.shape[1])
    for t in positions:
        changed = tokens.clone()
        changed[:, t] = (changed[:, t] + 1) % model.config.vocab_size
        torch.testing.assert_close(model(changed)[:, :t], before[:, :t], rtol=0, atol=atol)


def causality_tolerance_one(model):
    _causality(model, atol=1.0)


def causality_last_position_only(model):
    _causality(model, last_only=True)


def causality_no_eval(model):
    _causality(model, use_eval=False)


def registration_count_only(model):
    c = model.config
    block = 2 * 2 * c.d_model + 4 * c.d_model ** 2 + 2 * c.d_model * c.d_ff + c.d_ff + c.d_model
    want = 2 * c.vocab_size * c.d_model + c.block_size * c.d_model + c.n_layers * block + 2 * c.d_model
    got = sum(math.prod(t.shape) for _, t in model.named_parameters())
    assert got == want, f"{got} parameters, expected {want}"


def gradients_none_only(model, tokens, targets):
    grads = model.gradients(tokens, targets)
    for name, _ in model.named_parameters():
        assert grads.get(name) is not None, name


def targets_first_row_only(make_batch):
    texts = ["^qaacb$", "^pab$", "^c$"]
    inputs, targets = make_batch(texts)
    ids = [reference.VOCAB.index(ch) for ch in texts[0]]
    assert inputs[0].tolist() == ids[:-1] and targets[0].tolist() == ids[1:]


def targets_first_row_only_shortest_first(make_batch):
    """The same mistake with the shortest text first: row 0 is padded, yet only row 0 is looked at."""
    texts = ["^c$", "^pab$", "^qaacb$"]
    inputs, targets = make_batch(texts)
    ids = [reference.VOCAB.index(ch) for ch in texts[0]]
    pad = [0] * (len(texts[2]) - len(texts[0]))
    assert inputs[0].tolist() == ids[:-1] + pad and targets[0].tolist() == ids[1:] + pad


def resume_step_compared_to_itself(trainer):
    run = trainer.new()
    for _ in range(3):
        run.step()
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "resume.pt")
        run.save(path)
        trainer.load(path)
    before = run.parameters()
    for name, value in run.parameters().items():   # the run compared with itself: always equal
        assert torch.equal(value, before[name])


def return_none(*_args) -> None:
    return None


def raise_assertion(*_args) -> None:
    raise AssertionError("broken")


AUDIT_MUTANTS = [
    ("causality", causality_tolerance_one, "misses"),
    ("causality", causality_last_position_only, "misses"),
    ("causality", causality_no_eval, "false alarm"),
    ("registration", registration_count_only, "misses"),
    ("gradients", gradients_none_only, "misses"),
    ("targets", targets_first_row_only, "misses"),
    ("targets", targets_first_row_only_shortest_first, "misses"),
    ("resume", resume_step_compared_to_itself, "misses"),
] + [(audit, return_none, "misses") for audit in served.AUDITS] + [
    (audit, raise_assertion, "false alarm") for audit in served.AUDITS]


@pytest.mark.parametrize("audit, mutant, failure", AUDIT_MUTANTS, ids=lambda v: getattr(v, "__name__", str(v)))
def test_each_audit_mutant_is_told_apart(audit, mutant, failure):
    entries = [e for e in ENTRIES if e.audit == audit]
    if failure == "misses":
        missed = [e.key for e in entries if not e.wheat and verdict(mutant, e) != "rejected"]
        assert missed, f"{mutant.__name__} catches every {audit} chaff"
    else:
        alarms = [e.key for e in entries if e.wheat and verdict(mutant, e) != "accepted"]
        assert alarms, f"{mutant.__name__} accepts every {audit} wheat"


def test_the_named_misses_are_the_ones_built_for_them():
    """Each targeted mutant misses the chaff made for it (not only some chaff by accident)."""
    by_key = {(e.audit, e.key): e for e in ENTRIES}

    def missed(mutant, audit, key):
        return verdict(mutant, by_key[(audit, key)]) != "rejected"

    assert missed(causality_tolerance_one, "causality", "generated/mask_finite_penalty")
    assert missed(causality_last_position_only, "causality", "generated/first_position_sees_second")
    assert missed(registration_count_only, "registration", "generated/head_stored_transposed")
    assert missed(gradients_none_only, "gradients", "generated/positions_scaled_by_zero")
    assert missed(gradients_none_only, "gradients", "generated/unused_branch_square_root")
    assert missed(targets_first_row_only, "targets", "generated/short_rows_padded_left")
    assert missed(targets_first_row_only, "targets", "generated/width_from_first_text")
    assert missed(targets_first_row_only_shortest_first, "targets", "generated/vocabulary_two_swapped")
    assert missed(resume_step_compared_to_itself, "resume", "checkpoint/mutants/no_rng_state")


# -- determinism ---------------------------------------------------------------------------------------------------

def _fingerprint(entry, seed: int) -> list:
    built = served.build(ROOT, entry, seed)
    if entry.audit == "targets":
        return [t.tolist() for t in built(["^pab$", "^qaacb$", "^c$"])]
    if entry.audit == "resume":
        run = built.new()
        losses = [run.step() for _ in range(2)]
        return [losses, {k: v.tolist() for k, v in run.parameters().items()}]
    return [(name, p.detach().tolist()) for name, p in built.named_parameters()] + [built.training]


@pytest.mark.parametrize("audit", served.AUDITS)
def test_builds_are_deterministic_for_a_seed(audit):
    entries = [e for e in ENTRIES if e.audit == audit]
    for entry in entries:
        assert _fingerprint(entry, 7) == _fingerprint(entry, 7), entry.key
    if audit != "targets":
        first = next(e for e in entries if e.wheat)
        assert _fingerprint(first, 7) != _fingerprint(first, 8)


def test_catalog_order_is_fixed():
    assert [(e.audit, e.key) for e in served.catalog(ROOT)] == [(e.audit, e.key) for e in ENTRIES]


def test_a_source_that_cannot_be_had_is_named(tmp_path):
    with pytest.raises(served.ServedError, match="variants/no_such_variant"):
        served.source_text(ROOT, "transformer_lm/variants/no_such_variant")
    stale = tmp_path / "stale.diff"
    stale.write_text("--- a/x\n+++ b/x\n@@ -1,1 +1,1 @@\n-no such line\n+another line\n")
    with pytest.raises(served.ServedError, match="stale.diff cannot be applied"):
        served._patched("some other text\n", stale)
    assert served.source_text(ROOT, "generated/mask_one_ahead", "transformer_lm") != served.source_text(
        ROOT, "transformer_lm")


def test_a_malformed_table_is_refused_with_the_entry_named(tmp_path):
    (tmp_path / "course.toml").write_text('[course]\nname = "x"\n')
    folder = tmp_path / "solutions" / "audits"
    folder.mkdir(parents=True)
    (folder / "served.toml").write_text('[[causality]]\nkey = "transformer_lm"\nwheat = "yes"\nen = "a"\nzh = "b"\n')
    with pytest.raises(served.ServedError, match=r"\(transformer_lm\) lacks wheat"):
        served.catalog(tmp_path)
    (folder / "served.toml").write_text('[[causality]]\nkey = "k"\nwheat = true\nen = "a"\nzh = "b"\n'
                                        'fault_experiment = "mask_moved"\n')
    with pytest.raises(served.ServedError, match="unknown fault experiment 'mask_moved'"):
        served._table.cache_clear() or served.catalog(tmp_path)


COURSE_AUDIT_MUTANTS = sorted(p.parent.name for p in (AUDITS_DIR / "mutants").glob("*/change.diff"))


@pytest.mark.parametrize("name", COURSE_AUDIT_MUTANTS)
def test_each_of_the_courses_audit_mutants_is_told_apart(name):
    """solutions/audits/mutants (diffs against the reference audits): on every audit whose criteria its manifest says
    it fails, it misses a chaff or raises a false alarm on a wheat."""
    manifest = tomllib.loads((AUDITS_DIR / "mutants" / name / "manifest.toml").read_text(encoding="utf-8"))
    audits = {criterion.split("_")[0] for criterion in manifest["fails"]}
    module = types.ModuleType(f"course_audits_mutant_{name}")
    exec(compile(served.source_text(ROOT, f"audits/mutants/{name}"), f"{name}/audits.py", "exec"), module.__dict__)
    for audit in audits:
        told = [e.key for e in ENTRIES if e.audit == audit
                and verdict(getattr(module, f"audit_{audit}"), e) != ("accepted" if e.wheat else "rejected")]
        assert told, f"{name} agrees with the reference on every {audit} entry"
