"""The replay buffer that reports the groups verl evicts before training, keyed by record id.

Trained groups reach the pool from the step's view (``batch_view.py``); groups that verl evicts before training
(DAPO's filter_groups drops all-right/all-wrong groups, failed rollouts) are read by this replay-buffer subclass
just before it clears them and reported to the trainer's open step (``Eviction``), so every rolled-out prompt feeds
its pass rate back to the pool (``outcomes.py``). The subclass is plugged in through verl's documented setting
(``trainer.v1.sampler.custom_sampler``); verl gives a custom buffer none of its group-filtering arguments, so the
trainer passes them in ``sampler_kwargs`` (``verl_contract.replay_buffer_filter_kwargs``), with
``heapa.poll_interval_s`` as the buffer's ``poll_interval``. ``FeedbackReplayBufferAsync`` is the same report over
verl's asynchronous buffer (``trainer.v1.trainer_mode=colocate_async``), which also evicts groups older than
``trainer.v1.sampler.max_off_policy_threshold`` steps.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from verl.trainer.ppo.v1.replay_buffer import ReplayBuffer, ReplayBufferAsync

from recipe.heapa.step.batch_view import Outcomes, StepBatch, parse_key
from recipe.heapa.verl_contract import FILTER_KWARGS  # what verl gives its own buffer and not a custom one

logger = logging.getLogger(__name__)


PATH = "pkg://recipe.heapa.step.replay_buffer"


@dataclass(frozen=True)
class Eviction:
    """Groups the buffer is about to clear: their outcomes by record id (none for trajectories without a reward),
    their reward info, what generating them cost (responses, response tokens) and the groups' uids."""

    outcomes: Outcomes
    reward_infos: list
    discarded: tuple[int, int]
    uids: tuple[str, ...] = ()


class ReportsEvictions:
    """The report, in front of either of verl's buffers (``connect``)."""

    def __init__(self, *, sampler_kwargs=None, **kwargs) -> None:
        own = dict(sampler_kwargs or {})
        passed = {k: own.pop(k) for k in (*FILTER_KWARGS, "poll_interval") if k in own}
        super().__init__(sampler_kwargs=own, **kwargs, **passed)
        self._report: Callable[[Eviction], None] | None = None
        self._acc_field = "acc"
        self._threshold: float | None = None  # heapa.feedback.pass_threshold, from connect

    def connect(self, report: Callable[[Eviction], None], acc_field: str, threshold: float) -> None:
        """Where evictions go (the trainer's open step), and how a trajectory's pass is read."""
        self._report, self._acc_field, self._threshold = report, acc_field, threshold

    def _clear_groups(self, partition_id: str, uids: set[str]) -> None:
        if partition_id == "train" and uids and self._report is not None:
            self._report(self._eviction(partition_id, uids))
        super()._clear_groups(partition_id, uids)

    def _eviction(self, partition_id: str, uids: set[str]) -> Eviction:
        partition = self.partitions[partition_id]
        keys = [k for k in partition if (parts := parse_key(k)) is not None and parts[0] in uids]
        cost = (len(keys), sum(int(partition[k].get("response_len", 0)) for k in keys))
        finished = [k for k in keys if parse_key(k)[0] in self.finished_keys[partition_id]]
        uids = tuple(sorted(uids))
        if not finished:
            return Eviction({}, [], cost, uids)
        view = StepBatch.read(finished, [partition[k] for k in finished], partition_id, self._acc_field)
        try:
            outcomes = view.outcomes(self._threshold)
        except KeyError:
            # Failed or partial trajectories carry no reward: they teach the pool nothing.
            logger.warning("evicted groups without %r; %d trajectories not fed back", self._acc_field, len(finished))
            outcomes = {}
        return Eviction(outcomes, view.reward_infos(), cost, uids)


class FeedbackReplayBuffer(ReportsEvictions, ReplayBuffer):
    """verl's sync replay buffer that reports the groups it evicts before clearing them."""


class FeedbackReplayBufferAsync(ReportsEvictions, ReplayBufferAsync):
    """verl's asynchronous replay buffer that reports the groups it evicts (stale ones too) before clearing them."""
