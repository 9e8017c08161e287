"""Capacity of the pool: controlled reinsertion from the archive, scored inserts, and eviction (spec sections 1, 4).

``QueryPool`` inherits these methods; kept apart so pool.py reads as the storage/feedback flow. Eviction rules
(``PoolConfig.eviction``): ``farthest`` removes the pooled child farthest from the frontier, a seed only when no
child is pooled, so augmentation can never push the seed set out; ``paper`` removes the hardest record after a
scored insert and the easiest to make room for a cold one (the module functions at the end pick the victim).
The evicted-id feed (``drain_evicted``) is bounded: if nothing drains it, the oldest half is dropped, counted
and warned about once.
"""

from __future__ import annotations

import logging
import math

import numpy as np

from verl_ext.pool.buckets import CHILD_GROUP, SEED_GROUP, ValueBuckets
from verl_ext.pool.checks import check_count
from verl_ext.pool.record import AUGMENTED, POOLED

logger = logging.getLogger(__name__)


class PoolCapacityMixin:
    """``reinsert`` and the insert/evict internals of ``QueryPool``."""

    def reinsert(self, step: int, batch_size: int) -> int:
        """Controlled reinsertion of archived records, oldest first (spec section 4); returns how many returned.

        Runs when the trigger fires; moves at most ``rate`` records into the free capacity. Under ``eviction:
        farthest`` an archived record that finds the pool full takes the place of the pooled child farthest from
        the frontier, so children can never lock the seed set out, and an archived child with no child to displace
        is evicted rather than holding the queue behind it. Records failing a filter (solved streak, visit cap)
        are retired (evicted) instead. O(returned).
        """
        cfg = self.config.reinsertion
        batch_size = check_count(batch_size, "batch_size")
        if cfg.trigger == "never" or (cfg.trigger == "below_batch" and self.num_available >= batch_size):
            return 0
        room = self.config.max_pool_size - self._live_count()
        limit = math.inf if cfg.rate is None else cfg.rate
        returned = 0
        while self._archive and returned < limit:
            rid = next(iter(self._archive))
            rec = self._records[rid]
            retire = "retired_solved" if rec.solved_streak(cfg.drop_solved_streak) else (
                "retired_visits" if cfg.max_visits is not None and rec.visits >= cfg.max_visits else None)
            if retire is None and room <= 0 and not self._displace_child():
                if rec.origin != AUGMENTED or self.config.eviction != "farthest":
                    break
                retire = "capacity_child"
            del self._archive[rid]
            if retire is not None:
                self._evict(rid, retire)
                continue
            room -= 1 if room > 0 else 0
            self._records[rid].status = POOLED
            self._scored.insert(rid, self.ranking_value(rid), self._group(rid))
            returned += 1
        self._counters["reinserted"] += returned
        if returned:
            logger.debug("step %d: reinserted %d archived records", step, returned)
        return returned

    def _displace_child(self) -> bool:
        """Make room for a returning record by evicting the pooled child farthest from the frontier (``farthest``
        eviction only); True if room was made."""
        if self.config.eviction != "farthest":
            return False
        b = farthest(self._scored, self._target_bucket, CHILD_GROUP)
        if b is None:
            return False
        victim = pick_in_bucket(self._scored, CHILD_GROUP, b, self._rng)
        self._scored.remove(victim)
        self._evict(victim, "capacity_child")
        return True

    def _insert_scored(self, rid: int, key: float) -> None:
        """Insert into the buckets; if that overflows the pool, evict by the eviction rule (maybe ``rid`` itself)."""
        self._records[rid].status = POOLED
        self._scored.insert(rid, key, self._group(rid))
        if self._live_count() > self.config.max_pool_size:
            self._evict_one(scored_insert=True)

    def _insert_scored_many(self, ids: list[int]) -> None:
        for rid in ids:
            self._insert_scored(rid, self.ranking_value(rid))

    def _evict_one(self, scored_insert: bool) -> None:
        """Evict one pooled record for capacity. ``farthest``: the child farthest from the frontier, else the seed
        farthest from it. ``paper``: the hardest after a scored insert, the easiest to make room for a cold one."""
        buckets, rng = self._scored, self._rng
        if self.config.eviction == "paper":
            rid = extreme_id(buckets, lowest=scored_insert, rng=rng)
            reason = "capacity_hard" if scored_insert else "capacity_easy"
        else:
            group = CHILD_GROUP if buckets.lowest(CHILD_GROUP) is not None else SEED_GROUP
            b = farthest(buckets, self._target_bucket, group)
            if b is None:
                raise IndexError("no scored records to evict")
            rid = pick_in_bucket(buckets, group, b, rng)
            reason = "capacity_child" if group == CHILD_GROUP else "capacity_seed"
        buckets.remove(rid)
        self._evict(rid, reason)

    def _evict(self, rid: int, reason: str) -> None:
        """Forget a record that has already left its structure; count it and report it to ``drain_evicted``."""
        if self._records.pop(rid).stat is not None:
            self._measured -= 1
        self._counters["evicted_" + reason] += 1
        if self.config.track_changes:
            self._evicted_pending.append(rid)
            self._changed_pending.pop(rid, None)
            if len(self._evicted_pending) > max(4096, self.config.max_pool_size):
                self._drop_evicted_feed()

    def _drop_evicted_feed(self) -> None:
        """Nobody drains the evicted-id feed (``track_changes`` on without lineage): keep it bounded."""
        half = len(self._evicted_pending) // 2
        del self._evicted_pending[:half]
        if not self._counters["feed_dropped_evicted"]:
            logger.warning("the pool's evicted-id feed is not drained; dropping its oldest ids (set "
                           "track_changes=false when no lineage reads it)")
        self._counters["feed_dropped_evicted"] += half


# ---------------------------------------------------------------- which record eviction removes
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
