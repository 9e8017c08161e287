"""``FeedbackSummary``: what one ``QueryPool.feedback`` call observed (spec section 3 logging)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


BANDS = (("band_0_25", 0.0, 0.25), ("band_25_50", 0.25, 0.5), ("band_50_75", 0.5, 0.75), ("band_75_100", 0.75, 1.0))


@dataclass(frozen=True)
class FeedbackSummary:
    """Per-call statistics of the fed-back groups.

    ``prior_*`` cover records measured for the first time whose ranking value was an estimate (an augmented
    child's prior, possibly lineage-refreshed): how far that estimate was from the first measured pass rate.
    ``pass_rates`` maps record id -> the group's pass rate.
    """

    n_records: int = 0
    n_rollouts: int = 0
    mean_pass_rate: float = 0.0
    frac_all_correct: float = 0.0
    frac_all_wrong: float = 0.0
    n_prior_checked: int = 0
    prior_abs_error: float | None = None
    prior_bias: float | None = None
    pass_rates: dict[int, float] = field(default_factory=dict)

    @classmethod
    def from_groups(cls, groups: list[tuple[int, int, int]], prior_errors: list[float]) -> "FeedbackSummary":
        """``groups``: (id, passes, n) triples; ``prior_errors``: estimate - actual for first-measured children."""
        if not groups:
            return cls()
        passes = np.array([g[1] for g in groups], dtype=np.float64)
        ns = np.array([g[2] for g in groups], dtype=np.float64)
        rates = passes / ns
        errs = np.array(prior_errors, dtype=np.float64)
        return cls(
            n_records=len(groups),
            n_rollouts=int(ns.sum()),
            mean_pass_rate=float(rates.mean()),
            frac_all_correct=float(np.mean(passes == ns)),
            frac_all_wrong=float(np.mean(passes == 0)),
            n_prior_checked=len(prior_errors),
            prior_abs_error=float(np.abs(errs).mean()) if len(errs) else None,
            prior_bias=float(errs.mean()) if len(errs) else None,
            pass_rates={g[0]: float(r) for g, r in zip(groups, rates.tolist())},
        )

    def metrics(self, prefix: str = "feedback/") -> dict[str, float]:
        """Scalars for the tracker (``None`` fields are left out)."""
        out = {
            prefix + "n_records": float(self.n_records),
            prefix + "n_rollouts": float(self.n_rollouts),
            prefix + "mean_pass_rate": self.mean_pass_rate,
            prefix + "frac_all_correct": self.frac_all_correct,
            prefix + "frac_all_wrong": self.frac_all_wrong,
            prefix + "n_prior_checked": float(self.n_prior_checked),
        }
        if self.prior_abs_error is not None:
            out[prefix + "prior_abs_error"] = self.prior_abs_error
            out[prefix + "prior_bias"] = float(self.prior_bias)
        if self.pass_rates:
            rates = np.fromiter(self.pass_rates.values(), dtype=np.float64)
            q = np.quantile(rates, [0.1, 0.5, 0.9])
            out.update({prefix + "pass_rate_p10": q[0], prefix + "pass_rate_p50": q[1], prefix + "pass_rate_p90": q[2]})
            # share of the groups by pass-rate band between all-wrong (frac_all_wrong) and all-right
            # (frac_all_correct): where the batch's signal sits, comparable across methods
            for name, low, high in BANDS:
                out[prefix + name] = float(np.mean((rates > low) & (rates <= high) & (rates < 1.0)))
        return {k: float(v) for k, v in out.items()}
