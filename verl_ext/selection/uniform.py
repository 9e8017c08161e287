"""``uniform``: the GRPO baseline: a batch drawn uniformly without replacement from all available records.

Unlike ``boundary``, cold records get no priority. Draws are positions in the pool's available order mapped to ids
in O(k) (``QueryPool.ids_at``), so a step costs O(k log n) even for a 10^6-record pool. The strategy owns its
seeded RNG, which is checkpointed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from verl_ext.config_model import NonNegInt
from verl_ext.pool import QueryPool
from verl_ext.selection.base import Strategy
from verl_ext.selection.registry import register_strategy


@register_strategy("uniform")
class UniformStrategy(Strategy):
    """Uniform sampling without replacement among the pool's available records."""

    def __init__(self, seed: NonNegInt = 0) -> None:
        self.seed = seed
        self._rng = np.random.Generator(np.random.PCG64(seed))
        self._last_n = 0

    def select(self, pool: QueryPool, k: int, step: int) -> list[int]:
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 0:
            raise ValueError(f"k must be a non-negative int, got {k!r}")
        n = pool.num_available
        m = min(int(k), n)
        positions = self._rng.choice(n, size=m, replace=False).tolist() if m else []
        ids = pool.ids_at(positions)
        pool.take(ids, step)
        self._last_n = len(ids)
        return ids

    def metrics(self) -> dict[str, float]:
        return {"select/n_selected": float(self._last_n)}

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "seed": self.seed, "rng": self._rng.bit_generator.state}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        super().load_state_dict(state)
        self.seed = state["seed"]
        self._rng.bit_generator.state = state["rng"]
