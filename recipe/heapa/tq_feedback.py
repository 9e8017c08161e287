"""Reading per-trajectory correctness out of verl's TransferQueue, keyed by record id.

Trained groups are read from the step's batch keys; groups that verl evicts before training (DAPO's
filter_groups drops all-right/all-wrong groups, failed rollouts) are read by a replay-buffer subclass just
before it clears them, so every rolled-out prompt feeds its pass rate back to the pool. The subclass is plugged in
through verl's documented setting (``trainer.v1.sampler.custom_sampler``); verl gives a custom buffer none of its
group-filtering arguments, so the trainer passes them in ``sampler_kwargs`` (``verl_api.replay_buffer_filter_kwargs``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any

import transfer_queue as tq

from verl.trainer.ppo.v1.replay_buffer import ReplayBuffer
from verl_ext.adapters.feedback import group_outcomes

logger = logging.getLogger(__name__)
Outcomes = dict[int, tuple[int, int]]


def acc_of(extra: Any, acc_field: str) -> Any:
    data = getattr(extra, "data", extra)
    info = data.get("reward_extra_info", {}) if isinstance(data, dict) else {}
    return info.get(acc_field)


REUSED_TAG = "ar3po_reused"  # TransferQueue tag of a response AR3PO reused from its bank (not generated this step)


def generated_keys(keys: Iterable[str], tags: Iterable[dict]) -> list[str]:
    """Trajectory keys of a step's batch that were generated this step: not verl's padding rows (they copy a real
    row's fields, ``acc`` included) and not AR3PO's reused responses (an old success is no news for the pool)."""
    return [k for k, tag in zip(keys, tags) if not tag.get("is_padding", False) and not tag.get(REUSED_TAG, False)
            and k.count("_") >= 2]


def reward_info_of(extra: Any) -> dict | None:
    data = getattr(extra, "data", extra)
    return data.get("reward_extra_info") if isinstance(data, dict) else None


def read_outcomes(keys: Iterable[str], partition_id: str, acc_field: str = "acc",
                  threshold: float = 0.5, reward_infos: list | None = None) -> Outcomes:
    """{record id: (passes, n)} for trajectory ``keys`` (trajectories without ``acc`` are reported, not guessed).
    Each trajectory's ``reward_extra_info`` is appended to ``reward_infos`` when given (timeouts, errors)."""
    keys = [k for k in keys if k.count("_") >= 2]  # trajectories are {uid}_{session}_{i}; prompts are bare uids
    if not keys:
        return {}
    data = tq.kv_batch_get(keys=keys, partition_id=partition_id, select_fields=["index", "extra_fields"])
    index = list(data["index"])
    if reward_infos is not None:
        reward_infos.extend(reward_info_of(extra) for extra in data["extra_fields"])
    accs = [acc_of(extra, acc_field) for extra in data["extra_fields"]]
    missing = sum(a is None for a in accs)
    if missing:
        raise KeyError(
            f"{missing} of {len(accs)} trajectories have no reward_extra_info[{acc_field!r}]: use the 'heapa' "
            "reward manager (reward.reward_manager.name=heapa) or a reward function that returns it"
        )
    return group_outcomes(index, accs, threshold=threshold)


FILTER_KWARGS = ("filter_groups_metric", "sync_refill_failed_groups", "train_batch_size", "gen_batch_size",
                 "max_inflight_gen_batches")  # as verl_api.FILTER_KWARGS (this module must not import the recipe's)
PATH = "pkg://recipe.heapa.tq_feedback"


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
        keys = [k for k in partition if k.split("_")[0] in uids and k.count("_") >= 2]
        if self.on_discarded is not None and keys:
            self.on_discarded(len(keys), sum(int(partition[k].get("response_len", 0)) for k in keys))
        if self.on_evicted is not None:
            finished = [k for k in keys if k.split("_")[0] in self.finished_keys[partition_id]]
            if finished:
                try:
                    outcomes = read_outcomes(finished, partition_id, self.acc_field, self.threshold,
                                             self.reward_infos)
                except KeyError:
                    # Failed or partial trajectories carry no reward: they teach the pool nothing.
                    logger.warning("evicted groups without %r; %d trajectories not fed back", self.acc_field,
                                   len(finished))
                    outcomes = {}
                if outcomes:
                    self.on_evicted(outcomes)
