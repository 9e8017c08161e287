"""``greso``: GRESO (arXiv 2506.02177): skip prompts that were zero-variance in their recent visits, before rollout.

A prompt whose last ``c`` visits were all easy (group pass rate >= ``easy_threshold``) is skipped with probability
``1 - max(p_easy**c, min_keep)``; likewise with ``p_hard`` for consecutive hard visits (pass rate <=
``hard_threshold``). A prompt with no such streak is always kept, so the filter only spends its doubt on prompts
that have already wasted rollouts. ``p_easy``/``p_hard`` adapt by ``step_size`` per step towards a target share of
zero-variance groups: if the observed share of all-correct groups is above its target the easy keep-probability
drops (skip more), else it rises; the same for all-wrong groups and ``p_hard``.

The paper walks the data in order and rolls out kept prompts until the batch is full; here the available records
are visited in a random order (uniform baseline), each kept with its keep probability, and the first ``k`` kept
form the batch; if fewer are kept, the batch is filled with skipped ones at random (the paper would move on to the
next epoch). A "visit" stands for the paper's epoch (a record is trained once per pass over the data).

*Unverified* knobs: how the target splits between easy and hard (``easy_target_share``, default 0.5 of
``target_zero_variance``), the initial ``p_easy``/``p_hard`` (0.5), the clamp range of both ([``min_keep``, 1]).
Thresholds are on the pass-rate scale. O(n) per step; statistics, RNG and the adapted probabilities are
checkpointed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from verl_ext.config_model import Fraction, NonNegInt
from verl_ext.selection.table import TableStrategy, check_k, results_arrays
from verl_ext.selection.registry import register_strategy


@register_strategy("greso")
class GresoStrategy(TableStrategy):
    """Probabilistic pre-rollout skipping of recently zero-variance prompts. See the module docstring."""

    COLUMNS = {"easy_streak": 0.0, "hard_streak": 0.0}

    def __init__(self, p_easy: Fraction = 0.5, p_hard: Fraction = 0.5, target_zero_variance: Fraction = 0.25,
                 easy_target_share: Fraction = 0.5, step_size: Fraction = 0.01, min_keep: Fraction = 0.01,
                 easy_threshold: Fraction = 0.98, hard_threshold: Fraction = 0.11, seed: NonNegInt = 0) -> None:
        super().__init__(seed)
        for name, p in (("p_easy", p_easy), ("p_hard", p_hard)):
            if p < min_keep:  # the adaptation clamps to [min_keep, 1]; a start below it is a typo
                raise ValueError(f"greso.{name} must be in [min_keep, 1] = [{min_keep}, 1], got {p!r}")
        self.min_keep, self.p_easy, self.p_hard = min_keep, p_easy, p_hard
        self.target_zero_variance, self.easy_target_share = target_zero_variance, easy_target_share
        self.step_size, self.easy_threshold, self.hard_threshold = step_size, easy_threshold, hard_threshold
        if self.hard_threshold >= self.easy_threshold:
            raise ValueError(f"greso: hard_threshold ({hard_threshold}) must be below easy_threshold "
                             f"({easy_threshold})")

    def keep_probability(self, ids: np.ndarray) -> np.ndarray:
        """``max(p^c, min_keep)`` for the current streak (1 for a prompt without a zero-variance streak)."""
        easy = self.stats.get("easy_streak", ids)
        hard = self.stats.get("hard_streak", ids)
        keep = np.ones(len(ids))
        on_easy, on_hard = easy > 0, hard > 0
        keep[on_easy] = np.maximum(self.p_easy ** easy[on_easy], self.min_keep)
        keep[on_hard] = np.maximum(self.p_hard ** hard[on_hard], self.min_keep)
        return keep

    def select(self, pool: Any, k: int, step: int) -> list[int]:
        k = check_k(k)
        self.stats.maybe_prune(pool)
        ids = pool.available_ids()
        keep_p = self.keep_probability(ids)
        order = self._rng.permutation(len(ids))
        kept = self._rng.random(len(ids))[order] < keep_p[order]
        # Kept records in visiting order, then (only if short) skipped ones in the same random order.
        ranked = np.concatenate([order[kept], order[~kept]])
        chosen = ids[ranked[:k]]
        n_kept = int(kept.sum())
        self._last = {"select/p_easy": self.p_easy, "select/p_hard": self.p_hard,
                      "select/frac_skipped": 1.0 - n_kept / len(ids) if len(ids) else 0.0,
                      "select/n_filled_from_skipped": float(max(0, min(k, len(ids)) - n_kept))}
        return self._take(pool, chosen, step)

    def observe(self, results: Mapping[int, tuple[int, int]], step: int) -> None:
        ids, passes, n = results_arrays(results)
        if not len(ids):
            return
        rate = passes / n
        rows = self.stats.ensure(ids)
        easy, hard = self.stats.column("easy_streak"), self.stats.column("hard_streak")
        is_easy, is_hard = rate >= self.easy_threshold, rate <= self.hard_threshold
        easy[rows] = np.where(is_easy, easy[rows] + 1.0, 0.0)
        hard[rows] = np.where(is_hard, hard[rows] + 1.0, 0.0)
        # Adapt towards the target share of zero-variance groups (all correct / all wrong), one side each.
        easy_target = self.target_zero_variance * self.easy_target_share
        hard_target = self.target_zero_variance - easy_target
        easy_share, hard_share = float(np.mean(passes == n)), float(np.mean(passes == 0))
        self.p_easy = self._adapt(self.p_easy, easy_share, easy_target)
        self.p_hard = self._adapt(self.p_hard, hard_share, hard_target)

    def _adapt(self, p: float, observed: float, target: float) -> float:
        p = p - self.step_size if observed > target else p + self.step_size
        return float(min(1.0, max(self.min_keep, p)))

    def _extra_state(self) -> dict[str, Any]:
        return {"p_easy": self.p_easy, "p_hard": self.p_hard}

    def _load_extra_state(self, state: Mapping[str, Any]) -> None:
        self.p_easy, self.p_hard = float(state["p_easy"]), float(state["p_hard"])
