"""``oracle``: picks the records whose *true* pass rate is nearest the target (0.5): a simulator-only upper reference.

Real training never knows a prompt's true pass rate under the current policy; the simulator does
(``verl_ext.sim``), so this strategy shows how much any pass-rate-driven selection could gain at best. Given a
``true_pass_rate`` callable it takes the ``k`` available records with the smallest ``|p - target|``, ties at
random. The callable receives an ``int64`` array of record ids and returns their pass rates (vectorised, so a
10^5 pool costs one call); set ``vectorized=False`` to pass a per-id function instead. It holds no learned
state, only its RNG (checkpointed); the callable itself is never pickled: pass it again when rebuilding.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from verl_ext.config_model import Bool, Fraction, NonNegInt
from verl_ext.selection.table import TableStrategy, check_k, top_k
from verl_ext.selection.registry import register_strategy


@register_strategy("oracle")
class OracleStrategy(TableStrategy):
    """Nearest true pass rate to ``target``. See the module docstring."""

    def __init__(self, true_pass_rate: Callable[[Any], Any] | None = None, target: Fraction = 0.5,
                 vectorized: Bool = True, seed: NonNegInt = 0) -> None:
        super().__init__(seed)
        if not callable(true_pass_rate):
            raise ValueError("oracle needs a true_pass_rate callable (ids -> pass rates); it exists only in a "
                             "simulator, not in real training")
        self.true_pass_rate = true_pass_rate
        self.target, self.vectorized = target, vectorized

    def _rates(self, ids: np.ndarray) -> np.ndarray:
        if self.vectorized:
            rates = np.asarray(self.true_pass_rate(ids), dtype=np.float64)
        else:
            rates = np.fromiter((self.true_pass_rate(int(i)) for i in ids), dtype=np.float64, count=len(ids))
        if rates.shape != ids.shape:
            raise ValueError(f"oracle: true_pass_rate returned shape {rates.shape} for {len(ids)} ids")
        return rates

    def select(self, pool: Any, k: int, step: int) -> list[int]:
        k = check_k(k)
        ids = pool.available_ids()
        rates = self._rates(ids)
        pos = top_k(-np.abs(rates - self.target), min(k, len(ids)), self._rng)
        self._last = {"select/mean_true_rate": float(rates[pos].mean()) if len(pos) else 0.0}
        return self._take(pool, ids[pos], step)
