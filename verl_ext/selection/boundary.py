"""``boundary``: HeaPA's selection: a share of cold records, then the records at the capability frontier.

The rule is ``verl_ext/selection/frontier/`` (``draw_batch``: the cold share of ``exploration.py``, the frontier
draws of ``draw.py``), configured by the pool's ``boundary`` (``target`` pass rate, the paper's ``median``,
``signal`` or the measured split ``progress``),
``cold_fraction`` and ``exploration``, ``sampling_mode`` and ``child_distance_penalty``: the strategy's options
(``heapa.selection.kwargs.*`` in the recipe), which the recipe sets on the pool's config.
The pool only stores: it hands its buckets, cold queue, RNG and coverage measurements to the rule.
"""

from __future__ import annotations

from verl_ext.pool import QueryPool
from verl_ext.pool.config import FRONTIER_FIELDS
from verl_ext.selection.base import Strategy
from verl_ext.selection.frontier import draw_batch
from verl_ext.selection.registry import register_strategy


@register_strategy("boundary")
class BoundaryStrategy(Strategy):
    """Boundary (capability-frontier) sampling from the pool. No state of its own: the RNG and the coverage state
    the rule reads are the pool's, checkpointed with it (where runs written before the rule moved keep them). Its
    options (``boundary``, ``cold_fraction``, ...) are fields of the pool's config, which the rule reads."""

    pool_fields = FRONTIER_FIELDS

    def __init__(self) -> None:
        self._last: dict[str, float] = {}

    def select(self, pool: QueryPool, k: int, step: int) -> list[int]:
        before = pool.counters()
        ids = draw_batch(pool, k, step)
        after = pool.counters()
        picked = max(len(ids), 1)
        self._last = {
            "select/n_selected": float(len(ids)),
            "select/frac_cold": (after["sampled_cold"] - before["sampled_cold"]) / picked,
            "select/frac_extreme": (after["sampled_extreme"] - before["sampled_extreme"]) / picked,
            "select/frac_boundary": (after["sampled_boundary"] - before["sampled_boundary"]) / picked,
            "select/frac_children": (after["sampled_children"] - before["sampled_children"]) / picked,
        }
        if pool.config.boundary == "progress":  # the split the measured rule chose for this batch
            self._last["select/progress_share"] = pool.draw_progress.share
        return ids

    def metrics(self) -> dict[str, float]:
        return dict(self._last)
