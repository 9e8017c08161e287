"""The replay buffer that reports the groups verl evicts before training, keyed by record id.

Trained groups reach the pool from the step's view (``step/batch_view.py``); groups that verl evicts before training
(DAPO's filter_groups drops all-right/all-wrong groups, failed rollouts) are read by this replay-buffer subclass
just before it clears them, so every rolled-out prompt feeds its pass rate back to the pool (``step/outcomes.py``). The subclass is plugged in
through verl's documented setting (``trainer.v1.sampler.custom_sampler``); verl gives a custom buffer none of its
group-filtering arguments, so the trainer passes them in ``sampler_kwargs`` (``verl_contract.replay_buffer_filter_kwargs``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from verl.trainer.ppo.v1.replay_buffer import ReplayBuffer

from recipe.heapa.step.batch_view import Outcomes, StepBatch, parse_key
from recipe.heapa.verl_contract import FILTER_KWARGS  # what verl gives its own buffer and not a custom one

logger = logging.getLogger(__name__)


PATH = "pkg://recipe.heapa.step.replay_buffer"


class FeedbackReplayBuffer(ReplayBuffer):
    """verl's sync replay buffer that reports the outcomes of groups it evicts before clearing them, and what
    generating every evicted trajectory cost (``on_discarded(responses, response tokens)``). The trainer sets the
    callbacks after building it."""

    def __init__(self, *, sampler_kwargs=None, **kwargs) -> None:
        own = dict(sampler_kwargs or {})
        filtering = {k: own.pop(k) for k in FILTER_KWARGS if k in own}
        super().__init__(sampler_kwargs=own, **kwargs, **filtering)

    on_evicted: Callable[[Outcomes], None] | None = None
    on_discarded: Callable[[int, int], None] | None = None
    acc_field: str = "acc"
    threshold: float = 0.5
    reward_infos: list | None = None  # the trainer's per-step list: evicted trajectories' reward info joins it

    def _clear_groups(self, partition_id: str, uids: set[str]) -> None:
        if partition_id == "train" and uids:
            self._report(partition_id, uids)
        super()._clear_groups(partition_id, uids)

    def _report(self, partition_id: str, uids: set[str]) -> None:
        partition = self.partitions[partition_id]
        keys = [k for k in partition if (parts := parse_key(k)) is not None and parts[0] in uids]
        if self.on_discarded is not None and keys:
            self.on_discarded(len(keys), sum(int(partition[k].get("response_len", 0)) for k in keys))
        if self.on_evicted is not None:
            finished = [k for k in keys if parse_key(k)[0] in self.finished_keys[partition_id]]
            if not finished:
                return
            view = StepBatch.read(finished, [partition[k] for k in finished], partition_id, self.acc_field)
            if self.reward_infos is not None:
                self.reward_infos.extend(view.reward_infos())
            try:
                outcomes = view.outcomes(self.threshold)
            except KeyError:
                # Failed or partial trajectories carry no reward: they teach the pool nothing.
                logger.warning("evicted groups without %r; %d trajectories not fed back", self.acc_field,
                               len(finished))
                outcomes = {}
            if outcomes:
                self.on_evicted(outcomes)
