"""``RankSplit``: the scored records, split by rank into a hard half and an easy half (spec section 1).

The hard half (lower values) exposes its maximum, the easy half its minimum: the two tops are the records nearest
the split point (the capability frontier) and boundary sampling draws from them. Each half is a
``DoubleEndedHeap`` so the global extremes (hardest = min of hard, easiest = max of easy) are O(log n) too, for
eviction and for ``mixed`` sampling.

Invariants (checked by ``check``): every hard entry < every easy entry in ``(key, id)`` order, and
``len(hard) == floor(low_fraction * len(self))`` after every public operation. Each single insert or removal
moves at most one entry across, so all operations stay O(log n).
"""

from __future__ import annotations

import numpy as np

from verl_ext.pool.errors import UnknownRecordError
from verl_ext.pool.heap import DoubleEndedHeap


class RankSplit:
    """Scored ids with float keys, split by rank; ``low_fraction`` of them (floored) form the hard half."""

    __slots__ = ("low_fraction", "hard", "easy")

    def __init__(self, low_fraction: float = 0.5) -> None:
        self.low_fraction = low_fraction
        self.hard = DoubleEndedHeap()
        self.easy = DoubleEndedHeap()

    def __len__(self) -> int:
        return len(self.hard.lo._ids) + len(self.easy.lo._ids)

    def __contains__(self, item_id: object) -> bool:
        return item_id in self.hard or item_id in self.easy

    def key(self, item_id: int) -> float:
        side = self.hard if item_id in self.hard else self.easy
        return side.key(item_id)

    # ---------------------------------------------------------------- updates
    def insert(self, item_id: int, key: float, rebalance: bool = True) -> None:
        """Add a scored id on the side its key belongs to."""
        if self.hard and (key, item_id) < self.hard.peek_max()[::-1]:
            self.hard.push(item_id, key)
        else:
            self.easy.push(item_id, key)
        if rebalance:
            self.rebalance()

    def remove(self, item_id: int, rebalance: bool = True) -> float:
        """Remove ``item_id`` from whichever side holds it; return its key."""
        if item_id in self.hard:
            key = self.hard.remove(item_id)
        elif item_id in self.easy:
            key = self.easy.remove(item_id)
        else:
            raise UnknownRecordError(f"id {item_id} is not scored")
        if rebalance:
            self.rebalance()
        return key

    def update(self, item_id: int, key: float) -> None:
        """Change the key of ``item_id`` (it may cross sides)."""
        self.remove(item_id, rebalance=False)
        self.insert(item_id, key)

    def rebalance(self) -> None:
        """Move boundary entries across until the hard half holds exactly its rank share."""
        hard, easy = self.hard, self.easy
        n_hard = len(hard.lo._ids)
        target = int(self.low_fraction * (n_hard + len(easy.lo._ids)))
        if n_hard == target:  # the common case: nothing to move
            return
        while len(hard) > target:
            item_id, key = hard.pop_max()
            easy.push(item_id, key)
        while len(hard) < target:
            item_id, key = easy.pop_min()
            hard.push(item_id, key)

    def pop_min(self) -> tuple[int, float]:
        """Remove and return the globally lowest entry (hardest record)."""
        side = self.hard if self.hard else self.easy
        out = side.pop_min()
        self.rebalance()
        return out

    def pop_max(self) -> tuple[int, float]:
        """Remove and return the globally highest entry (easiest record)."""
        side = self.easy if self.easy else self.hard
        out = side.pop_max()
        self.rebalance()
        return out

    def peek_min(self) -> tuple[int, float]:
        return (self.hard if self.hard else self.easy).peek_min()

    def peek_max(self) -> tuple[int, float]:
        return (self.easy if self.easy else self.hard).peek_max()

    def boundary_candidates(self, c: int) -> list[int]:
        """The first ``c`` ids that alternately popping easy-top, hard-top, ... would yield (spec section 2).

        Equivalent to popping alternately (falling back to the other side when one is exhausted) and pushing the
        candidates back, but found by a read-only frontier search, so only the chosen ones are ever removed.
        """
        c = min(c, len(self))
        n_easy = min(len(self.easy), max((c + 1) // 2, c - len(self.hard)))
        n_hard = c - n_easy
        easy_top = self.easy.lo.top(n_easy)
        hard_top = self.hard.hi.top(n_hard)
        out: list[int] = []
        for j in range(max(n_easy, n_hard)):
            if j < n_easy:
                out.append(easy_top[j])
            if j < n_hard:
                out.append(hard_top[j])
        return out

    def clear(self) -> None:
        self.hard.clear()
        self.easy.clear()

    def rebuild(self, ids: list[int], keys: list[float], drop_lowest: int = 0) -> list[int]:
        """Replace the content with ``ids``/``keys`` using one C-level sort (bulk loads, reinsert-all).

        The ``drop_lowest`` hardest entries are left out and returned (lowest first), for capacity eviction.
        """
        order = np.lexsort((np.asarray(ids, dtype=np.int64), np.asarray(keys, dtype=np.float64))).tolist()
        dropped = [ids[i] for i in order[:drop_lowest]]
        order = order[drop_lowest:]
        ids_sorted = [ids[i] for i in order]
        keys_sorted = [keys[i] for i in order]
        cut = int(self.low_fraction * len(ids_sorted))
        self.hard.load_ascending(ids_sorted[:cut], keys_sorted[:cut])
        self.easy.load_ascending(ids_sorted[cut:], keys_sorted[cut:])
        return dropped

    # ---------------------------------------------------------------- inspection
    def id_at(self, index: int) -> int:
        """Id at position ``index`` of the concatenation hard-array + easy-array (for uniform draws)."""
        n_hard = len(self.hard)
        return self.hard.lo.id_at(index) if index < n_hard else self.easy.lo.id_at(index - n_hard)

    def items(self) -> list[tuple[int, float]]:
        """``(id, key)`` pairs, hard half then easy half, each in array order."""
        return list(self.hard.lo.items()) + list(self.easy.lo.items())

    def check(self) -> None:
        """Assert all invariants (O(n); for tests)."""
        self.hard.check()
        self.easy.check()
        assert len(self.hard) == int(self.low_fraction * len(self))
        if self.hard and self.easy:
            hk = self.hard.peek_max()
            ek = self.easy.peek_min()
            assert (hk[1], hk[0]) < (ek[1], ek[0]), (hk, ek)
