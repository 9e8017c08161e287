"""Adding records to the pool: seeds (one or bulk), augmented children, id allocation, room for cold records.

Kept apart from the sampling/feedback flow in pool.py; ``QueryPool`` inherits these methods. Capacity rules on
insert (spec section 1): an unscored insert into a full pool evicts the easiest scored record (or is refused with
``PoolFullError`` when there is none); a scored insert evicts the hardest record, possibly the new one.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from verl_ext.pool.checks import check_payload
from verl_ext.pool.errors import DuplicateRecordError, PoolFullError
from verl_ext.pool.estimators import check_pass_rate, child_initial_estimate
from verl_ext.pool.record import AUGMENTED, COLD, SEED, PromptRecord


class PoolIngestMixin:
    """``add_seed`` / ``add_seeds_bulk`` / ``add_child`` for ``QueryPool``."""

    def add_seed(self, prompt: Any, answer: str, data_source: str, extra: dict | None = None,
                 record_id: int | None = None) -> int:
        """Add an unscored seed to the back of the cold queue; return its id. O(log n).

        When the pool is full the easiest scored record is evicted; ``PoolFullError`` if there is none.
        """
        check_payload(prompt, answer, data_source, extra)
        rid = self._claim_id(record_id)
        self._make_room_for_cold(1)
        self._records[rid] = PromptRecord(rid, prompt, answer, data_source, SEED, extra=extra)
        self._push_cold(rid)
        self._counters["added_seed"] += 1
        return rid

    def add_seeds_bulk(self, prompts: Sequence[Any], answers: Sequence[str], data_sources: str | Sequence[str],
                       extras: Sequence[dict | None] | None = None, record_ids: Sequence[int] | None = None,
                       priors: Sequence[float | None] | None = None, step: int = 0) -> list[int]:
        """Add many seeds at once (10^5-10^6 rows); return their ids in row order.

        Rows with a ``prior`` (a known pass rate, e.g. offline difficulty) enter scored, the rest cold.
        All rows are validated before anything changes.
        """
        n = len(prompts)
        sources = [data_sources] * n if isinstance(data_sources, str) else list(data_sources)
        extras_l = [None] * n if extras is None else list(extras)
        priors_l = [None] * n if priors is None else [None if p is None else check_pass_rate(p, "prior")
                                                         for p in priors]
        if not len(answers) == len(sources) == len(extras_l) == len(priors_l) == n:
            raise ValueError("add_seeds_bulk: prompts, answers, data_sources, extras and priors differ in length")
        for row in range(n):
            check_payload(prompts[row], answers[row], sources[row], extras_l[row], where=f"row {row}")
        ids = self._claim_ids(n, record_ids)
        n_cold = sum(p is None for p in priors_l)
        self._make_room_for_cold(n_cold)
        scored: list[int] = []
        for rid, prompt, answer, src, extra, prior in zip(ids, prompts, answers, sources, extras_l, priors_l):
            rec = PromptRecord(rid, prompt, answer, src, SEED, created_step=step, extra=extra)
            self._records[rid] = rec
            if prior is None:
                self._push_cold(rid)
            else:
                rec.prior = prior
                scored.append(rid)
        self._counters["added_seed"] += n
        self._insert_scored_many(scored)
        return ids

    def add_child(self, prompt: Any, answer: str, data_source: str, parent_id: int, difficulty_factor: float,
                  step: int, extra: dict | None = None, *, record_id: int | None = None) -> int:
        """Add an augmented child of a held parent; return its id. O(log n).

        Its prior is ``child_initial_estimate(base_value(parent), difficulty_factor)`` (the paper's rule); it ranks
        by that prior shrunk towards 0.5 (``base_value``), as an unmeasured child is uncertain, not a copy of its
        parent's 0.0. It enters the buckets (evicting by the eviction rule if the pool is full, maybe itself). A parent without any value yields a
        cold child. ``UnknownRecordError`` if the parent is not held (e.g. evicted meanwhile).
        """
        check_payload(prompt, answer, data_source, extra)
        if isinstance(difficulty_factor, bool) or not isinstance(difficulty_factor, (int, float)) \
                or not (difficulty_factor > 0 and math.isfinite(difficulty_factor)):
            raise ValueError(f"difficulty_factor must be a finite number > 0, got {difficulty_factor!r}")
        parent = self._get(parent_id, "parent")
        parent_value = self.base_value(parent_id)
        rid = self._claim_id(record_id)
        if parent_value is None:
            self._make_room_for_cold(1)
        rec = PromptRecord(rid, prompt, answer, data_source, AUGMENTED, parent_id=parent_id,
                           depth=parent.depth + 1, difficulty_factor=float(difficulty_factor),
                           created_step=step, extra=extra)
        self._records[rid] = rec
        self._counters["added_child"] += 1
        if parent_value is None:
            self._push_cold(rid)
            self._counters["added_child_unscored"] += 1
        else:
            rec.prior = child_initial_estimate(parent_value, float(difficulty_factor))
            self._mark_changed(rid)
            self._insert_scored(rid, self.base_value(rid))
        return rid

    def _claim_id(self, record_id: int | None) -> int:
        if record_id is None:
            rid = self._next_id
        else:
            if isinstance(record_id, bool) or not isinstance(record_id, (int, np.integer)) or record_id < 0:
                raise ValueError(f"record_id must be a non-negative int, got {record_id!r}")
            rid = int(record_id)
            if rid in self._records:
                raise DuplicateRecordError(f"record id {rid} is already in the pool")
        self._next_id = max(self._next_id, rid + 1)
        return rid

    def _claim_ids(self, n: int, record_ids: Sequence[int] | None) -> list[int]:
        if record_ids is None:
            start = self._next_id
            self._next_id += n
            return list(range(start, start + n))
        ids = [int(r) for r in record_ids]
        if len(ids) != n:
            raise ValueError(f"record_ids has {len(ids)} entries for {n} rows")
        if len(set(ids)) != n:
            raise DuplicateRecordError("record_ids contains duplicates")
        for rid in ids:
            if rid < 0:
                raise ValueError(f"record_id must be a non-negative int, got {rid}")
            if rid in self._records:
                raise DuplicateRecordError(f"record id {rid} is already in the pool")
        if ids:
            self._next_id = max(self._next_id, max(ids) + 1)
        return ids

    def _make_room_for_cold(self, n: int) -> None:
        """Evict the easiest scored records so ``n`` unscored records fit; refuse if they cannot."""
        cap = self.config.max_pool_size
        if len(self._cold) + len(self._in_flight) + n > cap:
            self._counters["rejected_full"] += n
            raise PoolFullError(
                f"cannot add {n} unscored record(s): pool capacity {cap} already holds {len(self._cold)} cold and "
                f"{len(self._in_flight)} in-flight records and only scored records can be evicted"
            )
        for _ in range(self._live_count() + n - cap):
            self._evict_one(scored_insert=False)

    def _push_cold(self, rid: int) -> None:
        self._cold.push(rid, self._cold_back)
        self._cold_back += 1
        self._records[rid].status = COLD

