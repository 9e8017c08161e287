"""``ValueBuckets``: the scored records, grouped by value into equal-width buckets, one set per origin.

Why buckets instead of heaps ordered by ``(value, id)``: pass rates measured from ``n`` rollouts take few distinct
values, so most records tie. A heap breaks ties by id and keeps handing out the same ids; a bucket holds its ties
as an unordered set and every draw from it is uniformly random (seeded), so no record starves. Values closer than
one bucket width (``1 / resolution``) count as ties. The structure also answers every question the pool asks in
O(1) per record touched plus O(buckets) per call, instead of O(log n) heap work per record:

=====================================  ============================
insert / remove / move                 O(1)
rank window / nearest-to-a-value walk  O(buckets + records taken)
lowest / highest non-empty bucket      O(1) amortised
id at a position (uniform draws)       O(buckets) per call
=====================================  ============================

Layout: one Python list of ids per (group, bucket) slot, and one dict id -> ``position * slots + slot``, so a
record costs one list cell and one dict entry. Groups separate origins (0 = seed, 1 = augmented) so eviction can
prefer one origin and a batch can cap the other. Removal swaps the last id of the slot into the hole; the order
inside a slot is therefore arbitrary, but it is deterministic and saved by ``layout`` / restored by ``load``, so a
resumed pool draws exactly the same batches.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from verl_ext.pool.errors import DuplicateRecordError, UnknownRecordError

SEED_GROUP, CHILD_GROUP = 0, 1  # the pool's two groups: seeds and augmented children


class ValueBuckets:
    """Ids with values in [0, 1], bucketed by value, in ``groups`` separate sets. See the module docstring."""

    __slots__ = ("resolution", "groups", "_slots", "_members", "_where", "_lo", "_hi")

    def __init__(self, resolution: int = 1000, groups: int = 2) -> None:
        if resolution < 1 or groups < 1:
            raise ValueError(f"ValueBuckets needs resolution >= 1 and groups >= 1, got {resolution}, {groups}")
        self.resolution = int(resolution)
        self.groups = int(groups)
        self._slots = self.resolution * self.groups
        self._members: list[list[int]] = [[] for _ in range(self._slots)]
        self._where: dict[int, int] = {}
        # Per group, a lower bound on the lowest and an upper bound on the highest non-empty bucket: tightened
        # lazily by ``lowest``/``highest``, so emptying an extreme bucket costs nothing until someone asks.
        self._lo = [self.resolution] * self.groups
        self._hi = [-1] * self.groups

    # ---------------------------------------------------------------- queries
    def __len__(self) -> int:
        return len(self._where)

    def __bool__(self) -> bool:
        return bool(self._where)

    def __contains__(self, item_id: object) -> bool:
        return item_id in self._where

    def __iter__(self) -> Iterator[int]:
        """Ids, slot by slot (group-major, ascending bucket), in slot order."""
        for members in self._members:
            yield from members

    def bucket_of_value(self, value: float) -> int:
        """Bucket index of a value in [0, 1] (1.0 falls in the last bucket)."""
        b = int(value * self.resolution)
        return b if b < self.resolution else self.resolution - 1

    def locate(self, item_id: int) -> tuple[int, int]:
        """``(group, bucket)`` of ``item_id``."""
        try:
            slot = self._where[item_id] % self._slots
        except KeyError:
            raise UnknownRecordError(f"id {item_id} is not scored") from None
        return divmod(slot, self.resolution)

    def count(self, group: int, bucket: int) -> int:
        return len(self._members[group * self.resolution + bucket])

    def members(self, group: int, bucket: int) -> list[int]:
        """The slot's id list itself (read it, do not mutate it)."""
        return self._members[group * self.resolution + bucket]

    def group_size(self, group: int) -> int:
        base = group * self.resolution
        return sum(len(m) for m in self._members[base:base + self.resolution])

    def counts(self) -> np.ndarray:
        """``(groups, resolution)`` array of slot sizes."""
        return np.fromiter((len(m) for m in self._members), dtype=np.int64,
                           count=self._slots).reshape(self.groups, self.resolution)

    def lowest(self, group: int) -> int | None:
        """Lowest non-empty bucket of ``group`` (``None`` if the group is empty). Amortised O(1)."""
        base, b = group * self.resolution, self._lo[group]
        members = self._members
        while b < self.resolution and not members[base + b]:
            b += 1
        self._lo[group] = b
        return b if b < self.resolution else None

    def highest(self, group: int) -> int | None:
        """Highest non-empty bucket of ``group`` (``None`` if the group is empty). Amortised O(1)."""
        base, b = group * self.resolution, self._hi[group]
        members = self._members
        while b >= 0 and not members[base + b]:
            b -= 1
        self._hi[group] = b
        return b if b >= 0 else None

    def id_at(self, index: int) -> int:
        """Id at position ``index`` of the ``__iter__`` order; O(slots). Use ``ids_at`` for many positions."""
        return self.ids_at([index])[0]

    def ids_at(self, positions: list[int]) -> list[int]:
        """Ids at positions of the ``__iter__`` order (one cumulative count for the whole call)."""
        if not positions:
            return []
        ends = np.cumsum(self.counts().ravel())
        pos = np.asarray(positions, dtype=np.int64)
        if pos.min() < 0 or pos.max() >= len(self._where):
            raise IndexError(f"positions outside [0, {len(self._where)})")
        slots = np.searchsorted(ends, pos, side="right")
        starts = ends - self.counts().ravel()
        return [self._members[s][p - starts[s]] for s, p in zip(slots.tolist(), pos.tolist())]

    # ---------------------------------------------------------------- updates
    def insert(self, item_id: int, value: float, group: int = 0) -> None:
        """Add ``item_id`` with ``value`` to ``group``; ``DuplicateRecordError`` if present. O(1)."""
        if item_id in self._where:
            raise DuplicateRecordError(f"id {item_id} is already scored")
        if not 0.0 <= value <= 1.0:  # also rejects NaN
            raise ValueError(f"value of id {item_id} must be in [0, 1], got {value!r}")
        b = self.bucket_of_value(value)
        slot = group * self.resolution + b
        members = self._members[slot]
        self._where[item_id] = len(members) * self._slots + slot
        members.append(item_id)
        if b < self._lo[group]:
            self._lo[group] = b
        if b > self._hi[group]:
            self._hi[group] = b

    def remove(self, item_id: int) -> tuple[int, int]:
        """Remove ``item_id``; return its ``(group, bucket)``. O(1) (the slot's last id fills the hole)."""
        try:
            packed = self._where.pop(item_id)
        except KeyError:
            raise UnknownRecordError(f"id {item_id} is not scored") from None
        pos, slot = divmod(packed, self._slots)
        members = self._members[slot]
        last = members.pop()
        if pos < len(members):
            members[pos] = last
            self._where[last] = pos * self._slots + slot
        return divmod(slot, self.resolution)

    def move(self, item_id: int, value: float) -> None:
        """Give ``item_id`` a new value (same group). O(1)."""
        group, _ = self.remove(item_id)
        self.insert(item_id, value, group)

    def clear(self) -> None:
        for members in self._members:
            members.clear()
        self._where.clear()
        self._lo = [self.resolution] * self.groups
        self._hi = [-1] * self.groups

    # ---------------------------------------------------------------- checkpoints
    def layout(self) -> list[list[int]]:
        """Every non-empty slot as ``[slot, id, id, ...]``: the exact order that ``load`` restores."""
        return [[slot, *members] for slot, members in enumerate(self._members) if members]

    def load(self, layout: list[list[int]]) -> None:
        """Replace the content with a ``layout()`` snapshot. Values are implied by the slots."""
        self.clear()
        for row in layout:
            slot, ids = int(row[0]), [int(i) for i in row[1:]]
            if not 0 <= slot < self._slots:
                raise ValueError(f"bucket layout names slot {slot}; this structure has {self._slots}")
            members = self._members[slot]
            for rid in ids:
                if rid in self._where:
                    raise DuplicateRecordError(f"bucket layout lists id {rid} twice")
                self._where[rid] = len(members) * self._slots + slot
                members.append(rid)
            group, b = divmod(slot, self.resolution)
            self._lo[group] = min(self._lo[group], b)
            self._hi[group] = max(self._hi[group], b)

    def check(self) -> None:
        """Assert the index matches the lists (O(n); for tests)."""
        seen = 0
        for slot, members in enumerate(self._members):
            for pos, rid in enumerate(members):
                assert self._where[rid] == pos * self._slots + slot, (rid, slot, pos)
            seen += len(members)
        assert seen == len(self._where)
        for g in range(self.groups):
            lo, hi = self._lo[g], self._hi[g]
            base = g * self.resolution
            assert all(not self._members[base + b] for b in range(0, min(lo, self.resolution)))
            assert all(not self._members[base + b] for b in range(max(hi + 1, 0), self.resolution))


def median_bucket(buckets: ValueBuckets, low_fraction: float) -> tuple[int, int]:
    """``(split rank, bucket holding that rank)`` of the scored records (all groups merged)."""
    n = len(buckets)
    split = int(low_fraction * n)
    if n == 0:
        return 0, buckets.bucket_of_value(0.5)
    ends = np.cumsum(buckets.counts().sum(axis=0))
    return split, int(np.searchsorted(ends, min(split, n - 1), side="right"))
