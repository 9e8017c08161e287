"""Which scored records a batch takes from the capability frontier (spec section 2, revised).

Three definitions of the frontier, chosen by ``PoolConfig.boundary``:

- ``median`` (the paper's): the split point at rank ``low_fraction`` of the scored records. Candidates are the
  ``2*need`` records nearest that rank, half from each side; ``need`` of them are drawn at random. In a pool that
  is mostly solved (or mostly hopeless) the median sits on records scored 1.0 (or 0.0), so batches carry no
  signal: kept as the paper-faithful ablation.
- ``target`` (the default): the records whose estimated pass rate is nearest ``target_pass_rate`` (0.5, where a
  group of rollouts is most likely mixed), whatever the pool's shape. ``candidate_ratio`` > 1 draws the batch at
  random from that many nearest records instead (more diversity, less signal).
- ``signal``: no hard edge. Every scored record may be drawn, with weight ``v(1-v)`` of its estimate ``v``: how
  likely a group of its rollouts is mixed, so the batch keeps uniform sampling's spread over what can still teach
  (records at 0.85 come half as often as at 0.5) minus what is predicted all-equal. ``target`` trains only the
  band nearest 0.5; on the CPU task that stops polishing the easy levels once they pass ~0.75, and HeaPA-GRPO
  fell below uniform GRPO after step 40 (``docs/cpu_learning.md``).

Ties (records in the same value bucket) are broken at random by the pool's RNG, so every tied record gets its
turn. Augmented children can be capped per batch (``max_child_fraction``) so a burst of children, some of them
unsolvable, cannot crowd out the seed set. These functions only read the buckets (and the pool's RNG); the
caller withdraws what they return. Which record eviction removes is the pool's (``pool/capacity.py``).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from verl_ext.pool.buckets import CHILD_GROUP, SEED_GROUP, ValueBuckets, median_bucket


def sample_parts(parts: list[list[int]], m: int, rng: np.random.Generator) -> list[int]:
    """``m`` ids drawn uniformly without replacement from the concatenation of ``parts`` (all of them, in order,
    if ``m`` covers it), without building the concatenation: a tie group can hold 10^5 records."""
    total = sum(len(p) for p in parts)
    if m >= total:
        return [i for p in parts for i in p]
    if m <= 0:
        return []
    picks = np.sort(rng.choice(total, size=m, replace=False)).tolist()
    out: list[int] = []
    start, j = 0, 0
    for part in parts:
        end = start + len(part)
        while j < len(picks) and picks[j] < end:
            out.append(part[picks[j] - start])
            j += 1
        start = end
    return out


def _bucket_parts(buckets: ValueBuckets, b: int) -> list[list[int]]:
    return [buckets.members(g, b) for g in range(buckets.groups)]


def rank_window(buckets: ValueBuckets, lo: int, hi: int, rng: np.random.Generator) -> list[int]:
    """Ids whose rank lies in ``[lo, hi)`` in ascending value order, ties (one bucket) in random order."""
    lo, hi = max(lo, 0), min(hi, len(buckets))
    if hi <= lo:
        return []
    counts = buckets.counts().sum(axis=0)
    ends = np.cumsum(counts)
    starts = ends - counts
    first = int(np.searchsorted(ends, lo, side="right"))
    last = int(np.searchsorted(ends, hi - 1, side="right"))
    out: list[int] = []
    for b in range(first, last + 1):
        s, e = int(starts[b]), int(ends[b])
        take = min(e, hi) - max(s, lo)
        if take > 0:
            out.extend(sample_parts(_bucket_parts(buckets, b), take, rng))
    return out


def median_candidates(buckets: ValueBuckets, need: int, low_fraction: float, rng: np.random.Generator) -> list[int]:
    """The paper's boundary draw: ``2*need`` records nearest the split rank (half from each side, falling back to
    one side when the other runs out), then ``need`` of them at random."""
    n = len(buckets)
    split, _ = median_bucket(buckets, low_fraction)
    c = min(2 * need, n)
    n_easy = min(n - split, max((c + 1) // 2, c - split))
    n_hard = c - n_easy
    cand = rank_window(buckets, split - n_hard, split + n_easy, rng)
    if len(cand) > need:
        keep = np.sort(rng.choice(len(cand), size=need, replace=False)).tolist()
        cand = [cand[i] for i in keep]
    return cand


def _ring(center: int, d: int, res: int) -> list[int]:
    """The buckets at distance ``d`` from ``center`` (one or two), inside [0, res)."""
    if d < 0:
        return []
    sides = [center - d] if d == 0 else [center - d, center + d]
    return [b for b in sides if 0 <= b < res]


def nearest(buckets: ValueBuckets, center: int, m: int, rng: np.random.Generator, child_budget: int | None = None,
            exclude: set[int] | None = None, child_penalty: int = 0,
            seed_shift: Callable[[int], int] | None = None) -> list[int]:
    """Up to ``m`` ids nearest bucket ``center`` (walking outwards; both sides of one distance are one tie group),
    taking at most ``child_budget`` augmented records (``None`` = no cap) and skipping ``exclude``. Children count
    as ``child_penalty`` buckets farther than they are: a seed's estimate is measured, a child's is a guess that
    may come from an unsolvable problem. ``seed_shift(id)`` (``revisit_penalty``) counts a seed that many buckets
    farther still."""
    if seed_shift is not None:
        if exclude:
            raise ValueError("nearest: seed_shift does not take exclude (no caller needs both)")
        return _nearest_shifted(buckets, center, m, rng, child_budget, child_penalty, seed_shift)
    res = buckets.resolution
    out: list[int] = []
    budget = math.inf if child_budget is None else child_budget
    for d in range(res + child_penalty):
        if len(out) >= m:
            break
        seed_sides, kid_sides = _ring(center, d, res), _ring(center, d - child_penalty, res)
        if not seed_sides and not kid_sides and d >= child_penalty:
            break
        seeds = [buckets.members(SEED_GROUP, b) for b in seed_sides]
        kids = ([buckets.members(CHILD_GROUP, b) for b in kid_sides]
                if buckets.groups > 1 and budget > 0 else [])
        if exclude:
            seeds = [[i for i in part if i not in exclude] for part in seeds]
            kids = [[i for i in part if i not in exclude] for part in kids]
        if sum(len(p) for p in kids) > budget:
            kids = [sample_parts(kids, int(budget), rng)]
        picked = sample_parts(seeds + kids, m - len(out), rng)
        if kids and budget is not math.inf:
            budget -= sum(1 for i in picked if buckets.locate(i)[0] == CHILD_GROUP)
        out.extend(picked)
    return out


def _nearest_shifted(buckets: ValueBuckets, center: int, m: int, rng: np.random.Generator,
                     child_budget: int | None, child_penalty: int, seed_shift: Callable[[int], int]) -> list[int]:
    """``nearest`` with each seed ``seed_shift(id)`` buckets farther: the walk files every seed it passes under the
    distance it counts at and takes, at each distance, the seeds filed there with the children at it. Seeds are
    looked at once each, as far out as the batch needs: O(buckets walked + seeds passed)."""
    res = buckets.resolution
    out: list[int] = []
    budget = math.inf if child_budget is None else child_budget
    filed: dict[int, list[int]] = {}
    d = 0
    while len(out) < m:
        for b in _ring(center, d, res):
            for rid in buckets.members(SEED_GROUP, b):
                filed.setdefault(d + max(0, seed_shift(rid)), []).append(rid)
        kids = ([buckets.members(CHILD_GROUP, b) for b in _ring(center, d - child_penalty, res)]
                if buckets.groups > 1 and budget > 0 else [])
        if sum(len(p) for p in kids) > budget:
            kids = [sample_parts(kids, int(budget), rng)]
        seeds = filed.pop(d, [])
        picked = sample_parts([seeds] + kids, m - len(out), rng)
        if kids and budget is not math.inf:
            budget -= sum(1 for i in picked if buckets.locate(i)[0] == CHILD_GROUP)
        out.extend(picked)
        d += 1
        if d >= res + child_penalty and not filed:
            break
    return out


def signal_weights(resolution: int) -> np.ndarray:
    """``v(1-v)`` at each bucket's centre: the ``signal`` draw's weight per record."""
    v = (np.arange(resolution) + 0.5) / resolution
    return v * (1.0 - v)


def signal_draw(buckets: ValueBuckets, m: int, rng: np.random.Generator, child_budget: int | None = None,
                child_weight: float = 1.0) -> list[int]:
    """Up to ``m`` ids drawn without replacement, each draw proportional to ``v(1-v)`` among the records left,
    at most ``child_budget`` augmented ones. A child's weight is scaled by ``child_weight``, the share of children
    expected solvable: an unsolvable one scores 0/n whatever its parent-derived estimate says. Records of weight
    0 are never drawn. O(m * buckets)."""
    res = buckets.resolution
    weights = np.tile(signal_weights(res), (buckets.groups, 1))
    if buckets.groups > 1:
        weights[CHILD_GROUP] *= max(0.0, child_weight)
    left = buckets.counts().astype(np.float64)
    budget = math.inf if child_budget is None else child_budget
    taken: dict[int, set[int]] = {}
    out: list[int] = []
    while len(out) < m:
        if buckets.groups > 1 and budget <= 0:
            left[CHILD_GROUP] = 0.0
        mass = (left * weights).ravel()
        total = mass.sum()
        if total <= 0.0:
            break
        slot = int(np.searchsorted(np.cumsum(mass), rng.random() * total, side="right"))
        slot = min(slot, mass.size - 1)
        group, b = divmod(slot, res)
        members, skip = buckets.members(group, b), taken.setdefault(slot, set())
        while True:  # rejection: a slot may hold 10^5 ties and this draw took few of them
            rid = members[int(rng.integers(len(members)))]
            if rid not in skip:
                break
        skip.add(rid)
        left[group, b] -= 1
        out.append(rid)
        if group == CHILD_GROUP:
            budget -= 1
    return out

