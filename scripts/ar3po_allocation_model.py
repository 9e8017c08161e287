"""Expected cost and signal of AR3PO's stage rules against fixed-n GRPO groups, for a fitted pass-rate mix.

Why: AR3PO decides how many responses each prompt gets from its first rewards. Whether that spends rollouts where
a group has an advantage depends on how pass rates are spread over the prompts, which a GRPO run's own groups
measure. This fits a beta distribution of pass rates to the share of n-response groups by number correct (the
`feedback/*` bands every method logs) and draws prompts from it through each rule, so a rule's responses per prompt
and share of rows with a non-zero advantage can be read before a run. On the CPU comparison it predicts what the
runs then measured (docs/ar3po.md): 5.81 responses per prompt and 0.25 of rows with signal for the paper's rule
with stages of 2 (measured 5.70 / 0.26), 5.34 and 0.50 for `mixed` with stages of 4 (measured 5.44 / 0.52), 0.46
for GRPO's fixed groups of 8 (measured 0.47).

    python scripts/ar3po_allocation_model.py                       # the CPU comparison's GRPO groups (n=8)
    python scripts/ar3po_allocation_model.py --bands 0.3,0.1,0.1,0.1,0.1,0.05,0.25
"""

from __future__ import annotations

import argparse
import sys
from math import comb, lgamma

import numpy as np

from verl_ext.ar3po import AR3POConfig, planned_size

# GRPO on the CPU comparison, seeds 3-5, mean over 40 steps of n=8 groups: all wrong, 1-2 correct, 3-4, 5-6, 7,
# all correct (feedback/frac_all_wrong, band_0_25, band_25_50, band_50_75, band_75_100, frac_all_correct)
CPU_BANDS = (0.514, 0.235, 0.113, 0.092, 0.030, 0.017)
BAND_COUNTS = ((0,), (1, 2), (3, 4), (5, 6), (7,), (8,))


def betabinom_pmf(n: int, a: float, b: float) -> np.ndarray:
    def lbeta(x: float, y: float) -> float:
        return lgamma(x) + lgamma(y) - lgamma(x + y)
    return np.array([comb(n, k) * np.exp(lbeta(k + a, n - k + b) - lbeta(a, b)) for k in range(n + 1)])


def fit_beta(bands: tuple[float, ...], n: int = 8) -> tuple[float, float]:
    """Maximum-likelihood beta(a, b) for the observed band shares, by grid search over log a, log b."""
    best, arg = np.inf, (1.0, 1.0)
    for la in np.linspace(-3, 3, 121):
        for lb in np.linspace(-3, 3, 121):
            pmf = betabinom_pmf(n, np.exp(la), np.exp(lb))
            nll = -sum(share * np.log(sum(pmf[k] for k in ks) + 1e-12) for share, ks in zip(bands, BAND_COUNTS))
            if nll < best:
                best, arg = nll, (float(np.exp(la)), float(np.exp(lb)))
    return arg


def simulate(p: np.ndarray, rng: np.random.Generator, k1: int, k_s: int, cap: int, extend: str | None) -> tuple:
    """(responses per prompt, share of rows with a non-zero advantage) for one rule; extend None = fixed groups.

    The stage rule is the recipe's own (``verl_ext.ar3po.planned_size`` drives a real ``StagePlanner``): each prompt
    draws ``cap`` outcomes in generation order and keeps the first ``planned_size`` of them."""
    cfg = None if extend is None else AR3POConfig(k1=k1, k_s=k_s, max_stages=cap, max_per_prompt=cap, extend=extend)
    rows = signal = 0
    for pi in p:
        outcomes = (rng.random(cap) < pi).astype(float)
        group = outcomes[:k1] if cfg is None else outcomes[:planned_size(cfg, outcomes.tolist())]
        rows += len(group)
        signal += len(group) if 0 < group.sum() < len(group) else 0
    return rows / len(p), signal / rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bands", default=",".join(map(str, CPU_BANDS)),
                    help="shares of n=8 groups with 0, 1-2, 3-4, 5-6, 7, 8 correct")
    ap.add_argument("--prompts", type=int, default=40_000)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    bands = tuple(float(x) for x in args.bands.split(","))
    if len(bands) != 6:
        raise SystemExit(f"--bands needs 6 shares, got {len(bands)}")
    a, b = fit_beta(bands)
    rng = np.random.default_rng(args.seed)
    p = rng.beta(a, b, args.prompts)
    lines = [f"pass rates ~ beta({a:.3f}, {b:.3f})", "| rule | responses / prompt | rows with signal |", "|---|---:|---:|"]
    for name, k1, k_s, cap, extend in (("fixed n=8 (GRPO)", 8, 0, 8, None), ("fixed n=4", 4, 0, 4, None),
                                       ("unsolved, stages of 2 up to 8", 2, 2, 8, "unsolved"),
                                       ("unsolved, stages of 4 up to 8", 4, 4, 8, "unsolved"),
                                       ("mixed, stages of 2 up to 8", 2, 2, 8, "mixed"),
                                       ("mixed, stages of 4 up to 8", 4, 4, 8, "mixed")):
        per_prompt, share = simulate(p, rng, k1, k_s, cap, extend)
        lines.append(f"| {name} | {per_prompt:.2f} | {share:.3f} |")
    sys.stdout.write("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
