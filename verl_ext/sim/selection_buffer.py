"""The recipe's batch sampler as the simulator's DAPO refills see it.

verl's DAPO asks for its prompts one at a time (``gen_batch_size`` 1: the step's batch, then every refill), and
the recipe's ``PoolBatchSampler`` answers from a buffer: when the buffer is empty it reinserts
(``pool.reinsert(step, k)``) and makes one selection of ``k`` records, which are in flight from then on, and hands
them out as asked. What a step leaves in the buffer carries into the next step's first requests, selected on the
pool as it was before that step's feedback. ``SelectionBuffer`` does the same, so the simulator's refills draw
from full-``k`` selections as the trainer's do, instead of selecting each refill at its own size.
"""

from __future__ import annotations

from collections import deque

from verl_ext.pool import QueryPool
from verl_ext.selection import Strategy


class SelectionBuffer:
    """``take(m, step)``: up to ``m`` ids, selecting ``k`` more whenever the buffer runs out; fewer only when a
    selection hands out nothing. ``selections`` / ``short_selections`` count the selections made and those that
    came back with fewer than ``k`` ids."""

    def __init__(self, pool: QueryPool, strategy: Strategy, k: int) -> None:
        if k < 1:
            raise ValueError(f"k must be positive, got {k}")
        self.pool, self.strategy, self.k = pool, strategy, int(k)
        self._buffer: deque[int] = deque()
        self.selections = 0
        self.short_selections = 0

    def take(self, m: int, step: int) -> list[int]:
        out: list[int] = []
        while len(out) < m:
            if not self._buffer and not self._select(step):
                break
            while self._buffer and len(out) < m:
                out.append(self._buffer.popleft())
        return out

    def _select(self, step: int) -> bool:
        self.pool.reinsert(step, self.k)
        ids = [int(i) for i in self.strategy.select(self.pool, self.k, step)]
        self.selections += 1
        self.short_selections += len(ids) < self.k
        self._buffer.extend(ids)
        return bool(ids)

    def __len__(self) -> int:
        return len(self._buffer)
