"""Public sanity tests for exercise `audits`. Run: pytest exercises/audits

Each audit is run on a few public models through in-process stand-ins for the grader's handles
(public_handles.py): correct ones it must accept (return None) and broken ones it must reject with an
AssertionError. Another exception is a crash, and fails the test as it costs you a catch in the grading.
The grader hands your audits many more models, other than these (the course's implementations and known
bugs), so passing these is necessary, not sufficient.
"""
import pytest
import torch

import audits
import public_handles as public

torch.set_num_threads(1)


def rejects(audit, *args):
    """The audit raised AssertionError: it caught the broken model. Any other exception propagates."""
    with pytest.raises(AssertionError):
        audit(*args)


# --- causality ------------------------------------------------------------------------------------------------

def test_causality_accepts_a_causal_model():
    assert audits.audit_causality(public.causal_model()) is None


def test_causality_puts_the_model_in_eval_first():
    # handed over in train() mode with dropout on: without eval() two calls differ, and that is not a leak
    assert audits.audit_causality(public.causal_model(dropout=0.5)) is None


def test_causality_rejects_the_mask_removed():
    rejects(audits.audit_causality, public.mask_removed())


def test_causality_rejects_a_leak_into_the_first_position_only():
    rejects(audits.audit_causality, public.first_position_reads_the_next())


# --- targets --------------------------------------------------------------------------------------------------

def test_targets_accepts_seed_004s_batch():
    assert audits.audit_targets(public.make_batch) is None


def test_targets_rejects_labels_not_shifted():
    rejects(audits.audit_targets, public.labels_not_shifted)


def test_targets_rejects_left_padding():
    rejects(audits.audit_targets, public.left_padded)


# --- registration ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("config", [public.Config(), public.Config(vocab_size=8, block_size=5, d_model=12, n_heads=3,
                                                                   n_layers=3, d_ff=20, dropout=0.1)])
def test_registration_accepts_exercise_9s_parameters(config):
    assert audits.audit_registration(public.registered(config)) is None


def test_registration_rejects_blocks_in_a_python_list():
    rejects(audits.audit_registration, public.registered(blocks="python_list"))


def test_registration_rejects_one_block_repeated():
    rejects(audits.audit_registration, public.registered(blocks="repeated"))


# --- gradients ------------------------------------------------------------------------------------------------

def batch():
    generator = torch.Generator().manual_seed(0)
    config = public.Config()
    tokens = torch.randint(0, config.vocab_size, (2, 6), generator=generator)
    return tokens, torch.randint(0, config.vocab_size, (2, 6), generator=generator)


def test_gradients_accepts_a_connected_model():
    assert audits.audit_gradients(public.connected_model(), *batch()) is None


def test_gradients_rejects_a_parameter_the_loss_never_reaches():
    rejects(audits.audit_gradients, public.parameter_never_used(), *batch())


def test_gradients_rejects_a_parameter_multiplied_by_zero():
    rejects(audits.audit_gradients, public.parameter_times_zero(), *batch())


# --- resume ---------------------------------------------------------------------------------------------------

def test_resume_accepts_a_full_checkpoint():
    assert audits.audit_resume(public.trainer()) is None


def test_resume_rejects_weights_alone():
    rejects(audits.audit_resume, public.weights_only_trainer())


def test_resume_rejects_a_checkpoint_without_the_random_state():
    rejects(audits.audit_resume, public.rng_not_saved_trainer())
