"""The initialisation criterion of `transformer_lm` is a statistical test: it must pass a correct N(0, 0.02) init on
every seed and fail PyTorch's default init, on the model size its probe builds."""

import torch

from grader.probes.lm import Config, TransformerLM
from conftest import criteria_module, probes_module

initialisation_problems = criteria_module("transformer_lm").initialisation_problems
INIT_CONFIG = probes_module("transformer_lm").INIT_CONFIG

SEEDS = 300


def parameters(model) -> dict[str, torch.Tensor]:
    return {name: p.detach() for name, p in model.named_parameters()}


def test_the_contract_init_passes_on_every_seed():
    worst_std, worst_mean = 0.0, 0.0
    for seed in range(SEEDS):
        torch.manual_seed(seed)
        measured, wrong = initialisation_problems(parameters(TransformerLM(Config(**INIT_CONFIG))))
        assert not wrong, f"seed {seed}: {wrong}"
        matrices = [m for m in measured if "std" in m]
        worst_std = max(worst_std, max(abs(m["std"] / 0.02 - 1) for m in matrices))
        worst_mean = max(worst_mean, max(abs(m["mean"]) for m in matrices))
    # the tolerances (25 % on the std, 0.005 on the mean) leave a wide margin over what 300 seeds reach
    assert worst_std < 0.15 and worst_mean < 0.003, (worst_std, worst_mean)


def test_truncated_normal_passes_and_pytorch_defaults_fail():
    torch.manual_seed(0)
    model = TransformerLM(Config(**INIT_CONFIG))
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() >= 2:
                torch.nn.init.trunc_normal_(p, std=0.02, a=-0.04, b=0.04)
    assert not initialisation_problems(parameters(model))[1]
    for module in model.modules():
        if isinstance(module, (torch.nn.Linear, torch.nn.Embedding)):
            module.reset_parameters()   # what a model whose __init__ never applies the contract's init holds
    measured, wrong = initialisation_problems(parameters(model))
    assert len(wrong) == len(measured), [m for m in measured if m not in wrong]   # every matrix and every bias


def test_norm_parameters_are_not_judged_and_biases_must_be_zero():
    torch.manual_seed(1)
    model = TransformerLM(Config(**INIT_CONFIG))
    with torch.no_grad():
        model.final_norm.weight.fill_(3.0)
        model.blocks[0].ln_attention.bias.fill_(0.5)
    assert not initialisation_problems(parameters(model))[1]
    with torch.no_grad():
        model.blocks[1].feedforward.fc_out.bias[3] = 1e-3
    wrong = initialisation_problems(parameters(model))[1]
    assert [m["parameter"] for m in wrong] == ["blocks.1.feedforward.fc_out.bias"]
