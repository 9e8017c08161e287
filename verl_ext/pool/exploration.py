"""How much of a batch explores never-measured (cold) records, and what the pool knows about its coverage (issue 23).

``PoolConfig.exploration`` chooses the rule for the cold share ``c`` of a batch of ``k``:

- ``fixed``: ``c = cold_fraction`` (0.25 was chosen in the simulator on scenarios that measure every seed well
  within the run).
- ``adaptive``: ``c = clip(1 - F / (frontier_batches * k), cold_fraction, 1)``, with ``F`` the measured seeds
  whose ranking value lies within ``frontier_band`` of ``target_pass_rate`` (the frontier set). While the frontier
  set holds fewer than ``frontier_batches`` batches' worth of records, the frontier draw would hand out the same
  few records step after step (with reinsertion ``always`` they come straight back), so the seats it cannot fill
  with fresh frontier material go to never-measured records; once the frontier is well populated the share falls
  to the floor ``cold_fraction``. Children do not count towards ``F``: their priors are shrunk towards 0.5 and
  would read as frontier before anyone measured them.

``max_window_visits`` (either rule; ``None`` = off) bounds re-selection: a frontier pick already trained that many
times in the last ``metrics_window`` steps goes back to the pool and its seat to a never-measured record, while
the cold queue has any.

Either way a batch takes cold records only while the cold queue has some, and all of them when the scored records
cannot fill the batch. ``SelectionWindow`` keeps the records trained in the last ``metrics_window`` steps, for the
coverage metrics (distinct records and visits per record per window); it is checkpointed with the pool.
"""

from __future__ import annotations

from collections import Counter, deque
from typing import Any

from verl_ext.pool.buckets import ValueBuckets

SEED_GROUP = 0


def frontier_size(buckets: ValueBuckets, target: float, band: float, group: int = SEED_GROUP) -> int:
    """Scored records of ``group`` whose value lies within ``band`` of ``target``. O(band * resolution)."""
    lo = buckets.bucket_of_value(max(0.0, target - band))
    hi = buckets.bucket_of_value(min(1.0, target + band))
    return sum(len(buckets.members(group, b)) for b in range(lo, hi + 1))


def adaptive_cold_share(frontier: int, k: int, frontier_batches: float, floor: float) -> float:
    """``clip(1 - frontier / (frontier_batches * k), floor, 1)``: the rule of ``exploration: adaptive``."""
    if k <= 0:
        return floor
    thin = 1.0 - frontier / (frontier_batches * k) if frontier_batches > 0 else 0.0
    return min(1.0, max(floor, thin))


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
    """``QueryPool``'s exploration: the cold share of a batch, the frontier set's size, the re-visit bound. Uses the
    pool's ``config``, ``_cold``, ``_scored``, ``_window``, ``ranking_value`` and ``_group``."""

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
        return adaptive_cold_share(self.frontier_size(), k, cfg.frontier_batches, cfg.cold_fraction)

    def frontier_size(self) -> int:
        """Pooled seeds whose ranking value lies within ``frontier_band`` of ``target_pass_rate``. O(band)."""
        return _count_frontier(self._scored, self.config.target_pass_rate, self.config.frontier_band)
