"""``boundary``: HeaPA's selection: a share of cold records, then the records at the capability frontier.

All the work is the pool's boundary sampling (``QueryPool.sample``; ``verl_ext/pool/frontier.py``), configured by
the pool's ``boundary`` (``target`` pass rate or the paper's ``median``), ``cold_fraction`` and ``exploration``,
``sampling_mode`` and child cap; this class only adapts it to the ``Strategy`` interface and reports what was picked.
"""

from __future__ import annotations

from verl_ext.pool import QueryPool
from verl_ext.selection.base import Strategy
from verl_ext.selection.registry import register_strategy


@register_strategy("boundary")
class BoundaryStrategy(Strategy):
    """Boundary (capability-frontier) sampling from the pool; stateless (the RNG is the pool's)."""

    def __init__(self) -> None:
        self._last: dict[str, float] = {}

    def select(self, pool: QueryPool, k: int, step: int) -> list[int]:
        before = pool.counters()
        ids = pool.sample(k, step)
        after = pool.counters()
        picked = max(len(ids), 1)
        self._last = {
            "select/n_selected": float(len(ids)),
            "select/frac_cold": (after["sampled_cold"] - before["sampled_cold"]) / picked,
            "select/frac_extreme": (after["sampled_extreme"] - before["sampled_extreme"]) / picked,
            "select/frac_boundary": (after["sampled_boundary"] - before["sampled_boundary"]) / picked,
            "select/frac_children": (after["sampled_children"] - before["sampled_children"]) / picked,
        }
        return ids

    def metrics(self) -> dict[str, float]:
        return dict(self._last)
