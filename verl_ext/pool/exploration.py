"""How much of a batch explores never-measured (cold) records, and what the pool knows about its coverage (issue 23).

``PoolConfig.exploration`` chooses the rule for the cold share ``c`` of a batch of ``k``:

- ``greedy`` (default): a seat goes to a cold record when the frontier draw has no pick left that is expected
  nearer the target than a cold draw. ``c = clip(1 - F_d / k, cold_fraction, 1)``, with ``d`` the distance from
  ``target_pass_rate`` a cold draw is expected to read (``ColdYield``: the discounted mean ``|v - target|`` of
  the estimates ``v`` that records drawn from the cold queue got at their first measurement: the scale the
  frontier is ranked on) and ``F_d`` the picks the frontier draw would make within ``d`` of the target: the
  scored seeds there, plus the children within ``d`` less the child distance penalty, at most the batch's
  child budget. The draw walks outwards from the target, so after ``F_d`` records its next pick is expected to
  be worse than a never-measured one. While the measured frontier is rich (``F_d >= (1 - cold_fraction) k``,
  the usual case) the share is the floor ``cold_fraction``, the ``fixed`` rule; it rises only where the
  frontier is thin relative to what the unmeasured part of the pool offers, and never where cold draws are
  worse than the frontier (mostly solved or hopeless pools). Before any cold draw was measured, and under
  ``boundary: median`` (whose draw is not centred on the target), ``c = cold_fraction``.
  ``revisit_penalty`` p (0 = off) counts a seed trained v times as ``p * v`` farther from the target in
  ``F_d``: opt-in, for runs where re-training one prompt is believed to teach less (docs/pool.md).
- ``fixed``: ``c = cold_fraction`` (0.25 was chosen in the simulator on scenarios that measure every seed well
  within the run).
- ``adaptive``: ``c = clip(1 - F / (frontier_batches * k), cold_fraction, 1)``, with ``F`` the measured seeds
  whose ranking value lies within ``frontier_band`` of ``target_pass_rate`` (the frontier set; children do not
  count, their priors are shrunk towards 0.5): it keeps ``frontier_batches`` batches' worth of frontier in stock
  whatever a cold draw is worth, and lost in the simulator where the frontier is thin by nature.

``max_window_visits`` (any rule; ``None`` = off) bounds re-selection: a frontier pick already trained that many
times in the last ``metrics_window`` steps goes back to the pool and its seat to a never-measured record, while
the cold queue has any.

Every rule takes cold records only while the cold queue has some, and all of them when the scored records cannot
fill the batch. ``SelectionWindow`` keeps the records trained in the last ``metrics_window`` steps, for the
coverage metrics (distinct records and visits per record per window); it and ``ColdYield`` are checkpointed with
the pool.
"""

from __future__ import annotations

import math
from collections import Counter, deque
from typing import Any

from verl_ext.pool.buckets import ValueBuckets

SEED_GROUP, CHILD_GROUP = 0, 1


def frontier_size(buckets: ValueBuckets, target: float, band: float, group: int = SEED_GROUP) -> int:
    """Scored records of ``group`` whose value lies within ``band`` of ``target``. O(band * resolution)."""
    lo = buckets.bucket_of_value(max(0.0, target - band))
    hi = buckets.bucket_of_value(min(1.0, target + band))
    return sum(len(buckets.members(group, b)) for b in range(lo, hi + 1))


def greedy_cold_share(better: int, k: int, floor: float) -> float:
    """``clip(1 - better / k, floor, 1)``: the rule of ``exploration: greedy`` (``better`` = ``F_d``)."""
    if k <= 0:
        return floor
    return min(1.0, max(floor, 1.0 - better / k))


def adaptive_cold_share(frontier: int, k: int, frontier_batches: float, floor: float) -> float:
    """``clip(1 - frontier / (frontier_batches * k), floor, 1)``: the rule of ``exploration: adaptive``."""
    if k <= 0:
        return floor
    thin = 1.0 - frontier / (frontier_batches * k) if frontier_batches > 0 else 0.0
    return min(1.0, max(floor, thin))


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


class PoolExplorationMixin:
    """``QueryPool``'s exploration: the cold share of a batch, the frontier set's size, the re-visit bound, the
    coverage metrics. Uses the pool's ``config``, ``_cold``, ``_scored``, ``_window``, ``_cold_yield``,
    ``_records``, ``_measured``, ``_last_cold``, ``ranking_value`` and ``_group``."""

    def _cap_revisits(self, picked: list[int]) -> tuple[list[int], list[int]]:
        """``max_window_visits``: frontier picks trained that many times in the window go back to the buckets and
        their seats to cold records (while there are any). Returns ``(kept picks, cold replacements)``."""
        limit = self.config.max_window_visits
        if limit is None or not self._cold or not picked:
            return picked, []
        saturated = self._window.saturated(limit)
        drop = [rid for rid in picked if rid in saturated][:len(self._cold)]
        if not drop:
            return picked, []
        for rid in drop:
            self._scored.insert(rid, self.ranking_value(rid), self._group(rid))
        dropped = set(drop)
        return [rid for rid in picked if rid not in dropped], [self._cold.pop()[0] for _ in drop]

    def cold_share(self, k: int) -> float:
        """The share of a batch of ``k`` the cold queue may take now (``exploration``; see ``exploration.py``)."""
        cfg = self.config
        if cfg.exploration == "fixed" or not self._cold:
            return cfg.cold_fraction
        if cfg.exploration == "greedy":
            better = self.better_than_cold(k) if cfg.boundary == "target" else None
            return cfg.cold_fraction if better is None else greedy_cold_share(better, k, cfg.cold_fraction)
        return adaptive_cold_share(self.frontier_size(), k, cfg.frontier_batches, cfg.cold_fraction)

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
        return out

    def frontier_size(self) -> int:
        """Pooled seeds whose ranking value lies within ``frontier_band`` of ``target_pass_rate``. O(band)."""
        return _count_frontier(self._scored, self.config.target_pass_rate, self.config.frontier_band)
