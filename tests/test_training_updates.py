"""What the training probes take for an update: the gradients optimizer.step() applied, read after a closure
returned (torch's closure protocol) and before the update, and a step only once it returned. In process, no
sandbox: the selftest's closure variants and mutants prove the same end to end."""

import math

import pytest
import torch

from conftest import probes_module

_training = probes_module("training")
every_update, small_model, watch_steps = _training.every_update, _training.small_model, _training.watch_steps

CLIP = 1e-3   # far below a fresh model's gradient norm (about 1.7): clipped or not is plain to see


def _norm(grads: dict) -> float:
    return float(torch.cat([g.reshape(-1) for g in grads.values()]).norm())


@pytest.fixture
def setup():
    torch.manual_seed(0)
    model = small_model()
    x, y = torch.randint(0, 7, (2, 6)), torch.randint(0, 7, (2, 6))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    return model, optimizer, watch_steps(optimizer, model), x, y


def _closure(model, optimizer, x, y, clip=True):
    def closure():
        optimizer.zero_grad(set_to_none=True)
        loss = model(x, targets=y)["loss"]
        loss.backward()
        if clip:
            torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP)
        return loss
    return closure


@pytest.mark.parametrize("by_keyword", [False, True])
def test_a_closure_step_is_judged_by_the_gradient_its_update_applied(setup, by_keyword):
    model, optimizer, steps, x, y = setup
    closure = _closure(model, optimizer, x, y)
    optimizer.step(closure=closure) if by_keyword else optimizer.step(closure)
    assert len(steps) == 1 and steps[0]["with_grad"] == len(list(model.parameters()))
    assert math.isclose(_norm(steps[0]["grads"]), CLIP, rel_tol=1e-4)


def test_a_clip_after_the_step_is_not_what_the_update_applied(setup):
    model, optimizer, steps, x, y = setup
    optimizer.step(_closure(model, optimizer, x, y, clip=False))
    torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP)   # too late: the update is made
    assert _norm(steps[0]["grads"]) > 100 * CLIP


def test_a_closure_that_raised_made_no_update_and_a_plain_step_did(setup):
    model, optimizer, steps, x, y = setup

    def refuses():
        raise FloatingPointError("non-finite loss")

    with pytest.raises(FloatingPointError):
        optimizer.step(refuses)
    assert steps == []
    model(x, targets=y)["loss"].backward()   # the positive control: the plain loop's step counts
    optimizer.step()
    assert len(steps) == 1 and steps[0]["with_grad"] > 0


def test_every_update_watches_every_optimizer_only_while_the_block_runs(setup):
    model, optimizer, _, x, y = setup
    other = torch.optim.AdamW(model.parameters(), lr=1e-3)
    with every_update(lambda opt: type(opt).__name__) as seen:
        optimizer.step(_closure(model, optimizer, x, y))
        other.step(_closure(model, other, x, y))
    optimizer.step(_closure(model, optimizer, x, y))
    assert seen == ["SGD", "AdamW"]
