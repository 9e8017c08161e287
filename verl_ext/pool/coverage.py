"""What the pool knows about its coverage (issue 23): how far a cold draw lands from the target, which records recent
batches trained, how big the frontier is, and the ``pool/*`` coverage metrics.

These are measurements, not a selection rule: ``feedback`` feeds them whatever strategy picked the batch, every
strategy's run reports them (``pool/window_*``, ``pool/cold_distance``, ``pool/better_than_cold``, ...), and their
state (``window``, ``cold_yield``, ``last_cold``) is checkpointed with the pool, where checkpoints written before
the frontier selection moved to ``verl_ext/selection/frontier/`` keep it. HeaPA's exploration rule
(``selection/frontier/exploration.py``) reads them through the public methods here: ``better_than_cold``,
``frontier_size``, ``recently_trained``; it reports the share it chose with ``note_cold_share``.

``better_than_cold`` (``F_d``) counts the picks the frontier draw would make within ``d`` of ``target_pass_rate``,
``d`` the distance a cold draw is expected to read (``ColdYield``): the scored seeds there, plus the children
within ``d`` less the child distance penalty, at most the batch's child budget; ``revisit_penalty`` p counts a
seed trained v times as ``p * v`` farther. It reads the selection knobs it mirrors from ``PoolConfig``.
"""

from __future__ import annotations

import math
from collections import Counter, deque
from typing import Any

from verl_ext.pool.buckets import CHILD_GROUP, SEED_GROUP, ValueBuckets


def frontier_size(buckets: ValueBuckets, target: float, band: float, group: int = SEED_GROUP) -> int:
    """Scored records of ``group`` whose value lies within ``band`` of ``target``. O(band * resolution)."""
    lo = buckets.bucket_of_value(max(0.0, target - band))
    hi = buckets.bucket_of_value(min(1.0, target + band))
    return sum(len(buckets.members(group, b)) for b in range(lo, hi + 1))


class ColdYield:
    """What a cold draw is expected to measure: the mean distance ``|q - target|`` of the first measurements of
    records drawn from the cold queue, each older observation discounted by ``decay`` (0.99: the last ~100 count;
    the unmeasured part of the pool gets easier as the policy learns). O(1) per observation."""

    def __init__(self, decay: float = 0.99) -> None:
        if not 0.0 <= decay < 1.0:
            raise ValueError(f"ColdYield decay must lie in [0, 1), got {decay!r}")
        self.decay = decay
        self.weight = 0.0  # discounted count of observations
        self.total = 0.0  # discounted sum of distances

    def observe(self, distance: float) -> None:
        self.weight = self.weight * self.decay + 1.0
        self.total = self.total * self.decay + distance

    def mean(self) -> float | None:
        """The expected distance; ``None`` before the first observation."""
        return self.total / self.weight if self.weight > 0 else None

    def state_dict(self) -> dict[str, Any]:
        return {"decay": self.decay, "weight": self.weight, "total": self.total}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.decay = float(state.get("decay", self.decay))
        self.weight, self.total = float(state["weight"]), float(state["total"])


class SelectionWindow:
    """The ids trained in each of the last ``steps`` steps (fed by ``QueryPool.feedback``). O(k) per feedback."""

    def __init__(self, steps: int) -> None:
        self.steps = steps
        self._batches: deque[tuple[int, list[int]]] = deque()
        self._visits: Counter[int] = Counter()

    def add(self, step: int, ids: list[int]) -> None:
        if not ids:
            return
        if self._batches and self._batches[-1][0] == step:
            self._batches[-1][1].extend(ids)
        else:
            self._batches.append((step, list(ids)))
        self._visits.update(ids)
        while self._batches and self._batches[0][0] <= step - self.steps:
            _, old = self._batches.popleft()
            self._visits.subtract(old)
            for rid in old:
                if self._visits[rid] <= 0:
                    del self._visits[rid]

    def saturated(self, limit: int) -> set[int]:
        """Ids trained at least ``limit`` times in the window. O(window size)."""
        return {rid for rid, v in self._visits.items() if v >= limit}

    def metrics(self) -> dict[str, float]:
        """``pool/window_distinct`` (records trained in the window), ``pool/window_visits`` (mean trainings per
        such record; 1.0 = no record trained twice), ``pool/window_max_visits``."""
        distinct = len(self._visits)
        total = sum(self._visits.values())
        return {
            "pool/window_distinct": float(distinct),
            "pool/window_visits": total / distinct if distinct else 0.0,
            "pool/window_max_visits": float(max(self._visits.values(), default=0)),
        }

    def state_dict(self) -> dict[str, Any]:
        return {"steps": self.steps, "batches": [[step, list(ids)] for step, ids in self._batches]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._batches.clear()
        self._visits.clear()
        for step, ids in state["batches"]:
            self._batches.append((int(step), [int(i) for i in ids]))
            self._visits.update(int(i) for i in ids)
        last = self._batches[-1][0] if self._batches else None
        if last is not None:  # a window that shrank on resume drops its oldest steps
            while self._batches and self._batches[0][0] <= last - self.steps:
                _, old = self._batches.popleft()
                self._visits.subtract(old)
            self._visits = Counter({rid: v for rid, v in self._visits.items() if v > 0})


_count_frontier = frontier_size  # the module function, under a name the mixin's method does not shadow


class PoolCoverageMixin:
    """``QueryPool``'s coverage measurements. Uses the pool's ``config``, ``_cold``, ``_scored``, ``_window``,
    ``_cold_yield``, ``_records``, ``_measured``, ``_last_cold`` and ``child_calibration``."""

    def recently_trained(self, limit: int) -> set[int]:
        """Ids trained at least ``limit`` times in the last ``metrics_window`` steps (the re-visit bound)."""
        return self._window.saturated(limit)

    def note_cold_share(self, rule: float, drawn: float) -> None:
        """Record the cold share a selection rule asked for and the share it drew (``pool/cold_share_*``)."""
        self._last_cold = (rule, drawn)

    def better_than_cold(self, limit: int | None = None) -> int | None:
        """``F_d``: the picks the frontier draw would make nearer the target than a cold draw is expected to be
        (seeds, and children as the draw ranks them, at most ``max_child_fraction`` of ``limit``); ``None``
        before any cold draw was measured. With ``revisit_penalty`` p a seed trained v times counts as ``p * v``
        farther; the walk outwards from the target then stops once ``limit`` are found. O(d * resolution)
        without the penalty, O(d * resolution + seeds walked) with it."""
        d = self._cold_yield.mean()
        if d is None:
            return None
        target, penalty = self.config.target_pass_rate, self.config.revisit_penalty
        kids = self._children_better_than(d, limit)
        if penalty <= 0:
            return _count_frontier(self._scored, target, d) + kids
        buckets, res = self._scored, self._scored.resolution
        centre, count = buckets.bucket_of_value(target), 0
        for dist in range(int(d * res) + 1):
            for b in {centre - dist, centre + dist}:
                if 0 <= b < res:
                    count += sum(1 for rid in buckets.members(SEED_GROUP, b)
                                 if dist / res + penalty * self._records[rid].visits <= d)
            if limit is not None and count + kids >= limit:
                break
        return count + kids

    def _children_better_than(self, d: float, limit: int | None) -> int:
        """Children the frontier draw would take before a pick at distance ``d``: those within ``d`` minus the
        child distance penalty, at most the batch's child budget (``max_child_fraction`` of ``limit``)."""
        cfg = self.config
        if self._scored.groups < 2:
            return 0
        penalty = cfg.child_distance_penalty
        if penalty is None:
            penalty = self.child_calibration.frontier_penalty()
        if d - penalty < 0:
            return 0
        found = _count_frontier(self._scored, cfg.target_pass_rate, d - penalty, group=CHILD_GROUP)
        if limit is not None and cfg.max_child_fraction < 1.0:
            found = min(found, math.floor(cfg.max_child_fraction * limit))
        return found

    def _observe_cold(self, value: float) -> None:
        """Called by ``feedback`` after the first measurement of a record drawn from the cold queue (no ranking
        value before): its estimate, on the scale the frontier is ranked on, tells what a cold draw yields."""
        self._cold_yield.observe(abs(value - self.config.target_pass_rate))

    def coverage_metrics(self) -> dict[str, float]:
        """How much of the pool has been measured, how big the frontier set is, how many distinct records recent
        batches trained and how often each, the cold share the rule asked for and drew, and what a cold draw is
        expected to measure (``pool/cold_distance``, -1 before any) with ``pool/better_than_cold`` (``F_d``)."""
        out = {
            "pool/measured": float(self._measured),
            "pool/measured_share": self._measured / len(self._records) if self._records else 0.0,
            "pool/frontier_size": float(self.frontier_size()),
            "pool/cold_share_rule": self._last_cold[0], "pool/cold_share_drawn": self._last_cold[1],
        }
        d, better = self._cold_yield.mean(), self.better_than_cold()
        out["pool/cold_distance"] = -1.0 if d is None else d
        out["pool/better_than_cold"] = -1.0 if better is None else float(better)
        out.update(self._window.metrics())
        if self.config.boundary == "progress":
            out.update(self._progress.metrics())
        return out

    def frontier_size(self) -> int:
        """Pooled seeds whose ranking value lies within ``frontier_band`` of ``target_pass_rate``. O(band)."""
        return _count_frontier(self._scored, self.config.target_pass_rate, self.config.frontier_band)
