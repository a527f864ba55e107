"""Public sanity tests for exercise layer_norm. Run: pytest exercises/layer_norm

These check one behaviour each on small inputs. The hidden grader checks more,
on other inputs; passing here is necessary, not sufficient.
"""

import math

import torch
import torch.nn as nn

import norm


def test_parameters_are_ones_and_zeros():
    ln = norm.LayerNorm(6)
    assert isinstance(ln.weight, nn.Parameter) and isinstance(ln.bias, nn.Parameter), \
        "weight and bias must be nn.Parameter so that optimizers and state_dict see them"
    assert ln.weight.shape == (6,) and ln.bias.shape == (6,), \
        f"expected weight and bias of shape (6,), got {tuple(ln.weight.shape)} and {tuple(ln.bias.shape)}"
    assert torch.equal(ln.weight.detach(), torch.ones(6)), "weight must start at ones"
    assert torch.equal(ln.bias.detach(), torch.zeros(6)), "bias must start at zeros"


def test_output_shape_and_dtype():
    x = torch.randn(2, 5, 8)
    y = norm.LayerNorm(8)(x)
    assert y.shape == x.shape, f"expected shape {tuple(x.shape)}, got {tuple(y.shape)}"
    assert y.dtype == x.dtype, f"expected dtype {x.dtype}, got {y.dtype}"


def test_population_variance_by_hand():
    # row [1, 2, 3, 4]: mean 2.5, population variance 1.25 (the unbiased estimate would be 5/3)
    x = torch.tensor([[1.0, 2.0, 3.0, 4.0]], dtype=torch.float64)
    y = norm.LayerNorm(4).double()(x)
    s = math.sqrt(1.25 + 1e-5)
    expected = torch.tensor([[-1.5 / s, -0.5 / s, 0.5 / s, 1.5 / s]], dtype=torch.float64)
    # tolerance: 1e-5 absolute and relative: a LayerNorm may compute in float32 inside (allowed), which rounds
    # these values by about 1e-7; the unbiased variance would change them by 13%
    torch.testing.assert_close(y, expected, rtol=1e-5, atol=1e-5,
                               msg=lambda m: f"normalised [1, 2, 3, 4] is wrong (population variance?):\n{m}")


def test_eps_inside_the_square_root():
    # variance 1e-6 is smaller than eps = 1e-5, so where eps sits changes the answer a lot:
    # inside the root 1e-3 / sqrt(1.1e-5) ~ 0.3015; outside 1e-3 / (1e-3 + 1e-5) ~ 0.990
    x = torch.tensor([[-1e-3, 1e-3]], dtype=torch.float64)
    y = norm.LayerNorm(2, eps=1e-5).double()(x)
    v = 1e-3 / math.sqrt(1e-6 + 1e-5)
    expected = torch.tensor([[-v, v]], dtype=torch.float64)
    # tolerance: 1e-3 absolute and relative; eps outside the root would give 0.990 instead of 0.3015
    torch.testing.assert_close(y, expected, rtol=1e-3, atol=1e-3,
                               msg=lambda m: f"eps must be added to the variance inside the square root:\n{m}")


def test_constant_row_gives_bias_and_no_nan():
    x = torch.full((3, 5), 7.0)
    y = norm.LayerNorm(5)(x)
    assert torch.isfinite(y).all(), "a constant row must not produce NaN or inf"
    # tolerance: exact zeros are expected (x - mean is exactly 0), allow 1e-6
    torch.testing.assert_close(y, torch.zeros(3, 5), rtol=0, atol=1e-6,
                               msg=lambda m: f"a constant row normalises to 0, so the output is the bias:\n{m}")


def test_matches_torch_layer_norm_with_affine():
    torch.manual_seed(0)
    x = torch.randn(2, 3, 10, dtype=torch.float64) * 3 + 1
    ours, ref = norm.LayerNorm(10, eps=1e-5).double(), nn.LayerNorm(10, eps=1e-5).double()
    with torch.no_grad():
        w, b = torch.randn(10, dtype=torch.float64), torch.randn(10, dtype=torch.float64)
        ours.weight.copy_(w)
        ours.bias.copy_(b)
        ref.weight.copy_(w)
        ref.bias.copy_(b)
    # tolerance: 1e-5 absolute and relative; float32 inside (allowed) rounds outputs of size ~5 by about 1e-6
    torch.testing.assert_close(ours(x), ref(x), rtol=1e-5, atol=1e-5,
                               msg=lambda m: f"LayerNorm differs from torch.nn.LayerNorm:\n{m}")


def test_each_token_is_normalised_on_its_own():
    # normalising over the last axis means changing one token leaves every other token's output alone
    torch.manual_seed(1)
    ln = norm.LayerNorm(8)
    x = torch.randn(1, 4, 8)
    x2 = x.clone()
    x2[0, 3] = x2[0, 3] * 10 + 5
    y, y2 = ln(x), ln(x2)
    # tolerance: 0 (bitwise); tokens 0..2 did not change
    assert torch.equal(y[0, :3], y2[0, :3]), \
        "changing token 3 changed the outputs of tokens 0..2: statistics are taken over the wrong axis"


def test_gradients_reach_input_weight_and_bias():
    torch.manual_seed(2)
    ln = norm.LayerNorm(6)
    x = torch.randn(3, 6, requires_grad=True)
    (ln(x) * torch.randn(3, 6)).sum().backward()
    for name, g in [("x", x.grad), ("weight", ln.weight.grad), ("bias", ln.bias.grad)]:
        assert g is not None, f"no gradient reached {name}"
        assert torch.isfinite(g).all(), f"gradient of {name} is not finite"


def test_prenorm_zero_sublayer_is_identity():
    class Zero(nn.Module):
        def forward(self, h):
            return torch.zeros_like(h)

    block = norm.PreNormResidual(8, Zero())
    assert isinstance(block.norm, norm.LayerNorm), f"block.norm must be a LayerNorm, got {type(block.norm).__name__}"
    x = torch.randn(2, 3, 8)
    # tolerance: 0 (bitwise); x + 0 is x
    assert torch.equal(block(x), x), "with a sublayer that returns zeros the block must return x unchanged"


def test_prenorm_adds_sublayer_of_normalised_input_without_touching_x():
    torch.manual_seed(3)
    sub = nn.Linear(8, 8)
    block = norm.PreNormResidual(8, sub)
    assert block.sublayer is sub, "block.sublayer must be the module that was passed in"
    x = torch.randn(2, 3, 8)
    x_before = x.clone()
    y = block(x)
    assert torch.equal(x, x_before), "forward modified its input in place; the residual stream must stay intact"
    expected = x_before + sub(nn.functional.layer_norm(x_before, (8,)))
    # tolerance: 1e-5 absolute, float32
    torch.testing.assert_close(y, expected, rtol=0, atol=1e-5,
                               msg=lambda m: f"forward must return x + sublayer(norm(x)):\n{m}")
