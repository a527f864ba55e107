"""Public sanity tests for exercise decoder_block. Run: pytest exercises/decoder_block

These check one behaviour each on small inputs. The hidden grader checks more,
on other inputs and sizes; passing here is necessary, not sufficient.
"""

import pytest
import torch
import torch.nn as nn

import block


def test_projections_are_square_and_bias_free():
    attn = block.CausalSelfAttention(12, 3)
    for name in ("q_proj", "k_proj", "v_proj", "out_proj"):
        layer = getattr(attn, name, None)
        assert isinstance(layer, nn.Linear), f"{name} must be an nn.Linear, got {type(layer).__name__}"
        assert tuple(layer.weight.shape) == (12, 12), f"{name}.weight must be [12, 12], got {tuple(layer.weight.shape)}"
        assert layer.bias is None, f"{name} must have bias=False"


def test_heads_must_divide_d_model():
    with pytest.raises(ValueError):
        block.CausalSelfAttention(10, 3)
    with pytest.raises(ValueError):
        block.CausalSelfAttention(8, 0)


def test_output_shape():
    attn = block.CausalSelfAttention(16, 4)
    x = torch.randn(2, 5, 16)
    y = attn(x)
    assert y.shape == (2, 5, 16), f"expected [B, T, C] = (2, 5, 16), got {tuple(y.shape)}"


def test_single_token_attends_to_itself_only():
    # with T = 1 the only weight is 1, so the output is out_proj(v_proj(x))
    torch.manual_seed(0)
    attn = block.CausalSelfAttention(8, 2).eval()
    x = torch.randn(3, 1, 8)
    expected = attn.out_proj(attn.v_proj(x))
    # tolerance: 1e-5 absolute, float32, the grader's: only the order of floating-point operations may differ
    torch.testing.assert_close(attn(x), expected, rtol=0, atol=1e-5,
                               msg=lambda m: f"a single token must return out_proj(v_proj(x)):\n{m}")


# d_model = 4, 2 heads, written-down weights and input; the outputs were computed once and rounded to 6 decimals.
WORKED = {
    3: [[0.736970, 1.124848, 1.512727, 0.349091], [0.271515, 0.659394, 1.047273, -0.116364],
        [2.156410, -2.007483, -6.171376, 6.320303]],
    # as many heads as positions: merging the heads without the transpose fails here
    2: [[0.426667, 1.036190, 1.645714, -0.182857], [1.538731, -1.414237, -4.367207, 4.491700]],
}


@pytest.mark.parametrize("T", list(WORKED), ids=["H!=T", "H==T"])
def test_matches_a_worked_example(T):
    attn = block.CausalSelfAttention(4, 2).eval()
    with torch.no_grad():
        for i, name in enumerate(("q_proj", "k_proj", "v_proj", "out_proj")):
            getattr(attn, name).weight.copy_(torch.linspace(-1, 1, 16).view(4, 4).roll(i, dims=0))
        y = attn(torch.linspace(-1.5, 1.5, T * 4).view(1, T, 4))
    # tolerance: 1e-5 absolute, float32 against 6 decimals
    torch.testing.assert_close(y[0], torch.tensor(WORKED[T]), rtol=0, atol=1e-5,
                               msg=lambda m: f"output differs from causal multi-head attention:\n{m}")


def test_future_tokens_do_not_leak():
    torch.manual_seed(2)
    blk = block.DecoderBlock(16, 4, 32).eval()
    x = torch.randn(2, 7, 16)
    x_changed = x.clone()
    x_changed[:, 4:] = torch.randn(2, 3, 16) * 5
    with torch.no_grad():
        y, y_changed = blk(x), blk(x_changed)
    # tolerance: 1e-6 absolute on positions 0..3, which cannot see positions 4..6
    torch.testing.assert_close(y_changed[:, :4], y[:, :4], rtol=0, atol=1e-6,
                               msg=lambda m: f"changing future tokens changed earlier outputs:\n{m}")


def test_dropout_acts_in_train_mode_only():
    torch.manual_seed(3)
    attn = block.CausalSelfAttention(16, 4, dropout=0.5)
    x = torch.randn(2, 8, 16)
    attn.eval()
    # tolerance: 0 (bitwise); eval() must be deterministic
    assert torch.equal(attn(x), attn(x)), "in eval() mode two calls must give identical outputs"
    attn.train()
    assert not torch.equal(attn(x), attn(x)), "with dropout=0.5 in train() mode two calls should differ"


def test_gradients_reach_every_projection():
    torch.manual_seed(4)
    attn = block.CausalSelfAttention(8, 2)
    attn(torch.randn(2, 5, 8)).pow(2).sum().backward()
    for name in ("q_proj", "k_proj", "v_proj", "out_proj"):
        g = getattr(attn, name).weight.grad
        assert g is not None, f"no gradient reached {name}.weight"
        assert torch.isfinite(g).all(), f"gradient of {name}.weight is not finite"


@pytest.mark.parametrize("d_model,n_heads,d_ff", [(8, 2, 32), (12, 3, 20)])
def test_count_matches_a_built_block(d_model, n_heads, d_ff):
    built = sum(p.numel() for p in block.DecoderBlock(d_model, n_heads, d_ff).parameters())
    counted = block.count_block_parameters(d_model, n_heads, d_ff)
    assert type(counted) is int, f"count_block_parameters must return a Python int, got {type(counted).__name__}"
    # tolerance: exact
    assert counted == built, f"counted {counted} parameters, the built block has {built}"


def test_count_is_an_exact_int_for_large_sizes():
    # far too large to build; the answer must still be an exact Python int (no floats, no module)
    counted = block.count_block_parameters(32768, 64, 131072)
    assert type(counted) is int, f"expected a Python int, got {type(counted).__name__}"
    assert counted > 32768 * 32768, f"a block this size has more than d_model**2 parameters, got {counted}"
