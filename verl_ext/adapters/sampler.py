"""``PoolBatchSampler``: the batch sampler that lets a ``Strategy`` choose verl's training prompts.

verl's V1 trainer pulls ``train_batch_size`` prompts per step as ``train_batch_size / gen_batch_size`` dataloader
fetches (``gen_batch_size`` is forced to 1 for DAPO's filter_groups and refills). This sampler makes one
*selection* of ``train_batch_size`` record ids (``strategy.select(pool, k, step)``; they are in flight in the pool
from then on), buffers it, and hands it out ``gen_batch_size`` ids at a time; when the buffer is empty the next
request triggers the next selection, so a selection always sees the feedback of the steps before it. Iteration
never ends (set ``trainer.total_training_steps``).

With an ``Allocator`` (``heapa.allocation``) each selection's prompts also get their number of responses
(``rollout_n``), spread from the pool's estimates over the same total as fixed ``n``; the allocator hears every
group's pass rate with the feedback.

The trainer drives it with ``set_step`` (the step selections are made for), ``on_feedback`` (``{id: (passes,
n)}`` -> ``pool.feedback`` then ``strategy.observe``) and ``release_unused`` (ids handed out but never trained go
back to the pool unchanged). ``state_dict`` holds the strategy's state, the buffer and the handed-out ids, so a
``StatefulDataLoader`` restored from ``data.pt`` yields exactly the batches the uninterrupted run would have.

Use with ``num_workers=0`` only (workers would prefetch stale selections); ``make_train_dataloader`` builds the
loader. After ``loader.load_state_dict(...)`` create the iterator at once (``iter(loader)``): torchdata restores
the dataset (the pool) and this sampler only then, and the trainer must not touch the pool before that.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from torch.utils.data import Sampler

from verl_ext.adapters.feedback import record_id
from verl_ext.allocation import Allocator
from verl_ext.pool import FeedbackSummary, QueryPool
from verl_ext.selection import Strategy, build_strategy
from verl_ext.selection.queue import SelectionQueue
from verl_ext.state_schema import check_schema

logger = logging.getLogger(__name__)

STATE_SCHEMA_VERSION = 1


class PoolExhaustedError(RuntimeError):
    """No record can be handed out: everything is in flight or archived and reinsertion returned nothing."""


class PoolBatchSampler(Sampler[list[int]]):
    """Batches of record ids chosen by a ``Strategy`` (see the module docstring).

    ``source``: the ``QueryPool`` or an object with a ``pool`` attribute (``PoolDataset``; read on every use, so
    a dataset restored in place is seen). ``strategy``: a ``Strategy`` or a registry name (``strategy_kwargs``
    go to its constructor). ``gen_batch_size`` (default ``train_batch_size``) must divide ``train_batch_size``.
    ``reinsert``: before every selection call ``pool.reinsert(step, train_batch_size)``; the pool's trigger decides
    (``always``: the records trained since the last selection return with their new statistic; ``below_batch``:
    only when the pool cannot fill a batch; ``never``: a no-op).
    """

    def __init__(self, source: Any, strategy: Strategy | str, train_batch_size: int,
                 gen_batch_size: int | None = None, *, strategy_kwargs: Mapping[str, Any] | None = None,
                 reinsert: bool = True, step: int = 0, allocator: Allocator | None = None) -> None:
        super().__init__()
        self._source = source
        self.strategy = build_strategy(strategy, **dict(strategy_kwargs or {})) if isinstance(strategy, str) \
            else strategy
        if not isinstance(self.strategy, Strategy):
            raise TypeError(f"strategy must be a Strategy or a registered name, got {type(strategy).__name__}")
        if strategy_kwargs and not isinstance(strategy, str):
            raise ValueError("strategy_kwargs only apply when the strategy is given by name")
        self.train_batch_size = _positive_int(train_batch_size, "train_batch_size")
        self.gen_batch_size = _positive_int(gen_batch_size or train_batch_size, "gen_batch_size")
        if self.train_batch_size % self.gen_batch_size:
            raise ValueError(f"gen_batch_size {self.gen_batch_size} must divide train_batch_size "
                             f"{self.train_batch_size} (verl fetches a step's prompts in whole gen batches)")
        self.step = int(step)
        self.allocator = allocator
        self._rollout_n: dict[int, int] = {}  # allocated responses of selected ids not yet rolled out
        # selected (in flight in the pool), not yet handed out; the simulator's DAPO draws through the same queue
        self._queue = SelectionQueue(self.train_batch_size, reinsert=reinsert, on_selected=self._on_selected)
        self._outstanding: dict[int, None] = {}  # handed out, waiting for on_feedback / release_unused
        self.select_seconds = 0.0  # wall time spent choosing prompts for the current step (reset by set_step)

    # ----------------------------------------------------------------------------------------- wiring
    @property
    def pool(self) -> QueryPool:
        return self._source.pool if hasattr(self._source, "pool") else self._source

    def set_step(self, step: int) -> None:
        """The training step the next selections are made for (the trainer's ``global_steps``); its selection
        time starts from zero."""
        self.step = int(step)
        self.select_seconds = 0.0

    # ----------------------------------------------------------------------------------------- iteration
    def __iter__(self) -> Iterator[list[int]]:
        # A generator: nothing is selected until the loader asks for a batch, and all iteration state lives on
        # the sampler (not in the generator), so a fresh iterator after a restore continues exactly.
        while True:
            yield self.next_batch()

    def next_batch(self) -> list[int]:
        """The next ``gen_batch_size`` ids (selecting a new batch when the buffer runs out)."""
        pool = self.pool
        start = time.perf_counter()
        try:
            chunk = self._queue.take(pool, self.strategy, self.gen_batch_size, self.step)
        finally:
            self.select_seconds += time.perf_counter() - start
        if len(chunk) < self.gen_batch_size:
            self._queue.put_back(chunk)  # they stay in flight and are handed out first once the pool can fill
            m = pool.metrics()
            raise PoolExhaustedError(
                f"step {self.step}: the pool has no record to hand out ({int(m['pool/size_in_flight'])} in flight, "
                f"{int(m['pool/size_archive'])} archived); give feedback or release_unused() for handed-out "
                "records, or enable reinsertion (pool reinsertion.trigger) / add records")
        self._outstanding.update(dict.fromkeys(chunk))
        return chunk

    def _on_selected(self, ids: list[int]) -> None:
        if len(ids) < self.train_batch_size:
            logger.warning("step %d: the pool filled only %d of %d prompts", self.step, len(ids), self.train_batch_size)
        if self.allocator is not None:
            self._rollout_n.update(self.allocator.plan(ids, self.pool.ranking_value))

    def rollout_n(self, ids: Iterable[Any]) -> list[int]:
        """The allocated responses of handed-out ``ids`` (``heapa.allocation``), each read once."""
        if self.allocator is None:
            raise RuntimeError("rollout_n needs an allocator (heapa.allocation.enabled=true)")
        chosen = [record_id(i, "rollout_n id") for i in ids]
        missing = [rid for rid in chosen if rid not in self._rollout_n]
        if missing:
            raise KeyError(f"no allocation for ids {missing[:10]}: not selected by this sampler, or already read")
        return [self._rollout_n.pop(rid) for rid in chosen]

    # ----------------------------------------------------------------------------------------- feedback
    def on_feedback(self, results: Mapping[Any, tuple[int, int]], step: int | None = None,
                    selected_at: Mapping[Any, int] | None = None) -> FeedbackSummary:
        """``pool.feedback(results, step, selected_at)`` then ``strategy.observe``; the ids stop being outstanding.
        ``selected_at``: record id -> the step that selected its group, where an asynchronous trainer hears it
        later (``QueryPool.feedback``)."""
        step = self.step if step is None else int(step)
        clean = {record_id(rid, "feedback id"): outcome for rid, outcome in results.items()}
        buffered = set(self._queue.ids)
        queued = [rid for rid in clean if rid in buffered]
        if queued:
            raise ValueError(f"feedback for ids {queued[:10]} that were selected but never handed out")
        summary = self.pool.feedback(clean, step, selected_at)
        self.strategy.observe(clean, step)
        if self.allocator is not None:
            self.allocator.observe(clean)
        for rid in clean:
            self._outstanding.pop(rid, None)
        return summary

    def release_unused(self, ids: Iterable[Any] | None = None, *, include_buffer: bool = False) -> list[int]:
        """Return handed-out ids that will never be trained (all outstanding ones when ``ids`` is None) to the
        pool unchanged; with ``include_buffer`` also the selected-but-not-handed-out ones (the next request then
        makes a fresh selection). Returns the released ids."""
        if ids is None:
            chosen = list(self._outstanding)
        else:
            chosen = [record_id(i, "release id") for i in ids]
            missing = [rid for rid in chosen if rid not in self._outstanding]
            if missing:
                raise ValueError(f"release_unused: ids {missing[:10]} were not handed out by this sampler (or were "
                                 "already fed back / released)")
        if include_buffer:
            chosen += self._queue.clear()
        if chosen:
            self.pool.release(chosen)
        for rid in chosen:
            self._outstanding.pop(rid, None)
            self._rollout_n.pop(rid, None)
        return chosen

    @property
    def outstanding_ids(self) -> list[int]:
        """Handed out and not yet fed back or released (in hand-out order)."""
        return list(self._outstanding)

    @property
    def buffered_ids(self) -> list[int]:
        """Selected (in flight in the pool) but not handed out yet, in hand-out order."""
        return self._queue.ids

    def metrics(self) -> dict[str, float]:
        """The strategy's ``select/*`` scalars plus the sampler's own counters."""
        out = dict(self.strategy.metrics())
        if self.allocator is not None:
            out.update(self.allocator.metrics())
        out.update({"select/buffered": float(len(self._queue)), "select/outstanding": float(len(self._outstanding)),
                    "select/selections": float(self._queue.selections),
                    "select/short_selections": float(self._queue.short_selections)})
        return out

    # ----------------------------------------------------------------------------------------- checkpoints
    def state_dict(self) -> dict[str, Any]:
        """Strategy state, buffer, handed-out ids, step and counters (JSON-safe)."""
        return {"schema_version": STATE_SCHEMA_VERSION, "strategy": self.strategy.state_dict(),
                **self._queue.state_dict(), "outstanding": list(self._outstanding), "step": self.step,
                "train_batch_size": self.train_batch_size, "gen_batch_size": self.gen_batch_size,
                **({"allocator": self.allocator.state_dict(),
                    "rollout_n": [[rid, m] for rid, m in self._rollout_n.items()]} if self.allocator else {})}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        check_schema(state, "PoolBatchSampler", STATE_SCHEMA_VERSION)
        for name in ("train_batch_size", "gen_batch_size"):
            if state[name] != getattr(self, name):
                logger.warning("%s changed on resume: %s -> %s", name, state[name], getattr(self, name))
        self.strategy.load_state_dict(state["strategy"])
        self._queue.load_state_dict(state)
        self._outstanding = dict.fromkeys(int(i) for i in state["outstanding"])
        self.step = int(state["step"])
        if self.allocator is not None:
            if "allocator" not in state:
                raise ValueError("PoolBatchSampler: heapa.allocation is on but the checkpoint was written without it; "
                                 "resume with heapa.allocation.enabled=false or start a new run")
            self.allocator.load_state_dict(state["allocator"])
            self._rollout_n = {int(rid): int(m) for rid, m in state["rollout_n"]}
        elif "allocator" in state:
            logger.warning("the checkpoint was written with heapa.allocation on; this run has it off: every prompt "
                           "gets rollout.n responses from here on")


def make_train_dataloader(dataset: Any, batch_sampler: PoolBatchSampler, collate_fn: Any = None):
    """verl's train ``StatefulDataLoader`` shape, driven by ``batch_sampler`` (num_workers=0, verl's collate)."""
    from torchdata.stateful_dataloader import StatefulDataLoader

    if collate_fn is None:
        from verl.utils.dataset.rl_dataset import collate_fn
    return StatefulDataLoader(dataset=dataset, batch_sampler=batch_sampler, num_workers=0, collate_fn=collate_fn)


def _positive_int(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive int, got {value!r}")
    return value
