"""``mopps``: Model Predictive Prompt Selection (MoPPS, arXiv 2507.04632): Thompson sampling over Beta posteriors.

Each record carries a Beta(alpha, beta) belief about its pass rate, starting at the prior (alpha0, beta0) = (1, 1).
After a group with success rate s over n rollouts the belief is discounted towards the prior and the new evidence
added: ``alpha <- lam*alpha + (1-lam)*alpha0 + s*n``, ``beta <- lam*beta + (1-lam)*beta0 + (1-s)*n``, so stale
evidence fades as the policy changes. To select B records: draw ``ts_ratio * B`` candidates uniformly from the
available ones, sample ``gamma ~ Beta(alpha, beta)`` for each, and keep the B whose ``gamma`` is nearest the target
(``(gamma - target)^2`` smallest; target 0.5 = the largest reward variance). Sampling rather than using the mean
keeps uncertain records in play (exploration for free).

Knobs whose paper value was not available (*unverified*): ``decay`` (default 0.5, the pool's ``beta`` estimator
default), ``ts_ratio`` (default 4), ``target`` (0.5). O(n) per step (the candidate draw); statistics and RNG are
checkpointed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any

import numpy as np
from pydantic import Field

from verl_ext.config_model import Float, Fraction, NonNegInt
from verl_ext.selection.table import TableStrategy, check_k, results_arrays
from verl_ext.selection.registry import register_strategy


_Prior = Annotated[Float, Field(gt=0.0, le=1e9)]


@register_strategy("mopps")
class MoppsStrategy(TableStrategy):
    """Beta posterior per record + Thompson sampling towards a target pass rate. See the module docstring."""

    def __init__(self, decay: Fraction = 0.5, alpha0: _Prior = 1.0, beta0: _Prior = 1.0,
                 ts_ratio: Annotated[Float, Field(ge=1.0, le=1e6)] = 4.0, target: Fraction = 0.5,
                 seed: NonNegInt = 0) -> None:
        self.alpha0, self.beta0 = alpha0, beta0
        # The table's defaults are the prior, so an unseen record reads as Beta(alpha0, beta0) with no special case.
        self.COLUMNS = {"alpha": self.alpha0, "beta": self.beta0}
        super().__init__(seed)
        self.decay, self.ts_ratio, self.target = decay, ts_ratio, target

    def posterior(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(alpha, beta) per id; the prior for ids never observed."""
        return self.stats.get("alpha", ids), self.stats.get("beta", ids)

    def select(self, pool: Any, k: int, step: int) -> list[int]:
        k = check_k(k)
        self.stats.maybe_prune(pool)
        n_avail = pool.num_available
        m = min(n_avail, int(np.ceil(self.ts_ratio * k)))
        # Candidate positions map to ids in O(m) (``ids_at``): no need to list the whole pool.
        positions = self._rng.choice(n_avail, size=m, replace=False) if m else np.empty(0, dtype=np.int64)
        cand = np.asarray(pool.ids_at(positions.tolist()), dtype=np.int64)
        alpha, beta = self.posterior(cand)
        gamma = self._rng.beta(alpha, beta) if m else np.empty(0)
        dist = (gamma - self.target) ** 2
        keep = np.argsort(dist, kind="stable")[:k]
        chosen = cand[keep]
        self._last = {
            "select/n_candidates": float(m),
            "select/mean_sampled_rate": float(gamma[keep].mean()) if len(keep) else 0.0,
            "select/mean_posterior_rate": float((alpha[keep] / (alpha[keep] + beta[keep])).mean()) if len(keep)
            else 0.0,
        }
        return self._take(pool, chosen, step)

    def observe(self, results: Mapping[int, tuple[int, int]], step: int) -> None:
        ids, passes, n = results_arrays(results)
        rows = self.stats.ensure(ids)
        lam = self.decay
        a, b = self.stats.column("alpha"), self.stats.column("beta")
        a[rows] = lam * a[rows] + (1.0 - lam) * self.alpha0 + passes
        b[rows] = lam * b[rows] + (1.0 - lam) * self.beta0 + (n - passes)
