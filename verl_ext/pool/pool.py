"""``QueryPool``: the bounded, evolving prompt pool of HeaPA (spec sections 1-4).

Where a record lives, by status:

- ``cold``: FIFO queue of unscored records (a ``ColdQueue``: a heap on arrival number, so it is indexable and
  removable by id; under ``cold_draw: signal`` a ``GroupedColdQueue`` that also serves a chosen group's earliest
  arrival, ``cold_groups.py``).
- ``pooled``: scored records in ``ValueBuckets`` (bucketed by ranking value, seeds and augmented children apart);
  selection rules read the buckets (``buckets``) and move records with ``withdraw`` / ``restore``; HeaPA's
  frontier draw is the ``boundary`` strategy's (``verl_ext/selection/frontier/``), not the pool's.
- ``in_flight``: handed out by a selection rule (``pop_cold``/``withdraw`` then ``hand_out``) or ``take``; back via
  ``feedback`` (-> archive) or ``release`` (-> pool).
- ``archived``: trained records in a bounded FIFO, returned by ``reinsert`` under the configured policy.
- evicted: dropped from memory; counted by reason and reported once by ``drain_evicted``.

``max_pool_size`` bounds the live records (cold + scored + in flight), so returning in-flight records never
overflows. All randomness comes from one seeded PCG64 generator whose state is checkpointed with the pool.
Per-step operations are O(k + buckets) for a batch of k; nothing scans the pool.

Ranking value of a record (its bucket) = lineage override if set, else the estimator's value, else the prior
of an augmented child. A record is scored iff it has a ranking value.
"""

from __future__ import annotations

import itertools
import logging
from collections import OrderedDict
from collections.abc import Iterable, Mapping

import numpy as np

from verl_ext.pool.buckets import CHILD_GROUP, SEED_GROUP, ValueBuckets, median_bucket
from verl_ext.pool.checks import as_id, check_outcome, unique_ids
from verl_ext.pool.config import PoolConfig
from verl_ext.pool.errors import RecordStateError, UnknownRecordError
from verl_ext.pool.calibration import ChildCalibration
from verl_ext.pool.capacity import PoolCapacityMixin
from verl_ext.pool.estimators import Estimator, build_estimator, check_pass_rate, child_prior
from verl_ext.pool.coverage import ColdYield, PoolCoverageMixin, SelectionWindow
from verl_ext.pool.feedback import FeedbackSummary
from verl_ext.pool.cold_groups import MISSING_GROUP, ColdGroupSignal, GroupedColdQueue, group_label
from verl_ext.pool.cold_queue import ColdQueue
from verl_ext.pool.ingest import PoolIngestMixin
from verl_ext.pool.progress import DrawProgress
from verl_ext.pool.record import ARCHIVED, AUGMENTED, COLD, IN_FLIGHT, POOLED, PromptRecord
from verl_ext.pool.state import PoolStateMixin

logger = logging.getLogger(__name__)

COUNTERS = (
    "added_seed", "added_child", "added_child_unscored", "rejected_full",
    "sampled_cold", "revisit_cap_swaps", "revisit_cap_redraws", "sampled_boundary", "sampled_extreme",
    "sampled_children", "child_cap_hits", "taken",
    "released", "fed_back", "reinserted", "evicted_capacity_hard", "evicted_capacity_easy",
    "evicted_capacity_child", "evicted_capacity_seed", "evicted_archive_full", "evicted_retired_solved",
    "evicted_retired_visits", "feed_dropped_evicted",
)


class QueryPool(PoolIngestMixin, PoolCapacityMixin, PoolStateMixin, PoolCoverageMixin):
    """The pool. See the module docstring; every public method documents its complexity where it matters."""

    def __init__(self, config: PoolConfig | None = None, estimator: Estimator | None = None, seed: int = 0) -> None:
        self.config = config if config is not None else PoolConfig()
        self.estimator = estimator or build_estimator(self.config.estimator, **self.config.estimator_params)
        if self.estimator.name != self.config.estimator:
            logger.warning("estimator %r passed explicitly overrides config.estimator %r",
                           self.estimator.name, self.config.estimator)
        self.seed = seed
        self._rng = np.random.Generator(np.random.PCG64(seed))
        self._records: dict[int, PromptRecord] = {}
        grouped = self.config.cold_draw == "signal"
        self._cold = GroupedColdQueue(self._cold_group) if grouped else ColdQueue()
        self._cold_signal = ColdGroupSignal() if grouped else None
        self._warned_missing_group = False
        self._cold_front = 0  # arrival numbers: released records go in front (-1, -2, ...), new ones behind
        self._cold_back = 0
        self._scored = ValueBuckets(self.config.resolution, groups=2)
        self._target_bucket = self._scored.bucket_of_value(self.config.target_pass_rate)
        self._in_flight: dict[int, int] = {}  # id -> step it was handed out
        self._archive: OrderedDict[int, None] = OrderedDict()
        self._next_id = 0
        self._counters: dict[str, int] = dict.fromkeys(COUNTERS, 0)
        self._evicted_pending: list[int] = []
        self._changed_pending: dict[int, None] = {}
        self.child_calibration = ChildCalibration()
        self._window = SelectionWindow(self.config.metrics_window)
        self._cold_yield = ColdYield()
        self._measured = 0  # held records with a measured value (for pool/measured_share)
        self._last_cold = (0.0, 0.0)  # (the rule's cold share, the share drawn) of the last sample
        cfg = self.config
        self._progress = DrawProgress(cfg.progress_decay, cfg.progress_min_share, cfg.progress_min_count)

    # ------------------------------------------------------------------ handing out and taking back
    # The storage moves a selection rule makes (HeaPA's frontier draw: ``verl_ext/selection/frontier/``). A draw
    # takes records out with ``pop_cold`` / ``withdraw`` and must ``hand_out`` or ``restore`` them before it
    # returns: in between they are held but in no queue.
    @property
    def buckets(self) -> ValueBuckets:
        """The scored records by ranking value (read it; move records with ``withdraw`` / ``restore``)."""
        return self._scored

    @property
    def rng(self) -> np.random.Generator:
        """The pool's seeded generator, checkpointed with it: every draw of a batch uses it, in a fixed order."""
        return self._rng

    @property
    def target_bucket(self) -> int:
        """The bucket of ``target_pass_rate``."""
        return self._target_bucket

    @property
    def draw_progress(self) -> DrawProgress:
        """What the ``progress`` frontier measured about its two draws (``pool/progress.py``)."""
        return self._progress

    @property
    def num_cold(self) -> int:
        return len(self._cold)

    def center_bucket(self) -> int:
        """The frontier's centre (``pool/center``): the median split's bucket under ``boundary: median``, else the
        target's. O(buckets)."""
        if self.config.boundary == "median":
            return median_bucket(self._scored, self.config.low_fraction)[1]
        return self._target_bucket

    def pop_cold(self, n: int) -> list[int]:
        """Take ``n`` cold ids out of the queue (a draw in progress): the earliest arrivals, or under ``cold_draw:
        signal`` one group draw per seat (``cold_groups.py``). O(n log n), plus O(groups) per seat then."""
        if self._cold_signal is not None:
            return self._cold_signal.draw(self._cold, n, self._rng)
        return [self._cold.pop()[0] for _ in range(n)]

    def withdraw(self, ids: list[int]) -> None:
        """Take pooled ids out of the buckets (a draw in progress). O(len(ids))."""
        for rid in ids:
            self._scored.remove(rid)

    def restore(self, ids: list[int]) -> None:
        """Put withdrawn pooled ids back in the buckets at their ranking value, in order."""
        for rid in ids:
            self._scored.insert(rid, self.ranking_value(rid), self._group(rid))

    def hand_out(self, ids: list[int], step: int) -> None:
        """Put drawn (popped or withdrawn) ids in flight at ``step``."""
        self._set_in_flight(ids, step)

    def count(self, counter: str, n: int) -> None:
        """Add ``n`` to a ``pool/<counter>`` counter (``COUNTERS``; the selection rule's ``sampled_*``)."""
        if counter not in self._counters:
            raise KeyError(f"unknown pool counter {counter!r}")
        self._counters[counter] += n

    def take(self, ids: Iterable[int], step: int) -> list[int]:
        """Put specific available (cold or pooled) ids in flight; for strategies that pick ids themselves."""
        ids = unique_ids(ids, "take")
        for rid in ids:
            if self._get(rid).status not in (COLD, POOLED):
                raise RecordStateError(f"take: record {rid} is {self._records[rid].status}, not available")
        for rid in ids:
            if self._records[rid].status == COLD:
                self._cold.remove(rid)
            else:
                self._scored.remove(rid)
        self._set_in_flight(ids, step)
        self._counters["taken"] += len(ids)
        return ids

    def release(self, ids: Iterable[int]) -> None:
        """Return unused in-flight records: scored ones to the buckets, unscored ones to the front of the cold queue
        (in the given order), unchanged. Never evicts: in-flight records already count towards capacity."""
        ids = unique_ids(ids, "release")
        for rid in ids:
            if self._get(rid).status != IN_FLIGHT:
                raise RecordStateError(f"release: record {rid} is {self._records[rid].status}, not in flight")
        self._progress.forget(ids)
        for rid in reversed(ids):
            del self._in_flight[rid]
            value = self.ranking_value(rid)
            if value is None:
                self._cold_front -= 1
                self._cold.push(rid, self._cold_front)
                self._records[rid].status = COLD
            else:
                self._scored.insert(rid, value, self._group(rid))
                self._records[rid].status = POOLED
        self._counters["released"] += len(ids)

    def feedback(self, results: Mapping[int, tuple[int, int]], step: int,
                 selected_at: Mapping[int, int] | None = None) -> FeedbackSummary:
        """Fold each in-flight record's group outcome ``id -> (passes, n)`` into its estimator and archive it.

        ``selected_at``: ``id -> the step that selected the group`` where that is before ``step`` (an asynchronous
        trainer's late feedback; absent ids: ``step``); the record keeps it as ``measured_step`` and the outcome
        weighs ``stale_discount ** (step - selected)``. Keyed by record id, never by position. Validates every
        entry before changing anything. O(m).
        """
        groups: list[tuple[int, int, int]] = []
        for rid, outcome in results.items():
            rid = as_id(rid)
            if self._get(rid).status != IN_FLIGHT:
                raise RecordStateError(f"feedback for record {rid}, which is {self._records[rid].status}, "
                                       "not in flight")
            groups.append((rid, *check_outcome(rid, outcome)))
        selected = {as_id(rid): int(s) for rid, s in (selected_at or {}).items()}
        late = [rid for rid, s in selected.items() if s > step]
        if late:
            raise ValueError(f"records {late[:10]} were selected after step {step}, which hears them")
        discount = self.config.stale_discount
        prior_errors: list[float] = []
        mask = (1 << self.config.history_length) - 1
        for rid, passes, n in groups:
            rec = self._records[rid]
            estimate = self.ranking_value(rid)
            if rec.stat is None:
                self._measured += 1
            if self.estimator.value(rec) is None and estimate is not None:
                prior_errors.append(estimate - passes / n)
                if rec.origin == AUGMENTED and rec.prior is not None:
                    self.child_calibration.observe(rec.prior, passes, n)
            measured = selected.get(rid, step)
            self.estimator.update(rec, passes, n, discount ** (step - measured) if discount < 1.0 else 1.0)
            if estimate is None:  # a cold draw's first measurement: what the next one is expected to read
                self._observe_cold(self.estimator.value(rec))
                if self._cold_signal is not None:
                    self._cold_signal.observe(self._cold_group(rid), passes / n)
            if self.config.boundary == "progress":
                self._progress.observe(rid, rec.last_pass, passes, n)
            rec.last_pass = passes / n
            rec.visits += 1
            rec.solved_bits = ((rec.solved_bits << 1) | (passes == n)) & mask
            rec.last_trained_step = step
            rec.measured_step = measured
            rec.rank_override = None
            rec.status = ARCHIVED
            del self._in_flight[rid]
            self._archive[rid] = None
            self._mark_changed(rid)
        self._counters["fed_back"] += len(groups)
        self._window.add(step, [rid for rid, _, _ in groups])
        limit = self.config.archive_limit
        while len(self._archive) > limit:
            self._evict(self._archive.popitem(last=False)[0], "archive_full")
        return FeedbackSummary.from_groups(groups, prior_errors)

    # ------------------------------------------------------------------ lineage hooks
    def base_value(self, record_id: int) -> float | None:
        """The estimator's value if the record was ever measured, else its prior (a child's shrunk towards 0.5 by
        ``child_prior_strength``), else ``None``. O(1)."""
        rec = self._get(record_id)
        value = self.estimator.value(rec)
        if value is not None or rec.prior is None:
            return value
        return child_prior(rec.prior, self.config.child_prior_strength) if rec.origin == AUGMENTED else rec.prior

    def measured_value(self, record_id: int) -> float | None:
        """The estimator's value, ``None`` if the record was never measured (priors do not count). O(1)."""
        return self.estimator.value(self._get(record_id))

    def ranking_value(self, record_id: int) -> float | None:
        """The heap key: lineage override if set, else ``base_value``. O(1)."""
        rec = self._get(record_id)
        return rec.rank_override if rec.rank_override is not None else self.base_value(record_id)

    def set_ranking_value(self, record_id: int, p: float) -> None:
        """Override the ranking value with a refreshed estimate in [0, 1]; repositions a pooled record in
        O(log n) (a cold one becomes scored). Cleared by the record's next feedback."""
        p = check_pass_rate(p, "ranking value")
        rec = self._get(record_id)
        rec.rank_override = p
        if rec.status == POOLED:
            self._scored.move(record_id, p)
        elif rec.status == COLD:
            self._cold.remove(record_id)
            rec.status = POOLED
            self._scored.insert(record_id, p, self._group(record_id))

    def drain_evicted(self) -> list[int]:
        """Ids evicted since the last call (each reported once)."""
        out, self._evicted_pending = self._evicted_pending, []
        return out

    def drain_changed(self) -> list[int]:
        """Ids (still held) whose base value changed since the last call: fed back, or new scored child."""
        out = list(self._changed_pending)
        self._changed_pending = {}
        return out

    # ------------------------------------------------------------------ inspection
    def get(self, record_id: int) -> PromptRecord:
        """The record (a live object: read it, do not mutate it)."""
        return self._get(record_id)

    def status(self, record_id: int) -> str:
        """``cold`` | ``pooled`` | ``in_flight`` | ``archived``; ``UnknownRecordError`` if not held."""
        return self._get(record_id).status

    def __len__(self) -> int:
        """Records held in any status."""
        return len(self._records)

    def __contains__(self, record_id: object) -> bool:
        return record_id in self._records

    @property
    def num_available(self) -> int:
        """Records that can be handed out now (cold + pooled)."""
        return len(self._cold) + len(self._scored)

    def available_ids(self) -> np.ndarray:
        """All available ids (cold queue, then the buckets slot by slot; not sorted). O(n)."""
        parts = itertools.chain(self._cold, self._scored)
        return np.fromiter(parts, dtype=np.int64, count=self.num_available)

    def ids_at(self, positions: Iterable[int]) -> list[int]:
        """Ids at positions of the ``available_ids()`` order: O(1) each plus O(buckets) per call (uniform draws
        without the O(n))."""
        positions = list(positions)
        n_cold = len(self._cold)
        scored = iter(self._scored.ids_at([i - n_cold for i in positions if i >= n_cold]))
        return [self._cold.id_at(i) if i < n_cold else next(scored) for i in positions]

    def in_flight_ids(self) -> list[int]:
        return list(self._in_flight)

    def archived_ids(self) -> list[int]:
        return list(self._archive)

    def metrics(self) -> dict[str, float]:
        """``pool/*`` scalars: sizes, every counter, the frontier's centre and the value range. O(buckets)."""
        counts = self._scored.counts()
        out = {
            "pool/size_cold": len(self._cold), "pool/size_scored": len(self._scored),
            "pool/size_scored_children": int(counts[CHILD_GROUP].sum()),
            "pool/size_in_flight": len(self._in_flight), "pool/size_archive": len(self._archive),
            "pool/size_live": self._live_count(), "pool/capacity": self.config.max_pool_size,
        }
        out.update({f"pool/{name}": value for name, value in self._counters.items()})
        out.update(self.child_calibration.metrics())
        out["pool/evicted"] = sum(v for name, v in self._counters.items() if name.startswith("evicted_"))
        if self._scored:
            res = self._scored.resolution
            merged = counts.sum(axis=0)
            nonzero = np.flatnonzero(merged)
            out["pool/value_min"] = nonzero[0] / res
            out["pool/value_max"] = (nonzero[-1] + 1) / res
            out["pool/center"] = self.center_bucket() / res
            # Scored records within 0.25 of the target pass rate: how much informative material the pool holds.
            lo = self._scored.bucket_of_value(max(0.0, self.config.target_pass_rate - 0.25))
            hi = self._scored.bucket_of_value(min(1.0, self.config.target_pass_rate + 0.25))
            out["pool/frac_near_target"] = float(merged[lo:hi + 1].sum()) / len(self._scored)
        out.update(self.coverage_metrics())  # issue 23 (coverage.py)
        if self._cold_signal is not None:
            out.update(self._cold_signal.metrics())
        return {k: float(v) for k, v in out.items()}

    def counters(self) -> dict[str, int]:
        return dict(self._counters)

    # ------------------------------------------------------------------ internals
    def _get(self, record_id: int, what: str = "record") -> PromptRecord:
        try:
            return self._records[record_id]
        except (KeyError, TypeError):
            raise UnknownRecordError(f"{what} {record_id!r} is not in the pool (never added, or evicted)") from None

    def _live_count(self) -> int:
        return len(self._cold) + len(self._scored) + len(self._in_flight)

    def _cold_group(self, rid: int) -> str:
        rec = self._records[rid]
        label = group_label(rec.data_source, rec.extra, self.config.cold_group_key)
        if label == MISSING_GROUP and not self._warned_missing_group:  # a mistyped key would draw as ``arrival``
            self._warned_missing_group = True
            logger.warning("cold_draw=signal: record %s has no %r (cold_group_key); records without it share one "
                           "group (warned once)", rid, self.config.cold_group_key)
        return label

    def _group(self, rid: int) -> int:
        return CHILD_GROUP if self._records[rid].origin == AUGMENTED else SEED_GROUP

    def _mark_changed(self, rid: int) -> None:
        if self.config.track_changes:
            self._changed_pending[rid] = None

    def _set_in_flight(self, ids: list[int], step: int) -> None:
        for rid in ids:
            self._records[rid].status = IN_FLIGHT
            self._in_flight[rid] = step
