"""Topology-aware re-estimation of ``LineageForest`` values: ChildAgg / PathAgg (spec §6).

Owns the refresh: which nodes a change reaches (incremental) or every node (full), gathering their edges from
the sibling lists, and the aggregation m_u = weighted mean of the children's difficulty-scaled values, blended
as ``blend*a(u) + (1-blend)*m_u``.

Why it looks like this:
- The refresh reads *base* values a(x) and writes refreshed values separately, so it is idempotent and a full
  pass equals an incremental pass over the ancestors of what changed (up to float summation order, ~1e-15).
- Large batches are vectorised with numpy (by depth level, or K synchronous rounds when ``max_depth=K``);
  small ones run in a scalar twin, where numpy call overhead would dominate. Both sum in the same order.
- Values live on the reward scale r = 2p - 1 where the spec's formulas are written; the API speaks pass rates.
"""

from __future__ import annotations

import time
from array import array

import numpy as np

from verl_ext.pool.estimators import scale_by_difficulty, to_pass
from verl_ext.pool.lineage.config import RefreshResult

_SMALL = 48  # edges below which a batch is aggregated in plain Python
_LOCKSTEP_MIN = 16  # sibling lists walked with numpy while at least this many are still open


class LineageRefreshMixin:
    """``refresh`` and the ChildAgg / PathAgg aggregation of ``LineageForest`` (uses its slot arrays,
    ``config``, ``_dirty`` and ``_reset``)."""

    def refresh(self, full: bool | None = None) -> RefreshResult:
        """Re-estimate values children-first and return the ranking keys to write.

        ``values`` holds pass rates for live nodes whose key may have changed: incremental -> every live node
        re-estimated (the changed nodes and their ancestors); full -> every live internal node and every changed
        node. Live nodes that left the forest (a root that lost its last child) get their a(x) back. Stats:
        ``refreshed_nodes`` (nodes whose value is an aggregate of children), ``written``, ``mean_abs_change``
        (mean |new - previous value| over written values, pass-rate scale), ``full``, ``seconds``.
        """
        t0 = time.perf_counter()
        full = (self.config.mode == "full") if full is None else bool(full)
        emit, old, refreshed = self._recompute_full() if full else self._recompute_incremental()
        new = _f64(self._val)[emit]
        ok = ~np.isnan(new)
        values = dict(zip(_i64(self._id)[emit[ok]].tolist(), to_pass(new[ok]).tolist()))
        both = ok & ~np.isnan(old)
        total, count = float(np.abs(new[both] - old[both]).sum()) / 2.0, int(both.sum())
        for node_id, (b, v) in self._reset.items():
            if b == b:
                values[node_id] = to_pass(b)
                if v == v:
                    total, count = total + abs(b - v) / 2.0, count + 1
        self._dirty.clear()
        self._reset.clear()
        self._last = {"refreshed_nodes": float(refreshed), "mean_abs_change": total / count if count else 0.0}
        stats = {**self._last, "written": float(len(values)), "full": float(full), "seconds": time.perf_counter() - t0}
        return RefreshResult(values, stats)

    def _rounds(self) -> list[array]:
        """[v_0 = a, v_1, ..., v_K = refreshed] for max_depth=K (uncapped: [a, refreshed])."""
        return [self._base, *self._hist, self._val]

    def _recompute_full(self) -> tuple[np.ndarray, np.ndarray, int]:
        if not self._slot:
            return np.zeros(0, dtype=np.int64), np.zeros(0), 0
        used = np.flatnonzero(np.frombuffer(self._used, dtype=np.int8))
        par, nkids, base = _i64(self._par), _i64(self._nkids), _f64(self._base)
        old = _f64(self._val)[used].copy()
        for arr in self._rounds()[1:]:
            _f64(arr)[used] = base[used]  # leaves keep a(x); internal nodes are overwritten below
        c = used[par[used] >= 0]
        refreshed = self._run(par[c], c)
        dirty = np.zeros(len(self._id), dtype=bool)
        dirty[np.fromiter(self._dirty, dtype=np.int64, count=len(self._dirty))] = True
        live = np.frombuffer(self._live, dtype=np.int8)[used].astype(bool)
        keep = live & ((nkids[used] > 0) | dirty[used])
        return used[keep], old[keep], refreshed

    def _affected(self) -> set[int] | dict[int, int]:
        """Changed nodes plus the ancestors their change reaches (all of them, or K levels when capped)."""
        par, cap = self._par, self.config.max_depth
        if cap is None:
            seen: set[int] = set()
            for s in self._dirty:
                while s != -1 and s not in seen:
                    seen.add(s)
                    s = par[s]
            return seen
        reach: dict[int, int] = {}  # node -> levels its change may still climb
        for s in self._dirty:
            r = cap
            while s != -1 and r >= 0 and reach.get(s, -1) < r:
                reach[s] = r
                s, r = par[s], r - 1
        return reach

    def _recompute_incremental(self) -> tuple[np.ndarray, np.ndarray, int]:
        aff = self._affected()
        if not aff:
            return np.zeros(0, dtype=np.int64), np.zeros(0), 0
        slots = np.fromiter(aff, dtype=np.int64, count=len(aff))
        old = _f64(self._val)[slots].copy()
        is_leaf = _i64(self._nkids)[slots] == 0
        leaves = slots[is_leaf]
        for arr in self._rounds()[1:]:
            _f64(arr)[leaves] = _f64(self._base)[leaves]
        refreshed = self._run(*self._edges_of(slots[~is_leaf]))
        live = np.frombuffer(self._live, dtype=np.int8)[slots].astype(bool)
        return slots[live], old[live], refreshed

    def _edges_of(self, parents: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """All (parent, child) edges of ``parents``: walks the sibling lists in lock step with numpy (as many
        rounds as the largest fan-out); the last few long lists are finished in Python."""
        first, nxt = _i64(self._first), _i64(self._next)
        ps, cs = [parents], [first[parents]]
        while len(cs[-1]) >= _LOCKSTEP_MIN:
            cur = nxt[cs[-1]]
            keep = cur != -1
            ps.append(ps[-1][keep])
            cs.append(cur[keep])
        tail_p, tail_c = [], []
        for u, c in zip(ps[-1].tolist(), nxt[cs[-1]].tolist()):
            while c != -1:
                tail_p.append(u)
                tail_c.append(c)
                c = self._next[c]
        ps.append(np.array(tail_p, dtype=np.int64))
        cs.append(np.array(tail_c, dtype=np.int64))
        return np.concatenate(ps), np.concatenate(cs)

    def _run(self, p: np.ndarray, c: np.ndarray) -> int:
        """Re-estimate the parents of the edges (p, c); returns how many got an aggregate of children.

        Edges are put in one canonical order, children ascending within a parent, so that full and incremental
        passes sum in the same order. Uncapped: parents by decreasing depth, one depth level at a time (a
        child's value is final before its parent reads it). Capped at K: K synchronous rounds v_{j-1} -> v_j.
        """
        if self.config.max_depth is None:
            depth = _i64(self._depth)
            order = np.lexsort((c, p, -depth[p]))
            c, p = c[order], p[order]
            dp = depth[p]
            cuts = (np.flatnonzero(dp[1:] != dp[:-1]) + 1).tolist()
            refreshed, lists, small_from = 0, None, None
            for lo, hi in zip([0, *cuts], [*cuts, len(c)]):
                if hi - lo < _SMALL:  # runs of small levels go to Python in one sweep (still children-first)
                    small_from = lo if small_from is None else small_from
                    continue
                if small_from is not None:
                    lists = lists or (p.tolist(), c.tolist())
                    refreshed += self._aggregate_py(*lists, self._val, self._val, small_from, lo)
                    small_from = None
                refreshed += self._aggregate_np(p[lo:hi], c[lo:hi], self._val, self._val)
            if small_from is not None:
                lists = lists or (p.tolist(), c.tolist())
                refreshed += self._aggregate_py(*lists, self._val, self._val, small_from, len(c))
            return refreshed
        order = np.lexsort((c, p))
        c, p = c[order], p[order]
        rounds = self._rounds()
        refreshed = 0
        for j in range(1, len(rounds)):
            refreshed = self._aggregate(p, c, rounds[j - 1], rounds[j])
        return refreshed

    def _weighting(self) -> tuple[int, float]:
        """(kind, exponent): 0 = equal weights (ChildAgg), 1 = L, 2 = L ** (1/tau)."""
        cfg = self.config
        if cfg.method == "childagg":
            return 0, 1.0
        if cfg.weighting == "linear" or cfg.tau == 1.0:
            return 1, 1.0
        return 2, 1.0 / cfg.tau

    def _aggregate(self, p: np.ndarray, c: np.ndarray, src: array, dst: array) -> int:
        """dst[u] = agg(a(u), {src[c]}) for each parent u of the (p, c) edges, grouped by p; returns how many
        parents had a valued child. Small batches run in Python: numpy call overhead dominates there."""
        if len(c) < _SMALL:
            return self._aggregate_py(p.tolist(), c.tolist(), src, dst, 0, len(c))
        return self._aggregate_np(p, c, src, dst)

    def _aggregate_np(self, p: np.ndarray, c: np.ndarray, src: array, dst: array) -> int:
        v = _f64(src)[c]
        ok = ~np.isnan(v)
        v = np.where(ok, v, 0.0)
        d = _f64(self._diff)[c]
        g = np.clip(np.where(v >= 0, v / d, v * d), -1.0, 1.0)
        kind, expo = self._weighting()
        if kind == 0:
            w = ok.astype(np.float64)
        else:
            w = _i64(self._leaves)[c].astype(np.float64)
            w = np.where(ok, w if kind == 1 else np.power(w, expo), 0.0)
        starts = np.flatnonzero(np.concatenate(([True], p[1:] != p[:-1])))
        u = p[starts]
        den = np.add.reduceat(w, starts)
        num = np.add.reduceat(w * g, starts)
        has = den > 0
        m = np.divide(num, den, out=np.zeros_like(num), where=has)
        a = _f64(self._base)[u]
        blend = self.config.blend
        new = np.where(np.isnan(a), m, blend * a + (1.0 - blend) * m)
        _f64(dst)[u] = np.where(has, np.clip(new, -1.0, 1.0), a)
        return int(has.sum())

    def _aggregate_py(self, pl: list[int], cl: list[int], src: array, dst: array, i: int, n: int) -> int:
        """Scalar twin of ``_aggregate_np`` over edges [i, n), parents processed in list order."""
        base, diff, leaves, blend = self._base, self._diff, self._leaves, self.config.blend
        kind, expo = self._weighting()
        refreshed = 0
        while i < n:
            u, num, den = pl[i], 0.0, 0.0
            while i < n and pl[i] == u:
                c = cl[i]
                i += 1
                v = src[c]
                if v != v:  # no value: skipped
                    continue
                g = scale_by_difficulty(v, diff[c])
                w = 1.0 if kind == 0 else (float(leaves[c]) if kind == 1 else float(leaves[c]) ** expo)
                num += w * g
                den += w
            a = base[u]
            if den > 0:
                m = num / den
                x = m if a != a else blend * a + (1.0 - blend) * m
                dst[u] = -1.0 if x < -1.0 else (1.0 if x > 1.0 else x)
                refreshed += 1
            else:
                dst[u] = a
        return refreshed


def _f64(a: array) -> np.ndarray:
    """Zero-copy float64 view (never kept: an exported buffer would block the array from growing)."""
    return np.frombuffer(a, dtype=np.float64)


def _i64(a: array) -> np.ndarray:
    return np.frombuffer(a, dtype=np.int64)
