"""``SelectionQueue``: one selection of ``k`` records at a time, handed out as they are asked for.

verl's DAPO asks for its prompts one at a time (``gen_batch_size`` 1: the step's batch, then every refill). The
recipe's ``PoolBatchSampler`` answers from this queue, and so does the simulator's DAPO, so both draw refills from
full-``k`` selections: when the queue is empty the next request reinserts (``pool.reinsert(step, k)``) and makes one
selection of ``k`` records, which are in flight in the pool from then on. What a step leaves in the queue is handed
out first at the next step, selected on the pool as it was before that step's feedback.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping
from typing import Any

from verl_ext.pool import QueryPool
from verl_ext.selection.base import Strategy


class SelectionQueue:
    """``take(pool, strategy, m, step)``: up to ``m`` ids, selecting ``k`` more whenever the queue runs out; fewer
    only when a selection comes back empty. ``on_selected(ids)`` hears every non-empty selection before any of
    it is handed out. ``selections`` / ``short_selections`` count the non-empty selections and those with fewer
    than ``k`` ids. ``reinsert=False`` leaves the pool's reinsertion to its caller."""

    def __init__(self, k: int, *, reinsert: bool = True,
                 on_selected: Callable[[list[int]], None] | None = None) -> None:
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise ValueError(f"k must be a positive int, got {k!r}")
        self.k, self.reinsert, self.on_selected = k, bool(reinsert), on_selected
        self._queue: deque[int] = deque()
        self.selections = 0
        self.short_selections = 0

    def take(self, pool: QueryPool, strategy: Strategy, m: int, step: int) -> list[int]:
        out: list[int] = []
        while len(out) < m:
            if not self._queue:
                try:
                    selected = self._select(pool, strategy, step)
                except BaseException:
                    self.put_back(out)  # ids already taken stay in flight and are handed out next
                    raise
                if not selected:
                    break
            while self._queue and len(out) < m:
                out.append(self._queue.popleft())
        return out

    def _select(self, pool: QueryPool, strategy: Strategy, step: int) -> bool:
        if self.reinsert:
            pool.reinsert(step, self.k)
        ids = [int(i) for i in strategy.select(pool, self.k, step)]
        if not ids:
            return False
        self.selections += 1
        self.short_selections += len(ids) < self.k
        if self.on_selected is not None:
            self.on_selected(ids)
        self._queue.extend(ids)
        return True

    def put_back(self, ids: list[int]) -> None:
        """Return ids taken but not handed on to the front of the queue, in their order."""
        self._queue.extendleft(reversed(ids))

    def clear(self) -> list[int]:
        """Empty the queue; returns what it held (still in flight in the pool: the caller releases them)."""
        held = list(self._queue)
        self._queue.clear()
        return held

    @property
    def ids(self) -> list[int]:
        """Selected and not handed out yet, in hand-out order."""
        return list(self._queue)

    def __len__(self) -> int:
        return len(self._queue)

    def state_dict(self) -> dict[str, Any]:
        return {"buffer": list(self._queue), "selections": self.selections,
                "short_selections": self.short_selections}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self._queue = deque(int(i) for i in state["buffer"])
        self.selections = int(state["selections"])
        self.short_selections = int(state["short_selections"])
