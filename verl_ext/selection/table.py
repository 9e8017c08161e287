"""Shared machinery of the stateful strategies: a per-record statistics table and vectorised draws.

Why a table instead of fields on ``PromptRecord``: a strategy's bookkeeping (a Beta posterior, a skip streak, an
entropy history) is the strategy's state, checkpointed with it, and must not leak into the pool's schema. The table
keeps ids in a sorted ``int64`` array with one ``float64`` column per statistic, so looking up the whole available
set (10^5 ids) is one ``np.searchsorted`` instead of 10^5 dict lookups. It is bounded: rows of records the pool no
longer holds are dropped once the table outgrows the pool (``prune_to``).

``TableStrategy`` is the base those strategies share: a seeded RNG plus the table, both in ``state_dict``.
Nothing here is registered as a strategy (the registry skips modules whose name starts with ``_``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from verl_ext.selection.base import Strategy

_EMPTY_IDS = np.empty(0, dtype=np.int64)


def check_k(k: Any) -> int:
    """``k`` as a plain int, or ``ValueError`` (a bool or a negative count is a caller bug, not an empty batch)."""
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 0:
        raise ValueError(f"k must be a non-negative int, got {k!r}")
    return int(k)


def results_arrays(results: Mapping[int, tuple[int, int]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``{id: (passes, n)}`` -> (ids, passes, n) arrays, checked (the pool has already validated them in the
    trainer's order, but a strategy can be driven on its own)."""
    if not results:
        return _EMPTY_IDS, np.empty(0), np.empty(0)
    ids = np.fromiter((int(i) for i in results), dtype=np.int64, count=len(results))
    pn = np.array([tuple(v) for v in results.values()], dtype=np.float64).reshape(len(results), 2)
    passes, n = pn[:, 0], pn[:, 1]
    if np.any(n < 1) or np.any(passes < 0) or np.any(passes > n):
        raise ValueError("observe: every outcome must be (passes, n) with n >= 1 and 0 <= passes <= n")
    return ids, passes, n


def top_k(scores: np.ndarray, k: int, rng: np.random.Generator) -> np.ndarray:
    """Positions of the ``k`` largest scores, best first, ties broken at random (not by position, which would
    favour whatever order the pool happens to list its records in). O(n + k log k)."""
    scores = np.asarray(scores, dtype=np.float64)
    n = len(scores)
    k = min(k, n)
    if k == 0:
        return np.empty(0, dtype=np.int64)
    kth = np.partition(scores, n - k)[n - k]  # the k-th largest value
    above = np.flatnonzero(scores > kth)
    ties = np.flatnonzero(scores == kth)
    picked = np.concatenate([above, rng.permutation(ties)[:k - len(above)]])
    tiebreak = rng.random(len(picked))
    return picked[np.lexsort((tiebreak, -scores[picked]))]  # primary key last: score descending


def weighted_without_replacement(weights: np.ndarray, k: int, rng: np.random.Generator) -> np.ndarray:
    """Positions of ``k`` draws without replacement, each draw proportional to weight among the rest
    (Efraimidis-Spirakis: key ``log(u)/w``, keep the k largest). One vectorised pass instead of k renormalisations."""
    n = len(weights)
    k = min(k, n)
    if k == 0:
        return np.empty(0, dtype=np.int64)
    u = rng.random(n)
    with np.errstate(divide="ignore"):
        keys = np.log(u) / weights  # weight 0 -> -inf: drawn last, only if nothing else is left
    if k == n:
        return np.argsort(-keys, kind="stable")
    part = np.argpartition(-keys, k - 1)[:k]
    return part[np.argsort(-keys[part], kind="stable")]


class IdStats:
    """Sorted id -> row table with named float columns; unseen ids read the column's default. See module doc."""

    def __init__(self, defaults: Mapping[str, float]) -> None:
        self.defaults = {name: float(v) for name, v in defaults.items()}
        self._ids = _EMPTY_IDS.copy()
        self._cols = {name: np.empty(0) for name in self.defaults}

    def __len__(self) -> int:
        return len(self._ids)

    def lookup(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Row of each id and whether it exists (rows of missing ids are meaningless). O(m log n)."""
        ids = np.asarray(ids, dtype=np.int64)
        rows = np.searchsorted(self._ids, ids)
        found = rows < len(self._ids)
        found[found] = self._ids[rows[found]] == ids[found]
        return rows, found

    def get(self, name: str, ids: np.ndarray) -> np.ndarray:
        """Column ``name`` for ``ids``; the default where an id has no row."""
        rows, found = self.lookup(ids)
        out = np.full(len(rows), self.defaults[name])
        out[found] = self._cols[name][rows[found]]
        return out

    def has(self, ids: np.ndarray) -> np.ndarray:
        return self.lookup(ids)[1]

    def ensure(self, ids: np.ndarray) -> np.ndarray:
        """Rows for ``ids`` (unique), creating missing rows at their defaults. O(n + m log m)."""
        ids = np.asarray(ids, dtype=np.int64)
        rows, found = self.lookup(ids)
        if not found.all():
            missing = np.unique(ids[~found])
            at = np.searchsorted(self._ids, missing)
            self._ids = np.insert(self._ids, at, missing)
            for name, col in self._cols.items():
                self._cols[name] = np.insert(col, at, self.defaults[name])
            rows, _ = self.lookup(ids)
        return rows

    def column(self, name: str) -> np.ndarray:
        """The column array itself, indexed by the rows ``ensure``/``lookup`` return (write through it)."""
        return self._cols[name]

    def prune_to(self, held: np.ndarray) -> int:
        """Drop rows whose id is not in ``held``; return how many went."""
        keep = np.isin(self._ids, np.asarray(held, dtype=np.int64))
        dropped = int(len(keep) - keep.sum())
        if dropped:
            self._ids = self._ids[keep]
            self._cols = {name: col[keep] for name, col in self._cols.items()}
        return dropped

    def maybe_prune(self, pool: Any) -> int:
        """Prune once the table holds more than twice the pool's records (amortised O(1) per record)."""
        if len(self._ids) <= 2 * len(pool) + 1024:
            return 0
        held = np.concatenate([pool.available_ids(), np.asarray(pool.in_flight_ids(), dtype=np.int64),
                               np.asarray(pool.archived_ids(), dtype=np.int64)])
        return self.prune_to(held)

    def state_dict(self) -> dict[str, Any]:
        return {"ids": self._ids.tolist(), "columns": {name: col.tolist() for name, col in self._cols.items()}}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        ids = np.asarray(state["ids"], dtype=np.int64)
        columns = state["columns"]
        unknown = set(columns) - set(self.defaults)
        if unknown:
            raise ValueError(f"statistics table columns {sorted(unknown)} are unknown; known {sorted(self.defaults)}")
        # A column added since the checkpoint was written starts at its default for every saved row.
        cols = {name: np.asarray(columns[name], dtype=np.float64) if name in columns
                else np.full(len(ids), self.defaults[name]) for name in self.defaults}
        if any(len(c) != len(ids) for c in cols.values()) or np.any(np.diff(ids) <= 0):
            raise ValueError("statistics table state is corrupt (column lengths or id order)")
        self._ids, self._cols = ids, cols


class TableStrategy(Strategy):
    """Base of the strategies that keep a seeded RNG and an ``IdStats`` table: both are checkpointed here, so
    a resumed run draws the same next batch. Subclasses set ``COLUMNS`` and extend ``_extra_state``."""

    COLUMNS: dict[str, float] = {}

    def __init__(self, seed: int = 0) -> None:
        # The registered subclass's typed signature has checked ``seed`` (``registry.options_model``).
        self.seed = int(seed)
        self._rng = np.random.Generator(np.random.PCG64(self.seed))
        self.stats = IdStats(self.COLUMNS)
        self._last: dict[str, float] = {}

    def _take(self, pool: Any, ids: np.ndarray, step: int) -> list[int]:
        """Hand the chosen ids to the pool (they are in flight afterwards) and remember the batch size."""
        out = pool.take([int(i) for i in ids], step)
        self._last["select/n_selected"] = float(len(out))
        return out

    def metrics(self) -> dict[str, float]:
        return dict(self._last)

    def _extra_state(self) -> dict[str, Any]:
        return {}

    def _load_extra_state(self, state: Mapping[str, Any]) -> None:
        """Restore what ``_extra_state`` saved."""

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "seed": self.seed, "rng": self._rng.bit_generator.state,
                "stats": self.stats.state_dict(), **self._extra_state()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        super().load_state_dict(state)
        self.seed = int(state["seed"])
        self._rng.bit_generator.state = state["rng"]
        self.stats.load_state_dict(state["stats"])
        self._load_extra_state(state)
