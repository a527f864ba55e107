"""Calibrate the thresholds of solutions/training/criteria.py on the reference solution.

Runs the reference `fit_fixed_batch` (solutions/training/train.py, imported by path) on the chapter's fixed
batch and on the contradictory-label batch, for many model seeds and a few legitimate choices of betas, built
exactly as the probes build them, and prints the extremes the criteria's thresholds must tolerate:

    .venv/bin/python bench/calibrate_training.py [--seeds 40] [--course-seed 20261130] [--impl other/train.py]

The seeds are 0..N-1 plus the seeds the worker derives for the two overfit probes from the course seed.
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from grader.course import CRITERIA_FILE, PROBES_FILE, import_course_module, load_course  # noqa: E402

evaluation = import_course_module(load_course(ROOT), "training", CRITERIA_FILE).evaluation
probes = import_course_module(load_course(ROOT), "training", PROBES_FILE)
from grader.worker.seeds import probe_seed  # noqa: E402


def load_solution(path: Path):
    spec = importlib.util.spec_from_file_location("train_solution", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["train_solution"] = module
    spec.loader.exec_module(module)
    return module


def optimum(xs, ys) -> float:
    """Lowest reachable mean loss: positions with the same prefix share their logits (same rule as the judge)."""
    groups = defaultdict(list)
    for row, targets in zip(xs, ys, strict=False):
        for t, target in enumerate(targets):
            groups[(t, tuple(row[: t + 1]))].append(target)
    total = sum(-c * math.log(c / len(ts)) for ts in groups.values() for c in Counter(ts).values())
    return total / sum(len(t) for t in ys)


def fit(solution, seed, xs, ys, betas):
    torch.manual_seed(seed)  # the worker seeds each probe exactly like this before the probe builds its model
    lm = probes.fixed_batch_model()
    x, y = torch.tensor(xs), torch.tensor(ys)
    if betas is None:  # the reference fit_fixed_batch as written (AdamW's default betas)
        losses = solution.fit_fixed_batch(lm, x, y, steps=probes.FIT_STEPS, lr=probes.FIT_LR)
    else:  # the same loop with other betas: the contract leaves betas free
        opt = torch.optim.AdamW([p for p in lm.parameters() if p.requires_grad], lr=probes.FIT_LR,
                                betas=betas, weight_decay=0.0)
        losses = [solution.train_step(lm, opt, x, y, max_grad_norm=1.0) for _ in range(probes.FIT_STEPS)]
    lm.eval()
    with torch.no_grad():
        final_loss, _, prediction = evaluation(lm(x)["logits"], ys)  # as the judge computes it
    return losses, {"final_loss": final_loss, "prediction": prediction}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, default=40, help="model seeds 0..N-1 (default 40)")
    parser.add_argument("--course-seed", type=int, default=None, help="also the probes' own seeds for this course seed")
    parser.add_argument("--impl", type=Path, default=ROOT / "solutions" / "training" / "train.py",
                        help="another train.py to measure (a mutant or a variant); default: the reference solution")
    parser.add_argument("--reference-only", action="store_true", help="skip the runs with other betas")
    args = parser.parse_args()
    torch.set_num_threads(1)
    solution = load_solution(args.impl)
    print(f"implementation: {args.impl}")
    if args.course_seed is None:
        import tomllib
        args.course_seed = tomllib.loads((ROOT / "course.toml").read_text())["course"]["seed"]

    settings = {
        "fixed batch": (probes.FIXED_X, probes.FIXED_Y, "overfit_fixed_batch"),
        "contradictory": (probes.CONTRADICTORY_X, probes.CONTRADICTORY_Y, "contradictory_labels"),
    }
    all_betas = [None] if args.reference_only else [None, (0.9, 0.95), (0.8, 0.99)]
    t0 = time.perf_counter()
    for label, (xs, ys, probe_name) in settings.items():
        best = optimum(xs, ys)
        seeds = list(range(args.seeds)) + [probe_seed(args.course_seed, "training", probe_name)]
        print(f"\n== {label}: x={xs} y={ys}  optimum {best:.6f}  ({len(seeds)} seeds x {len(all_betas)} betas)")
        for betas in all_betas:
            finals, gaps, wrong, first_below = [], [], 0, []
            uncontested = [(b, t) for b, row in enumerate(ys) for t in range(len(row))
                           if len({ys[o][t] for o in range(len(ys)) if xs[o][: t + 1] == xs[b][: t + 1]}) == 1]
            for seed in seeds:
                losses, result = fit(solution, seed, xs, ys, betas)
                finals.append(result["final_loss"])
                gaps.append(result["final_loss"] - best)
                wrong += any(result["prediction"][b][t] != ys[b][t] for b, t in uncontested)
                first_below.append(next((i for i, v in enumerate(losses) if v < 0.1), None))
            name = "fit_fixed_batch as written" if betas is None else f"train_step loop, AdamW betas={betas}"
            print(f"  {name:45s} final loss min {min(finals):.5f} max {max(finals):.5f}   "
                  f"final - optimum min {min(gaps):+.2e} max {max(gaps):+.2e}   "
                  f"argmax != y at an uncontested position on {wrong}/{len(seeds)} seeds")
            if label == "fixed batch":
                reached = [s for s in first_below if s is not None]
                print(f"  {'':45s} first step with loss < 0.1: earliest {min(reached) if reached else None}, "
                      f"latest {max(reached) if reached else None}, never on {first_below.count(None)}")
    print(f"\n{time.perf_counter() - t0:.1f} s")


if __name__ == "__main__":
    main()
