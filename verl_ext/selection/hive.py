"""``hive``: HIVE (arXiv 2603.25184): history-informed candidate selection, then online verification.

The learning signal sits at the "learning edge" (intermediate difficulty and high uncertainty), which moves as the
policy trains, so history alone goes stale. Two stages per batch of k:

1. **History** (coarse, free): per record a recency-weighted pass rate
   ``p = S/W`` with ``S <- decay*S + s``, ``W <- decay*W + 1`` per visit, and a recency-weighted history of its
   prompt entropy ``H``. Utility ``u = 4 p (1-p) + entropy_weight * H / max(H)`` (both terms in [0, 1]). The top
   ``ceil(candidate_ratio * k)`` records by utility are the candidates.
2. **Online verification** (cheap: a forward pass per prompt, no generation): ``prompt_entropy(ids) -> {id: H}``
   measures each candidate under the current policy. A candidate is pruned when its entropy collapsed relative to
   its history (``H_now < collapse_ratio * H_hist``) or is in the lowest ``prune_quantile`` of the candidates. The
   batch is the top k survivors by utility; when too few survive it is filled from the records ranked just below
   the candidates (unverified), and only then from the pruned ones. Measured entropies update the history.

In the recipe ``prompt_entropy`` is a forward pass of the policy; in the simulator a function of the latent solve
probability. Without a callback stage 2 is skipped (history-only selection, reported as ``select/verified = 0``).

*Unverified* (the paper's exact formula was not available; all are knobs): the utility's form and
``entropy_weight`` (0.5), ``decay`` (0.7), ``entropy_decay`` (0.5), ``p0`` (0.5) and ``h0`` (1.0, the normalised
entropy of a record never verified: optimistic, so new records get tried), ``candidate_ratio`` (2.0),
``collapse_ratio`` (0.5), ``prune_quantile`` (0.1), and the fill order. O(n + k log k) per step; statistics and
RNG are checkpointed; the callback is never pickled.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from verl_ext.selection.table import TableStrategy, check_k, check_number, results_arrays, top_k
from verl_ext.selection.registry import register_strategy

EntropyFn = Callable[[list[int]], Mapping[int, float]]


@register_strategy("hive")
class HiveStrategy(TableStrategy):
    """History-ranked candidates, pruned by an online entropy check. See the module docstring."""

    COLUMNS = {"rate_sum": 0.0, "rate_weight": 0.0, "ent_sum": 0.0, "ent_weight": 0.0, "resp_sum": 0.0,
               "resp_weight": 0.0}

    def __init__(self, prompt_entropy: EntropyFn | None = None, candidate_ratio: float = 2.0,
                 entropy_weight: float = 0.5, decay: float = 0.7, entropy_decay: float = 0.5, p0: float = 0.5,
                 h0: float = 1.0, collapse_ratio: float = 0.5, prune_quantile: float = 0.1, seed: int = 0) -> None:
        super().__init__(seed)
        if prompt_entropy is not None and not callable(prompt_entropy):
            raise ValueError(f"hive.prompt_entropy must be a callable ids -> {{id: entropy}}, got {prompt_entropy!r}")
        self.prompt_entropy = prompt_entropy
        self.candidate_ratio = check_number("hive.candidate_ratio", candidate_ratio, 1.0, 1e6)
        self.entropy_weight = check_number("hive.entropy_weight", entropy_weight, 0.0, 1e6)
        self.decay = check_number("hive.decay", decay, 0.0, 1.0)
        self.entropy_decay = check_number("hive.entropy_decay", entropy_decay, 0.0, 1.0)
        self.p0 = check_number("hive.p0", p0, 0.0, 1.0)
        self.h0 = check_number("hive.h0", h0, 0.0, 1.0)
        self.collapse_ratio = check_number("hive.collapse_ratio", collapse_ratio, 0.0, 1.0)
        self.prune_quantile = check_number("hive.prune_quantile", prune_quantile, 0.0, 1.0, high_open=True)

    # ------------------------------------------------------------------ history
    def pass_rate(self, ids: np.ndarray) -> np.ndarray:
        """Recency-weighted pass rate (``p0`` where never observed)."""
        w = self.stats.get("rate_weight", ids)
        return np.where(w > 0, self.stats.get("rate_sum", ids) / np.maximum(w, 1e-12), self.p0)

    def history_entropy(self, ids: np.ndarray) -> np.ndarray:
        """Recency-weighted measured prompt entropy (NaN where never measured)."""
        w = self.stats.get("ent_weight", ids)
        return np.where(w > 0, self.stats.get("ent_sum", ids) / np.maximum(w, 1e-12), np.nan)

    def response_entropy(self, ids: np.ndarray) -> np.ndarray:
        """Recency-weighted entropy of the record's past responses (NaN where none was observed)."""
        w = self.stats.get("resp_weight", ids)
        return np.where(w > 0, self.stats.get("resp_sum", ids) / np.maximum(w, 1e-12), np.nan)

    def observe_response_entropy(self, entropies: Mapping[int, float], step: int) -> None:
        """The step's mean response-token entropy per record (the trainer reads it from verl's old-log-prob pass):
        the paper's history entropy. Where a record has one, the utility uses it; the collapse check of stage 2
        keeps comparing prompt entropies with prompt entropies."""
        if not entropies:
            return
        ids = np.fromiter((int(i) for i in entropies), dtype=np.int64, count=len(entropies))
        h = np.array([float(v) for v in entropies.values()])
        if not np.all(np.isfinite(h)) or np.any(h < 0):
            raise ValueError("hive: response entropies must be finite and non-negative")
        rows = self.stats.ensure(ids)
        s, w = self.stats.column("resp_sum"), self.stats.column("resp_weight")
        s[rows] = self.entropy_decay * s[rows] + h
        w[rows] = self.entropy_decay * w[rows] + 1.0

    def utility(self, ids: np.ndarray) -> np.ndarray:
        p = self.pass_rate(ids)
        resp = self.response_entropy(ids)
        h = np.where(np.isnan(resp), self.history_entropy(ids), resp)
        known = ~np.isnan(h)
        scale = float(np.max(h[known])) if known.any() else 0.0
        h_norm = np.full(len(ids), self.h0)
        if scale > 0:
            h_norm[known] = h[known] / scale
        return 4.0 * p * (1.0 - p) + self.entropy_weight * h_norm

    # ------------------------------------------------------------------ selection
    def select(self, pool: Any, k: int, step: int) -> list[int]:
        k = check_k(k)
        self.stats.maybe_prune(pool)
        ids = pool.available_ids()
        k = min(k, len(ids))
        n_cand = min(len(ids), int(np.ceil(self.candidate_ratio * k)))
        # Rank only as deep as the batch can reach: the candidates plus k fill records below them.
        ranked = top_k(self.utility(ids), n_cand + k, self._rng)
        cand, rest = ranked[:n_cand], ranked[n_cand:]
        survivors, pruned = self._verify(ids, cand)
        order = np.concatenate([survivors, rest, pruned]).astype(np.int64)
        chosen = ids[order[:k]]
        self._last.update({"select/n_candidates": float(n_cand),
                           "select/frac_from_rest": float(np.mean(np.isin(order[:k], rest))) if k else 0.0})
        return self._take(pool, chosen, step)

    def _verify(self, ids: np.ndarray, cand: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Stage 2: split candidate positions (kept in utility order) into survivors and pruned."""
        if self.prompt_entropy is None or not len(cand):
            self._last = {"select/verified": 0.0, "select/frac_pruned": 0.0}
            return cand, cand[:0]
        cand_ids = ids[cand]
        measured = self.prompt_entropy([int(i) for i in cand_ids])
        missing = [int(i) for i in cand_ids if int(i) not in measured]
        if missing:
            raise ValueError(f"hive: prompt_entropy returned no value for ids {missing[:10]}")
        h_now = np.array([float(measured[int(i)]) for i in cand_ids])
        if not np.all(np.isfinite(h_now)) or np.any(h_now < 0):
            raise ValueError("hive: prompt_entropy must return finite, non-negative entropies")
        h_hist = self.history_entropy(cand_ids)
        collapsed = ~np.isnan(h_hist) & (h_now < self.collapse_ratio * np.nan_to_num(h_hist))
        low = h_now < np.quantile(h_now, self.prune_quantile) if self.prune_quantile > 0 else np.zeros(len(cand), bool)
        prune = collapsed | low
        self._record_entropy(cand_ids, h_now)
        self._last = {"select/verified": float(len(cand)), "select/frac_pruned": float(prune.mean()),
                      "select/frac_collapsed": float(collapsed.mean())}
        return cand[~prune], cand[prune]

    def _record_entropy(self, ids: np.ndarray, h_now: np.ndarray) -> None:
        rows = self.stats.ensure(ids)
        s, w = self.stats.column("ent_sum"), self.stats.column("ent_weight")
        s[rows] = self.entropy_decay * s[rows] + h_now
        w[rows] = self.entropy_decay * w[rows] + 1.0

    def observe(self, results: Mapping[int, tuple[int, int]], step: int) -> None:
        ids, passes, n = results_arrays(results)
        rows = self.stats.ensure(ids)
        s, w = self.stats.column("rate_sum"), self.stats.column("rate_weight")
        s[rows] = self.decay * s[rows] + passes / n
        w[rows] = self.decay * w[rows] + 1.0
