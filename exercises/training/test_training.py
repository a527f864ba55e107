"""Public sanity tests for exercise `training`. Run: pytest exercises/training

They check one behaviour each on small inputs. The hidden grader checks more (other models, other
inputs, stricter cases), so passing these is necessary, not sufficient.
"""
import copy
import math

import pytest
import torch

import train

torch.set_num_threads(1)


def build(seed=0, dropout=0.0):
    torch.manual_seed(seed)
    config = train.Config(vocab_size=7, block_size=8, d_model=16, n_heads=2, n_layers=2, d_ff=32, dropout=dropout)
    return train.TransformerLM(config)


def batch(seed=0, B=2, T=6, V=7):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, V, (B, T), generator=g), torch.randint(0, V, (B, T), generator=g)


def test_optimizer_holds_every_trainable_parameter_once():
    lm = build()
    opt = train.make_optimizer(lm)
    assert isinstance(opt, torch.optim.AdamW), f"expected torch.optim.AdamW, got {type(opt).__name__}"
    held = [p for group in opt.param_groups for p in group["params"]]
    assert len(held) == len({id(p) for p in held}), "a parameter appears in more than one place"
    assert {id(p) for p in held} == {id(p) for p in lm.parameters()}, (
        "optimizer and model disagree on the parameter set")


def test_weight_decay_only_on_matrices():
    lm = build()
    opt = train.make_optimizer(lm, weight_decay=0.1)
    for group in opt.param_groups:
        for p in group["params"]:
            expected = 0.1 if p.dim() >= 2 else 0.0
            # tolerance: exact (hyper-parameters are copied, not computed)
            assert group["weight_decay"] == expected, (
                f"a {p.dim()}-D parameter has weight_decay {group['weight_decay']}, expected {expected}")


def test_frozen_parameters_are_left_out():
    lm = build()
    lm.token_embedding.weight.requires_grad_(False)
    opt = train.make_optimizer(lm)
    held = {id(p) for group in opt.param_groups for p in group["params"]}
    assert id(lm.token_embedding.weight) not in held, "a frozen parameter was given to the optimizer"
    assert held == {id(p) for p in lm.parameters() if p.requires_grad}, "a trainable parameter is missing"


def test_train_step_returns_float_and_updates():
    lm = build(seed=1)
    before = [p.detach().clone() for p in lm.parameters()]
    x, y = batch(1)
    with torch.no_grad():
        expected = lm.eval()(x, targets=y)["loss"].item()
    loss = train.train_step(lm, train.make_optimizer(lm, lr=1e-2), x, y)
    assert type(loss) is float, f"train_step must return a Python float, got {type(loss).__name__}"
    # tolerance: 1e-5 absolute (dropout is 0, so train and eval losses agree)
    assert math.isclose(loss,
                        expected, rel_tol=0,
                        abs_tol=1e-5), f"returned loss {loss} is not the loss before the update {expected}"
    assert lm.training, "train_step must leave the model in train() mode"
    changed = sum(not torch.equal(a, b.detach()) for a, b in zip(before, lm.parameters(), strict=False))
    assert changed > 0, "no parameter changed: was optimizer.step() called?"


def test_train_step_clears_stale_gradients():
    lm = build(seed=2)
    twin = copy.deepcopy(lm)
    for p in lm.parameters():
        p.grad = torch.full_like(p, 1e3)  # left over from some earlier backward()
    x, y = batch(2)
    train.train_step(lm, torch.optim.SGD(lm.parameters(), lr=0.1), x, y)
    train.train_step(twin, torch.optim.SGD(twin.parameters(), lr=0.1), x, y)
    for (name, a), b in zip(lm.named_parameters(), twin.parameters(), strict=False):
        # tolerance: 1e-6 absolute, float32
        assert torch.allclose(a, b, rtol=0, atol=1e-6), f"{name}: stale gradients leaked into the update"


def test_train_step_clips_the_gradient_norm():
    lm = build(seed=3)
    before = [p.detach().clone() for p in lm.parameters()]
    x, y = batch(3)
    # Plain SGD with lr=1 moves the parameters by exactly the (clipped) gradient.
    train.train_step(lm, torch.optim.SGD(lm.parameters(), lr=1.0), x, y, max_grad_norm=1e-3)
    moved = math.sqrt(sum(((a - b.detach()) ** 2).sum().item() for a, b in zip(before, lm.parameters(), strict=False)))
    # tolerance: 1e-6 relative slack on the clip bound
    assert moved <= 1e-3 * (1 + 1e-6), f"update norm {moved:.3e} exceeds max_grad_norm 1e-3: is the gradient clipped?"


def test_non_finite_loss_raises_before_any_update():
    lm = build(seed=4)
    with torch.no_grad():
        lm.head.weight.fill_(float("nan"))
    before = [p.detach().clone() for p in lm.parameters()]
    x, y = batch(4)
    with pytest.raises(FloatingPointError):
        train.train_step(lm, torch.optim.SGD(lm.parameters(), lr=0.1), x, y)
    for (name, b), a in zip(lm.named_parameters(), before, strict=False):
        b = b.detach()
        # tolerance: exact; NaN entries must stay NaN, the others must not move
        same = torch.equal(a.isnan(), b.isnan()) and torch.equal(a.nan_to_num(0.0), b.nan_to_num(0.0))
        assert same, f"{name} changed although the loss was not finite"


def test_fit_fixed_batch_returns_one_loss_per_step_and_learns():
    lm = build(seed=5).double()
    x = torch.tensor([[0, 1, 0, 1]])
    y = torch.tensor([[1, 0, 1, 0]])
    losses = train.fit_fixed_batch(lm, x, y, steps=30)
    assert len(losses) == 30, f"expected 30 losses, got {len(losses)}"
    assert all(type(v) is float for v in losses), "losses must be Python floats"
    assert losses[-1] < losses[0], f"loss did not decrease on a fixed batch: {losses[0]:.4f} -> {losses[-1]:.4f}"
