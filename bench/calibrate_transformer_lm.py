"""Calibrate the thresholds of exercise `transformer_lm` on the reference solution.

Runs the exact training loops of solutions/transformer_lm/probes.py (the fixed-batch overfit and the
contradictory labels) on the reference model over many seeds, and prints the spread of the final eval
losses the hidden criteria judge (cross-entropy computed from the returned logits, as the judge does).

    .venv/bin/python bench/calibrate_transformer_lm.py [--seeds 24]
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from grader.probes import transformer_lm as probes  # noqa: E402  (the loops the probes run)


def load_reference():
    spec = importlib.util.spec_from_file_location("model", ROOT / "solutions" / "transformer_lm" / "model.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["model"] = module
    spec.loader.exec_module(module)
    return module


def eval_loss(logits, targets):
    return float(F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), ignore_index=-100))


def optimum(tokens, targets):
    """Mean over entries of the entropy of the targets that share a row-identical prefix (rows are identical)."""
    B, T = targets.shape
    total = 0.0
    for t in range(T):
        counts: dict[int, int] = {}
        for b in range(B):
            counts[int(targets[b, t])] = counts.get(int(targets[b, t]), 0) + 1
        total += -sum(c * math.log(c / B) for c in counts.values())
    return total / (B * T)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, default=24)
    args = parser.parse_args()
    torch.set_num_threads(1)
    ref = load_reference()

    x, y = torch.tensor(probes.OVERFIT_X), torch.tensor(probes.OVERFIT_Y)
    # The probes write AdamW out (see probes.AdamW); it must follow torch.optim.AdamW step for step.
    worst = 0.0
    for seed in range(3):
        curves = []
        for optimizer_class in (probes.AdamW, torch.optim.AdamW):
            torch.manual_seed(seed)
            curve, logits, _ = probes.train_fixed_batch(ref, probes.OVERFIT_CONFIG, x, y, probes.OVERFIT_STEPS,
                                                        optimizer_class=optimizer_class)
            curves.append(curve + [eval_loss(logits, y)])
        worst = max(worst, max(abs(a - b) for a, b in zip(*curves, strict=False)))
    print(f"probe AdamW vs torch.optim.AdamW: largest loss difference over {probes.OVERFIT_STEPS} steps, 3 "
          f"seeds: {worst:.3e}")

    finals, wrong, seconds = [], 0, []
    for seed in range(args.seeds):
        torch.manual_seed(seed)
        t0 = time.perf_counter()
        curve, logits, _ = probes.train_fixed_batch(ref, probes.OVERFIT_CONFIG, x, y, probes.OVERFIT_STEPS)
        seconds.append(time.perf_counter() - t0)
        finals.append(eval_loss(logits, y))
        wrong += int(not torch.equal(logits.argmax(-1), y))
    print(f"overfit ({probes.OVERFIT_STEPS} steps, {args.seeds} seeds): final eval loss min {min(finals):.3e} "
          f"max {max(finals):.3e}; argmax != y in {wrong} runs; {max(seconds):.2f} s per run at most")

    gaps, opts, seconds = [], [], []
    for seed in range(args.seeds):
        torch.manual_seed(1000 + seed)
        generator = torch.Generator().manual_seed(seed)
        tokens, targets = probes.contradictory_batch(generator)
        t0 = time.perf_counter()
        curve, logits, _ = probes.train_fixed_batch(ref, probes.OVERFIT_CONFIG, tokens, targets,
                                                    probes.CONTRADICTORY_STEPS)
        seconds.append(time.perf_counter() - t0)
        opt = optimum(tokens, targets)
        opts.append(opt)
        gaps.append(eval_loss(logits, targets) - opt)
    print(f"contradictory ({probes.CONTRADICTORY_STEPS} steps, {args.seeds} seeds): optimum "
          f"{min(opts):.6f}..{max(opts):.6f}; "
          f"final loss - optimum min {min(gaps):.3e} max {max(gaps):.3e}; {max(seconds):.2f} s per run at most")


if __name__ == "__main__":
    main()
