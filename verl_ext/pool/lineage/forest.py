"""Lineage forest of augmented prompts (spec §6): structure, queries and the public lineage API.

Owns which record was augmented from which (a forest keyed by stable record ids), its compact storage, the
structural queries (depth, children, height, descendant leaves), edits (add an edge, evict, set a base value)
and metrics. Pure: it works on ids and pass rates handed to it and never touches the pool
(``verl_ext.pool.lineage.refresh`` wires it to the pool). The rest of ``LineageForest`` lives next door:
``lineage_agg`` (refresh: ChildAgg / PathAgg), ``lineage_state`` (state_dict / load_state_dict) and
``lineage_config`` (``LineageConfig``, ``LineageError``, ``RefreshResult``); all are re-exported here.

Why it looks like this:
- Storage is slot based and compact: one ``array.array`` per field (8 bytes per node and field, fast scalar
  access for the Python walks), viewed as numpy arrays for the vectorised full refresh. Children form an
  intrusive doubly linked sibling list, so unlinking is O(1) and there is no dict of lists per node.
- Every walk is iterative (chains of 10^5 generations are fine) and every structural error (cycle, evicted
  parent, second parent) is raised at insertion, so the forest is always a valid forest.

Memory rule: a node stays while it is live or has descendants in the forest; an evicted node without children
is dropped, and dropping cascades up through evicted ancestors (whole evicted subtrees disappear). A live root
that loses its last child leaves the forest too (roots are added lazily when they get a first child).
"""

from __future__ import annotations

import math
from array import array

import numpy as np

from verl_ext.pool.lineage.aggregate import LineageRefreshMixin
from verl_ext.pool.lineage.config import (
    LineageConfig,
    LineageError,
    RefreshResult,
    _check_difficulty,
    _check_id,
    _to_pass,
    _to_reward,
)
from verl_ext.pool.lineage.state import SCHEMA_VERSION, LineageStateMixin

__all__ = ["SCHEMA_VERSION", "LineageConfig", "LineageError", "LineageForest", "RefreshResult"]


class LineageForest(LineageRefreshMixin, LineageStateMixin):
    """The forest plus its refresh. Per-operation cost: add/remove O(depth) (leaf counts are kept up to date
    along the path), queries O(1) except ``height``/``children`` (size of the answer), full refresh O(V+E)
    vectorised by depth level, incremental refresh O(affected ancestors and their children)."""

    _INT_FIELDS = ("_id", "_par", "_depth", "_leaves", "_first", "_next", "_prev", "_nkids")

    def __init__(self, config: LineageConfig | None = None) -> None:
        self.config = config if config is not None else LineageConfig()
        self._clear()

    # ------------------------------------------------------------------ storage
    def _clear(self) -> None:
        self._slot: dict[int, int] = {}
        self._free: list[int] = []
        for name in self._INT_FIELDS:
            setattr(self, name, array("q"))
        self._diff, self._base, self._val = array("d"), array("d"), array("d")
        self._live, self._used = array("b"), array("b")
        rounds = self.config.max_depth or 1
        self._hist = [array("d") for _ in range(rounds - 1)]  # v_1 .. v_{K-1} when max_depth=K
        self._dirty: set[int] = set()
        self._reset: dict[int, tuple[float, float]] = {}  # id -> (base, last value) of live nodes that left
        self._edges = 0
        self.dropped = 0
        self.refused = 0
        self._last: dict[str, float] = {"refreshed_nodes": 0.0, "mean_abs_change": 0.0}

    def _new_slot(self, node_id: int, base_r: float) -> int:
        if self._free:
            s = self._free.pop()
        else:
            s = len(self._id)
            for name in self._INT_FIELDS:
                getattr(self, name).append(-1)
            for arr in (self._diff, self._base, self._val, *self._hist):
                arr.append(math.nan)
            self._live.append(0)
            self._used.append(0)
        self._id[s], self._par[s], self._depth[s], self._leaves[s] = node_id, -1, 0, 1
        self._first[s] = self._next[s] = self._prev[s] = -1
        self._nkids[s] = 0
        self._diff[s] = 1.0
        self._base[s] = self._val[s] = base_r
        for h in self._hist:
            h[s] = base_r
        self._live[s] = self._used[s] = 1
        self._slot[node_id] = s
        self._dirty.add(s)
        return s

    def _free_slot(self, s: int) -> None:
        p = self._par[s]
        if p != -1:
            nx, pv = self._next[s], self._prev[s]
            if pv != -1:
                self._next[pv] = nx
            else:
                self._first[p] = nx
            if nx != -1:
                self._prev[nx] = pv
            self._nkids[p] -= 1
            self._edges -= 1
        del self._slot[self._id[s]]
        self._used[s] = self._live[s] = 0
        self._dirty.discard(s)
        self._free.append(s)

    def _kids(self, s: int) -> list[int]:
        out, c, nxt = [], self._first[s], self._next
        while c != -1:
            out.append(c)
            c = nxt[c]
        return out

    def _subtree(self, s: int) -> list[int]:
        out, i = [s], 0
        while i < len(out):
            out.extend(self._kids(out[i]))
            i += 1
        return out

    def _get(self, node_id: int) -> int:
        s = self._slot.get(_check_id(node_id))
        if s is None:
            raise LineageError(f"record {node_id} is not in the lineage forest")
        return s

    # ------------------------------------------------------------------ queries
    def __contains__(self, node_id: object) -> bool:
        return node_id in self._slot

    def __len__(self) -> int:
        return len(self._slot)

    @property
    def num_edges(self) -> int:
        return self._edges

    def ids(self) -> list[int]:
        return list(self._slot)

    def parent(self, node_id: int) -> int | None:
        p = self._par[self._get(node_id)]
        return None if p == -1 else self._id[p]

    def children(self, node_id: int) -> list[int]:
        return sorted(self._id[c] for c in self._kids(self._get(node_id)))

    def depth(self, node_id: int) -> int:
        return self._depth[self._get(node_id)]

    def height(self, node_id: int) -> int:
        """Longest path down to a leaf: the deepest descendant's depth minus this node's (iterative)."""
        s = self._get(node_id)
        return max(self._depth[x] for x in self._subtree(s)) - self._depth[s]

    def leaf_count(self, node_id: int) -> int:
        """L(u) of PathAgg: descendant leaves (1 for a leaf)."""
        return self._leaves[self._get(node_id)]

    def difficulty(self, node_id: int) -> float:
        return self._diff[self._get(node_id)]

    def is_live(self, node_id: int) -> bool:
        return bool(self._live[self._get(node_id)])

    def base(self, node_id: int) -> float | None:
        """a(x) as a pass rate (None: no value)."""
        return _to_pass(self._base[self._get(node_id)])

    def value(self, node_id: int) -> float | None:
        """Value after the last refresh as a pass rate (a(x) for leaves and nodes without valued children)."""
        return _to_pass(self._val[self._get(node_id)])

    # ------------------------------------------------------------------ structure
    def add_child(
        self,
        parent: int,
        child: int,
        difficulty: float | None = None,
        *,
        child_value: float | None = None,
        parent_value: float | None = None,
    ) -> bool:
        """Record that ``child`` was augmented from ``parent`` with difficulty factor ``difficulty`` (None -> 1).

        ``child_value``/``parent_value`` are the base pass rates, used only for nodes new to the forest.
        Raises LineageError on a cycle, a second parent, an evicted endpoint or a bad value; returns False
        (and counts ``refused``) when the edge would exceed ``max_nodes``.
        """
        parent, child = _check_id(parent), _check_id(child)
        d = _check_difficulty(difficulty)
        child_r, parent_r = _to_reward(child_value), _to_reward(parent_value)  # validate before any change
        if parent == child:
            raise LineageError(f"cycle: record {child} cannot be its own parent")
        ps, cs = self._slot.get(parent), self._slot.get(child)
        if ps is not None and not self._live[ps]:
            raise LineageError(f"dangling parent: record {parent} was evicted; cannot add child {child}")
        if cs is not None:
            if not self._live[cs]:
                raise LineageError(f"dangling child: record {child} was evicted; cannot link it to {parent}")
            if self._par[cs] != -1:
                old = self._id[self._par[cs]]
                raise LineageError(f"record {child} already has parent {old}; cannot also link it to {parent}")
            if ps is not None and self._is_ancestor(cs, ps):
                raise LineageError(f"cycle: record {child} is an ancestor of {parent}; edge {parent}->{child}")
        new = (ps is None) + (cs is None)
        if len(self._slot) + new > self.config.max_nodes:
            self.refused += 1
            return False
        if ps is None:
            self._reset.pop(parent, None)
            ps = self._new_slot(parent, parent_r)
        if cs is None:
            self._reset.pop(child, None)
            cs = self._new_slot(child, child_r)
        self._link(ps, cs, d)
        return True

    def _is_ancestor(self, a: int, s: int) -> bool:
        while s != -1:
            if s == a:
                return True
            s = self._par[s]
        return False

    def _link(self, ps: int, cs: int, d: float, bump: bool = True) -> None:
        self._par[cs], self._diff[cs] = ps, d
        first = self._first[ps]
        self._next[cs], self._prev[cs] = first, -1
        if first != -1:
            self._prev[first] = cs
        self._first[ps] = cs
        was_leaf = self._nkids[ps] == 0
        self._nkids[ps] += 1
        self._edges += 1
        shift = self._depth[ps] + 1 - self._depth[cs]
        if shift:
            for s in self._subtree(cs):
                self._depth[s] += shift
        if bump:  # load_state_dict recomputes leaf counts in one pass instead
            self._dirty.add(cs)
            self._bump_leaves(ps, self._leaves[cs] - (1 if was_leaf else 0))

    def _bump_leaves(self, s: int, delta: int) -> None:
        """Add ``delta`` descendant leaves to s and its ancestors; all of them need re-estimation."""
        self._dirty.add(s)
        while delta and s != -1:
            self._leaves[s] += delta
            self._dirty.add(s)
            s = self._par[s]

    def remove(self, node_id: int) -> int:
        """The record left the pool (evicted): mark it dead and drop what the memory rule allows.

        Returns how many lineage nodes were dropped. Unknown ids are ignored (most records have no lineage).
        """
        node_id = _check_id(node_id)
        s = self._slot.get(node_id)
        if s is None:
            self._reset.pop(node_id, None)
            return 0
        if not self._live[s]:
            return 0
        self._live[s] = 0
        dropped = 0
        while s != -1 and self._nkids[s] == 0 and (not self._live[s] or self._par[s] == -1):
            p = self._par[s]
            if self._live[s]:  # a live root that lost its last child: its ranking key must fall back to a(s)
                self._reset[self._id[s]] = (self._base[s], self._val[s])
            self._free_slot(s)
            dropped += 1
            if p != -1:
                if self._nkids[p] > 0:
                    self._bump_leaves(p, -1)  # the removed node was a leaf of p's subtree
                else:
                    self._dirty.add(p)  # p became a leaf: L(p) stays 1, its value falls back to a(p)
            s = p
        self.dropped += dropped
        return dropped

    def set_base(self, node_id: int, value: float | None) -> bool:
        """Set a(x) (pass rate or None) of a node; returns False for ids the forest does not know."""
        node_id = _check_id(node_id)
        r = _to_reward(value)
        s = self._slot.get(node_id)
        if s is not None:
            self._base[s] = r
            self._dirty.add(s)
            return True
        if node_id in self._reset:
            self._reset[node_id] = (r, self._reset[node_id][1])
            return True
        return False

    # ------------------------------------------------------------------ metrics
    def metrics(self) -> dict[str, float]:
        used = np.frombuffer(self._used, dtype=np.int8).astype(bool)
        depth = np.frombuffer(self._depth, dtype=np.int64)
        return {
            "lineage/edges": float(self._edges),
            "lineage/nodes": float(len(self._slot)),
            "lineage/max_depth": float(depth[used].max()) if used.any() else 0.0,
            "lineage/refreshed_nodes": self._last["refreshed_nodes"],
            "lineage/mean_abs_change": self._last["mean_abs_change"],
            "lineage/dropped": float(self.dropped),
            "lineage/refused": float(self.refused),
        }
