"""Wires the lineage forest to the pool: edges from accepted children, base values and evictions from the pool's
change feeds, refreshed estimates back as heap ranking keys (spec §6, DESIGN step 6 "refresh").

The forest stays pure (``verl_ext.pool.lineage``); this file is the only place that knows the pool's hooks:
``measured_value``, ``set_ranking_value``, ``drain_evicted``, ``drain_changed``, ``get`` and ``in``. The pool must
track changes (``PoolConfig.track_changes``), or incremental refresh would miss updates.

A node's a(x) is its *measured* value only. The spec falls back to an unmeasured child's estimate, but that
estimate is derived from the parent's own value: feeding it back is circular and, once the child prior is shrunk
towards 0.5 for uncertainty, it dragged solved and hopeless parents to the frontier (simulator, docs/sim.md).
Unmeasured nodes are skipped by the aggregation like any node without a value.
"""

from __future__ import annotations

import logging
from typing import Any, Protocol

from verl_ext.pool.lineage.config import LineageConfig, LineageError, RefreshResult
from verl_ext.pool.lineage.forest import LineageForest
from verl_ext.state_schema import check_schema

logger = logging.getLogger(__name__)

SCHEMA_VERSION = 1


class LineagePool(Protocol):
    """What the refresher needs from a pool (``QueryPool`` implements it)."""

    def measured_value(self, record_id: int) -> float | None: ...
    def set_ranking_value(self, record_id: int, p: float) -> None: ...
    def drain_evicted(self) -> list[int]: ...
    def drain_changed(self) -> list[int]: ...
    def get(self, record_id: int) -> Any: ...
    def __contains__(self, record_id: object) -> bool: ...


class LineageRefresher:
    """Owns a ``LineageForest`` for one pool and keeps both in step.

    Per training step: ``link`` each accepted child, then ``step(step)`` (sync feeds, refresh on cadence,
    metrics). ``refresh()`` forces a pass; ``resync()`` re-reads every base value (after a resume).
    """

    def __init__(self, pool: LineagePool, config: LineageConfig | None = None) -> None:
        pool_cfg = getattr(pool, "config", None)
        if getattr(pool_cfg, "track_changes", True) is False:
            raise LineageError("lineage needs the pool to track changes: set pool track_changes=True")
        self.pool = pool
        self.config = config if config is not None else LineageConfig()
        self.forest = LineageForest(self.config)
        self.last_refresh_step: int | None = None

    def link(self, child_id: int, parent_id: int | None = None, difficulty: float | None = None) -> bool:
        """Add the edge parent -> child for an accepted child (parent and difficulty default to the record's).

        Both must be held by the pool (a reference to an evicted record is rejected with ``LineageError``, as
        are cycles and second parents). Returns False when lineage is disabled or the forest is at capacity.
        """
        if not self.config.enabled:
            return False
        if child_id not in self.pool:
            raise LineageError(f"dangling child: record {child_id} is not held by the pool")
        rec = self.pool.get(child_id)
        parent_id = rec.parent_id if parent_id is None else parent_id
        if parent_id is None:
            raise LineageError(f"record {child_id} has no parent: only augmented children have lineage")
        if parent_id not in self.pool:
            raise LineageError(f"dangling parent: record {parent_id} (parent of {child_id}) is not held by the pool")
        d = rec.difficulty_factor if difficulty is None else difficulty
        added = self.forest.add_child(
            parent_id, child_id, d,
            child_value=self.pool.measured_value(child_id), parent_value=self.pool.measured_value(parent_id),
        )
        if not added:
            logger.debug("lineage at capacity (%d nodes): edge %s->%s refused", len(self.forest), parent_id, child_id)
        return added

    def sync(self) -> None:
        """Apply the pool's feeds: evictions drop lineage nodes, changed base values mark nodes for refresh."""
        for rid in self.pool.drain_evicted():
            self.forest.remove(rid)
        for rid in self.pool.drain_changed():
            if rid in self.pool:
                self.forest.set_base(rid, self.pool.measured_value(rid))

    def resync(self) -> None:
        """Re-read the base value of every live lineage node from the pool (e.g. after loading a checkpoint)."""
        self.sync()
        for rid in self.forest.ids():
            if rid in self.pool and self.forest.is_live(rid):
                self.forest.set_base(rid, self.pool.measured_value(rid))

    def refresh(self, full: bool | None = None) -> RefreshResult:
        """Sync, re-estimate (config mode unless ``full`` is given) and write the results as ranking keys."""
        self.sync()
        result = self.forest.refresh(full=full)
        kept = 0
        for rid, p in result.values.items():
            if rid in self.pool:
                if self._own_measurement_is_newest(rid):
                    kept += 1
                    p = self.pool.measured_value(rid)  # also undoes an override from a child since evicted
                self.pool.set_ranking_value(rid, p)
        result.stats["kept_own"] = float(kept)
        return result

    def _own_measurement_is_newest(self, rid: int) -> bool:
        """True when the record was measured no earlier than any of its children: its own fresh group outcome is
        better evidence of its pass rate now than older outcomes of *other* problems. Otherwise every-step
        refreshes would blend a just-solved parent with stale child values and keep handing it out (simulator,
        ``mostly_too_hard``); the paper refreshes only archived, i.e. stale, records."""
        own = self.pool.get(rid).last_trained_step
        if own is None or rid not in self.forest:  # unmeasured, or out of the forest (its value is its own)
            return False
        for child in self.forest.children(rid):
            if child in self.pool:
                step = self.pool.get(child).last_trained_step
                if step is not None and step > own:
                    return False
        return True

    def step(self, step: int) -> dict[str, float]:
        """End-of-step hook: sync every step (keeps the forest bounded), refresh every ``cadence`` steps."""
        if not self.config.enabled:
            return {}
        if step % self.config.cadence == 0:
            result = self.refresh()
            self.last_refresh_step = step
            logger.debug("step %d: lineage refresh %s", step, result.stats)
        else:
            self.sync()
        return self.metrics()

    def metrics(self) -> dict[str, float]:
        return self.forest.metrics() if self.config.enabled else {}

    def state_dict(self) -> dict:
        return {
            "schema_version": SCHEMA_VERSION,
            "forest": self.forest.state_dict(),
            "last_refresh_step": self.last_refresh_step,
        }

    def load_state_dict(self, state: dict) -> None:
        check_schema(state, "lineage refresher", SCHEMA_VERSION, error=LineageError)
        self.forest.load_state_dict(state["forest"])
        self.last_refresh_step = state["last_refresh_step"]
