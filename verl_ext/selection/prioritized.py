"""``prioritized``: Kimi k1.5-style prioritized sampling (PS), the baseline of HeaPA's ablation tables.

Each record has a success rate ``s`` (running mean of its group pass rates); its sampling weight is
``((1 - s) + eps) ** (1 / T)`` (paper: eps = 0.1, T = 1), so unsolved prompts are drawn most and solved ones still
keep a floor of ``eps``. A batch is drawn without replacement, each draw proportional to weight among the
records not yet drawn (one vectorised Efraimidis-Spirakis pass). Records never observed use ``s0``: the default
0.0 gives them the largest weight, so the first pass over the data explores. O(n) per step over the n available
records; statistics and RNG are checkpointed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any

import numpy as np
from pydantic import Field

from verl_ext.config_model import Float, Fraction, NonNegInt
from verl_ext.selection.table import TableStrategy, check_k, results_arrays, weighted_without_replacement
from verl_ext.selection.registry import register_strategy


@register_strategy("prioritized")
class PrioritizedStrategy(TableStrategy):
    """Prioritized sampling: weight ``((1-s)+eps)^(1/T)``, without replacement. See the module docstring."""

    COLUMNS = {"rate_sum": 0.0, "visits": 0.0}

    def __init__(self, eps: Annotated[Float, Field(ge=0.0, le=1e6)] = 0.1,
                 temperature: Annotated[Float, Field(gt=0.0, le=1e6)] = 1.0, s0: Fraction = 0.0,
                 seed: NonNegInt = 0) -> None:
        super().__init__(seed)
        self.eps, self.temperature, self.s0 = eps, temperature, s0
        if self.eps == 0.0 and self.s0 == 1.0:
            raise ValueError("prioritized: eps=0 with s0=1 gives unseen records weight 0; raise eps or lower s0")

    def success_rate(self, ids: np.ndarray) -> np.ndarray:
        """Running-mean success rate per id (``s0`` where never observed)."""
        visits = self.stats.get("visits", ids)
        total = self.stats.get("rate_sum", ids)
        return np.where(visits > 0, total / np.maximum(visits, 1.0), self.s0)

    def weights(self, ids: np.ndarray) -> np.ndarray:
        return ((1.0 - self.success_rate(ids)) + self.eps) ** (1.0 / self.temperature)

    def select(self, pool: Any, k: int, step: int) -> list[int]:
        k = check_k(k)
        self.stats.maybe_prune(pool)
        ids = pool.available_ids()
        w = self.weights(ids)
        pos = weighted_without_replacement(w, k, self._rng)
        chosen = ids[pos]
        self._last = {"select/mean_weight": float(w[pos].mean()) if len(pos) else 0.0,
                      "select/frac_unseen": float((~self.stats.has(chosen)).mean()) if len(pos) else 0.0}
        return self._take(pool, chosen, step)

    def observe(self, results: Mapping[int, tuple[int, int]], step: int) -> None:
        ids, passes, n = results_arrays(results)
        rows = self.stats.ensure(ids)
        self.stats.column("rate_sum")[rows] += passes / n
        self.stats.column("visits")[rows] += 1.0
