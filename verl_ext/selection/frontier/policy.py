"""HeaPA's batch: a share of cold records, then the records at the capability frontier (``QueryPool.sample`` before
the selection policy left the pool).

Cold records first (the share ``cold_share(k)``: the ``exploration`` rule of ``exploration.py``) while scored
records can fill the rest (``max_window_visits`` may swap frontier picks for more, or for the frontier's next
picks once the cold queue is empty); then, in ``mixed`` mode, a
share from the easiest; the rest from the frontier (``boundary``: ``target``, ``median``, ``signal`` or
``progress``, see ``draw.py``), with at most ``max_child_fraction`` of the batch augmented. The knobs are the pool's
(``heapa.pool.*``, ``PoolConfig``): users set them there, and the pool's coverage metrics read the same ones.

Stateless: the randomness is the pool's RNG (checkpointed with the pool, drawn in the same order as before the
move), the coverage state (``ColdYield``, the selection window, the last cold share) is the pool's. The pool's
storage API does the moves: ``pop_cold`` and ``withdraw`` take records out, ``restore`` puts withdrawn ones back,
``hand_out`` puts the batch in flight; ``count`` keeps the ``pool/sampled_*`` counters. O(k + buckets).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from verl_ext.pool import AUGMENTED, QueryPool
from verl_ext.pool.checks import check_count
from verl_ext.pool.progress import SIGNAL, TARGET
from verl_ext.selection.frontier.draw import median_candidates, nearest, rank_window, sample_parts, signal_draw
from verl_ext.selection.frontier.exploration import cap_revisits, cold_share


def draw_batch(pool: QueryPool, k: int, step: int) -> list[int]:
    """Up to ``k`` ids by the rule above; they are in flight afterwards. Returns fewer than ``k`` only if the pool
    has fewer available."""
    k = check_count(k, "k")
    cfg, buckets = pool.config, pool.buckets
    share = cold_share(pool, k)
    n_cold = min(pool.num_cold, max(math.ceil(share * k), k - len(buckets)))
    out = pool.pop_cold(n_cold)
    pool.count("sampled_cold", len(out))
    need = min(k - len(out), len(buckets))
    n_extreme = int(need * cfg.mixed_easy_fraction) if cfg.sampling_mode == "mixed" else 0
    extreme = rank_window(buckets, len(buckets) - n_extreme, len(buckets), pool.rng)
    pool.withdraw(extreme)
    rest = need - n_extreme
    picked = _frontier_draw(pool, rest, _child_budget(pool, k, out + extreme)) if rest else []
    picked, fresh, n_redrawn = cap_revisits(
        pool, picked, lambda n: _frontier_draw(pool, n, _child_budget(pool, k, out + extreme + picked)))
    pool.count("sampled_extreme", n_extreme)
    pool.count("sampled_boundary", len(picked))
    pool.count("sampled_cold", len(fresh))
    pool.count("revisit_cap_swaps", len(fresh))
    pool.count("revisit_cap_redraws", n_redrawn)
    out.extend(fresh)
    pool.note_cold_share(share, (n_cold + len(fresh)) / k if k else 0.0)
    out.extend(extreme)
    out.extend(picked)
    pool.count("sampled_children", sum(1 for rid in out if _is_child(pool, rid)))
    pool.hand_out(out, step)
    return out


def _is_child(pool: QueryPool, rid: int) -> bool:
    return pool.get(rid).origin == AUGMENTED


def _child_budget(pool: QueryPool, k: int, chosen: list[int]) -> int | None:
    """How many more augmented records this batch may take (``None`` = no cap)."""
    if pool.config.max_child_fraction >= 1.0:
        return None
    cap = math.floor(pool.config.max_child_fraction * k)
    return max(0, cap - sum(1 for rid in chosen if _is_child(pool, rid)))


def _frontier_draw(pool: QueryPool, need: int, child_budget: int | None) -> list[int]:
    """``need`` scored ids from the frontier (withdrawn from the buckets), children within ``child_budget``."""
    cfg, buckets, rng = pool.config, pool.buckets, pool.rng
    if cfg.boundary == "median":
        picked = median_candidates(buckets, need, cfg.low_fraction, rng)
        if child_budget is not None:
            picked = _cap_children(pool, picked, child_budget)
        pool.withdraw(picked)
    else:
        n_signal = round(need * _signal_share(pool))
        picked = signal_draw(buckets, n_signal, rng, child_budget, _child_weight(pool)) if n_signal else []
        pool.withdraw(picked)
        _note_arm(pool, picked, SIGNAL)
        if need > len(picked):
            if child_budget is not None:
                child_budget -= sum(1 for rid in picked if _is_child(pool, rid))
            near = _nearest_target(pool, need - len(picked), child_budget)
            pool.withdraw(near)
            _note_arm(pool, near, TARGET)
            picked.extend(near)
    # The cap left seats empty: fill them with the seeds nearest the frontier, and only when no seed is left
    # with children after all (the cap shapes a batch; it never makes one short).
    for budget in (0, None):
        short = need - len(picked)
        if short > 0 and buckets:
            fill = nearest(buckets, pool.center_bucket(), short, rng, child_budget=budget)
            pool.withdraw(fill)
            _note_arm(pool, fill, TARGET)
            picked.extend(fill)
    return picked


def _signal_share(pool: QueryPool) -> float:
    """The share of the frontier seats drawn by weight: ``signal_share`` under ``signal``, the measured choice
    under ``progress`` (``pool/progress.py``), none under ``target``."""
    boundary = pool.config.boundary
    if boundary == "signal":
        return pool.config.signal_share
    if boundary == "progress":
        return pool.draw_progress.choose()
    return 0.0


def _note_arm(pool: QueryPool, ids: list[int], arm: int) -> None:
    """Under ``progress``, which draw took ``ids`` (their feedback is that draw's measurement)."""
    if ids and pool.config.boundary == "progress":
        pool.draw_progress.note(ids, arm)


def _nearest_target(pool: QueryPool, need: int, child_budget: int | None) -> list[int]:
    """``target``'s draw: ``need`` of the ``candidate_ratio * need`` records nearest ``target_pass_rate``, children
    ranked the learned (or set) penalty farther than they are, and a seed trained v times ``revisit_penalty * v``
    farther (the rule ``greedy`` counts its frontier by, ``exploration.py``)."""
    cfg, rng = pool.config, pool.rng
    m = max(need, math.ceil(cfg.candidate_ratio * need))
    penalty = cfg.child_distance_penalty
    if penalty is None:
        penalty = pool.child_calibration.frontier_penalty()
    picked = nearest(pool.buckets, pool.target_bucket, m, rng, child_budget,
                     child_penalty=round(penalty * cfg.resolution), seed_shift=_revisit_shift(pool))
    if len(picked) > need:
        keep = np.sort(rng.choice(len(picked), size=need, replace=False)).tolist()
        picked = [picked[i] for i in keep]
    return picked


def _revisit_shift(pool: QueryPool) -> Callable[[int], int] | None:
    """``revisit_penalty`` p in buckets: a seed trained v times counts ``round(p * v * resolution)`` farther;
    ``None`` when p is 0 (the plain walk, the same draws as without the knob)."""
    scale = pool.config.revisit_penalty * pool.config.resolution
    if scale <= 0:
        return None
    return lambda rid: round(scale * pool.get(rid).visits)


def _child_weight(pool: QueryPool) -> float:
    """``signal``'s factor on a child's weight: the share of children expected solvable, learned
    (``ChildCalibration``) or from a set ``child_distance_penalty`` d (the same equivalence, ``q = sqrt(1-4d^2)``)."""
    d = pool.config.child_distance_penalty
    if d is None:
        return 1.0 - pool.child_calibration.invalid_rate
    return math.sqrt(max(0.0, 1.0 - 4.0 * d * d))


def _cap_children(pool: QueryPool, picked: list[int], budget: int) -> list[int]:
    kids = [rid for rid in picked if _is_child(pool, rid)]
    if len(kids) <= budget:
        return picked
    pool.count("child_cap_hits", 1)
    keep = set(sample_parts([kids], budget, pool.rng))
    return [rid for rid in picked if not _is_child(pool, rid) or rid in keep]

