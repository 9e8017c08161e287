"""Where the capability frontier is, and which scored records a batch takes from it (spec section 2, revised).

Two definitions of the frontier, chosen by ``PoolConfig.boundary``:

- ``median`` (the paper's): the split point at rank ``low_fraction`` of the scored records. Candidates are the
  ``2*need`` records nearest that rank, half from each side; ``need`` of them are drawn at random. In a pool that
  is mostly solved (or mostly hopeless) the median sits on records scored 1.0 (or 0.0), so batches carry no
  signal: kept as the paper-faithful ablation.
- ``target`` (the default): the records whose estimated pass rate is nearest ``target_pass_rate`` (0.5, where a
  group of rollouts is most likely mixed), whatever the pool's shape. ``candidate_ratio`` > 1 draws the batch at
  random from that many nearest records instead (more diversity, less signal).

Ties (records in the same value bucket) are broken at random by the pool's RNG, so every tied record gets its
turn. Augmented children can be capped per batch (``max_child_fraction``) so a burst of children, some of them
unsolvable, cannot crowd out the seed set. Eviction under ``eviction: farthest`` removes the record whose value
is farthest from the frontier, children before seeds, so a full pool keeps its seeds and its informative
records; ``eviction: paper`` removes the hardest (scored insert) or the easiest (cold insert).
"""

from __future__ import annotations

import math

import numpy as np

from verl_ext.pool.buckets import ValueBuckets

SEED_GROUP, CHILD_GROUP = 0, 1


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


def median_bucket(buckets: ValueBuckets, low_fraction: float) -> tuple[int, int]:
    """``(split rank, bucket holding that rank)`` of the scored records (all groups merged)."""
    n = len(buckets)
    split = int(low_fraction * n)
    if n == 0:
        return 0, buckets.bucket_of_value(0.5)
    ends = np.cumsum(buckets.counts().sum(axis=0))
    return split, int(np.searchsorted(ends, min(split, n - 1), side="right"))


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
            exclude: set[int] | None = None, child_penalty: int = 0) -> list[int]:
    """Up to ``m`` ids nearest bucket ``center`` (walking outwards; both sides of one distance are one tie group),
    taking at most ``child_budget`` augmented records (``None`` = no cap) and skipping ``exclude``. Children count
    as ``child_penalty`` buckets farther than they are: a seed's estimate is measured, a child's is a guess that
    may come from an unsolvable problem."""
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


def farthest(buckets: ValueBuckets, center: int, group: int) -> int | None:
    """The non-empty bucket of ``group`` farthest from ``center`` (the easy side on a tie: solved records do not
    become informative again as the policy improves, hopeless ones may); ``None`` if the group is empty."""
    lo, hi = buckets.lowest(group), buckets.highest(group)
    if lo is None or hi is None:
        return None
    return hi if hi - center >= center - lo else lo


def pick_in_bucket(buckets: ValueBuckets, group: int, bucket: int, rng: np.random.Generator) -> int:
    """A uniformly random id of one non-empty slot."""
    members = buckets.members(group, bucket)
    return members[int(rng.integers(len(members)))]


def extreme_id(buckets: ValueBuckets, lowest: bool, rng: np.random.Generator) -> int:
    """A random id of the lowest (``lowest=True``) or highest non-empty bucket, over all groups."""
    found = [(g, buckets.lowest(g) if lowest else buckets.highest(g)) for g in range(buckets.groups)]
    found = [(g, b) for g, b in found if b is not None]
    if not found:
        raise IndexError("no scored records")
    best = min(b for _, b in found) if lowest else max(b for _, b in found)
    tied = [i for g, b in found if b == best for i in buckets.members(g, b)]
    return tied[int(rng.integers(len(tied)))]
