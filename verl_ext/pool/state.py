"""Checkpointing of ``QueryPool``: a JSON-safe ``state_dict`` and its inverse.

Everything that decides future behaviour is saved: records (as compact rows), the exact layout of the value
buckets, the in-flight set, the archive order, counters, pending drains and the PCG64 state. A pool restored from
``state_dict`` therefore hands out exactly the batches the original would have.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from typing import Any

import numpy as np

from verl_ext.pool.cold_groups import ColdGroupSignal
from verl_ext.pool.errors import ConfigError
from verl_ext.pool.progress import DrawProgress
from verl_ext.pool.record import ARCHIVED, COLD, FIELDS, IN_FLIGHT, POOLED, PromptRecord
from verl_ext.state_schema import check_schema

logger = logging.getLogger(__name__)

SCHEMA_VERSION = 2  # 2: value buckets replaced the two heaps (1 still loads)


class PoolStateMixin:
    """``state_dict``/``load_state_dict`` for ``QueryPool`` (kept apart so pool.py stays about behaviour)."""

    def state_dict(self) -> dict[str, Any]:
        """JSON-safe snapshot of the whole pool (O(n)). The ``progress`` frontier's measurements are saved only
        under ``boundary: progress`` (the only rule that reads them)."""
        scored = self._scored
        state = {
            "schema_version": SCHEMA_VERSION,
            "config": self.config.to_dict(),
            "estimator": self.estimator.spec(),
            "seed": self.seed,
            "rng": self._rng.bit_generator.state,
            "next_id": self._next_id,
            "cold_front": self._cold_front,
            "cold_back": self._cold_back,
            "record_fields": list(FIELDS),
            "records": [rec.to_row() for rec in self._records.values()],
            "cold": [[rid, seq] for rid, seq in self._cold.items()],
            "resolution": scored.resolution,
            "buckets": scored.layout(),
            "in_flight": [[rid, step] for rid, step in self._in_flight.items()],
            "archive": list(self._archive),
            "counters": dict(self._counters),
            "evicted_pending": list(self._evicted_pending),
            "changed_pending": list(self._changed_pending),
            "child_calibration": self.child_calibration.state_dict(),
            "window": self._window.state_dict(),
            "cold_yield": self._cold_yield.state_dict(),
            "last_cold": list(self._last_cold),
        }
        if self.config.boundary == "progress":
            state["draw_progress"] = self._progress.state_dict()
        if self._cold_signal is not None:
            state["cold_signal"] = self._cold_signal.state_dict()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a snapshot taken by ``state_dict``; validates it before replacing anything."""
        version = check_schema(state, "pool", 1, SCHEMA_VERSION)
        saved_fields = list(state["record_fields"])
        missing = len(FIELDS) - len(saved_fields)
        if saved_fields != list(FIELDS[:len(saved_fields)]) or missing not in (0, 1):
            raise ValueError(f"pool state record fields {state['record_fields']} differ from {list(FIELDS)}")
        spec = state["estimator"]
        if spec["name"] != self.estimator.name:
            raise ConfigError(f"pool state was written with estimator {spec['name']!r}, this pool uses "
                              f"{self.estimator.name!r}: record statistics are not comparable")
        if spec != self.estimator.spec():
            logger.warning("estimator parameters changed on resume: %s -> %s", spec, self.estimator.spec())
        now = self.config.to_dict()
        saved = {**{k: v for k, v in type(self.config)().to_dict().items() if k not in state["config"]},
                 **state["config"]}  # a field newer than the checkpoint was at its default then
        if saved != now:
            changed = sorted(k for k in now if saved.get(k) != now[k])
            logger.warning("pool config changed on resume (%s); the current config applies", ", ".join(changed))
        pad = [None] * missing  # written before ``measured_step``: the policy version is unknown
        records = {row[0]: PromptRecord.from_row([*row, *pad] if pad else row) for row in state["records"]}
        pooled = _pooled_ids(state)
        by_status = {
            COLD: [rid for rid, _ in state["cold"]],
            POOLED: pooled,
            IN_FLIGHT: [rid for rid, _ in state["in_flight"]],
            ARCHIVED: list(state["archive"]),
        }
        _check_partition(records, by_status)
        live = len(by_status[COLD]) + len(by_status[POOLED]) + len(by_status[IN_FLIGHT])
        if live > self.config.max_pool_size:
            raise ValueError(f"pool state holds {live} live records, more than max_pool_size "
                             f"{self.config.max_pool_size}")
        self._records = records
        rng = np.random.Generator(np.random.PCG64())
        rng.bit_generator.state = state["rng"]
        self._rng = rng
        self.seed = state["seed"]
        self._next_id, self._cold_front, self._cold_back = state["next_id"], state["cold_front"], state["cold_back"]
        self._cold.load([rid for rid, _ in state["cold"]], [seq for _, seq in state["cold"]])
        if version == SCHEMA_VERSION and state["resolution"] == self._scored.resolution:
            self._scored.load(state["buckets"])
        else:  # an older layout (heaps) or another resolution: place every pooled record by its value again
            if version == SCHEMA_VERSION:
                logger.warning("pool resolution changed on resume (%s -> %s): records re-bucketed",
                               state["resolution"], self._scored.resolution)
            self._scored.clear()
            for rid in pooled:
                self._scored.insert(rid, self.ranking_value(rid), self._group(rid))
        self._in_flight = {rid: step for rid, step in state["in_flight"]}
        self._archive = OrderedDict.fromkeys(state["archive"])
        self._counters.update(state["counters"])
        self._evicted_pending = list(state["evicted_pending"])
        self._changed_pending = dict.fromkeys(state["changed_pending"])
        if "child_calibration" in state:  # absent in schema 1
            self.child_calibration.load_state_dict(state["child_calibration"])
        self._measured = sum(1 for rec in records.values() if rec.stat is not None)
        if "window" in state:  # absent before issue 23: the coverage window starts empty
            self._window.load_state_dict(state["window"])
        else:
            self._window.load_state_dict({"batches": []})
        self._last_cold = tuple(state.get("last_cold", (0.0, 0.0)))
        # absent before exploration: greedy: the expectation restarts from the next cold draw measured
        self._cold_yield.load_state_dict(state.get("cold_yield", {"weight": 0.0, "total": 0.0}))
        cfg = self.config
        self._progress = DrawProgress(cfg.progress_decay, cfg.progress_min_share, cfg.progress_min_count)
        if "draw_progress" in state:  # absent unless written under boundary: progress; then it starts afresh
            self._progress.load_state_dict(state["draw_progress"])
        if self._cold_signal is not None:  # absent unless written under cold_draw: signal; then it starts afresh
            self._cold_signal = ColdGroupSignal()
            if "cold_signal" in state:
                self._cold_signal.load_state_dict(state["cold_signal"])


def _pooled_ids(state: dict[str, Any]) -> list[int]:
    """Ids of the pooled records, in the layout's order (schema 1 kept them in two heaps)."""
    if state["schema_version"] == 1:
        layout = state["layout"]
        return layout["hard_lo"] + layout["easy_lo"]
    return [rid for row in state["buckets"] for rid in row[1:]]


def _check_partition(records: dict[int, PromptRecord], by_status: dict[str, list[int]]) -> None:
    """Every record sits in exactly the structure its status names."""
    seen = 0
    for status, ids in by_status.items():
        for rid in ids:
            rec = records.get(rid)
            if rec is None or rec.status != status:
                got = "missing" if rec is None else rec.status
                raise ValueError(f"pool state is inconsistent: record {rid} listed as {status} but is {got}")
        seen += len(ids)
    if seen != len(records):
        raise ValueError(f"pool state is inconsistent: {len(records)} records but {seen} placed")
