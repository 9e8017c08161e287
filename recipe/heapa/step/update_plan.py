"""The PPO update for uneven groups: GRPO's number of optimizer updates and GRPO's per-row loss scale.

verl 0.9.1 sizes an actor mini-batch in rows (``ppo_mini_batch_size x rollout.n``), pads the step's rows to a
multiple of that (``_get_required_batch_multiple``, ``upsample_batch_to_divisible_size``) and, under the sequence
mean loss modes, divides every mini-batch's summed row losses by that fixed row count (``global_batch_size``).
With even groups nothing is padded: ``train_batch_size / ppo_mini_batch_size`` optimizer updates, each row
weighing ``1 / rows per update``. With AR3PO's uneven groups (~5 of 16 responses per prompt) the same arithmetic
gives a third of the updates, each over three times the prompts, and padding rows that count in the divisor
(the CPU default: ~48 real rows of 128, every row's gradient x0.375).

``plan_update`` restores GRPO's optimisation for the rows actually generated:

- **updates**: ``k = ceil(groups / ppo_mini_batch_size)`` per epoch, as GRPO's ``train_batch_size /
  ppo_mini_batch_size``;
- **padding**: only to what verl's batching needs, ``dp x lcm(k x actor micro-batch, log-prob micro-batches)``
  rows (``dp x k`` with dynamic batch sizes), and spread evenly over the ``k`` updates (``spread_padding``);
- **loss scale**: ``global_batch_size = real rows / k``, so each real row weighs ``1 / real rows per update``
  exactly as in GRPO; padding rows (zero loss mask) never dilute it. ``token-mean`` (the DAPO presets) divides
  by the update's real tokens already; there only the update count changes.

``actor_overrides`` turns the plan (and ``heapa.update.sequence_mean_over``) into what replaces
``mini_batch_size`` and ``global_batch_size`` in the batch's ``extra_info``, which verl's worker reads;
``actor_updates.py`` applies it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class UpdatePlan:
    """One step's actor update: ``updates`` mini-batches per epoch of ``mini_batch_rows`` rows (padding included)."""

    real_rows: int
    groups: int
    updates: int
    multiple: int  # the padded row count is a multiple of this
    padded_rows: int

    @property
    def mini_batch_rows(self) -> int:
        return self.padded_rows // self.updates

    @property
    def global_batch_size(self) -> float:
        """The sequence-mean loss divisor: the real rows per update (a float when they do not divide evenly)."""
        rows = self.real_rows / self.updates
        return int(rows) if rows == int(rows) else rows

    def extra_info(self) -> dict[str, Any]:
        """What ``_update_actor`` passes to verl's worker instead of ``ppo_mini_batch_size x rollout.n``."""
        return {"mini_batch_size": self.mini_batch_rows, "global_batch_size": self.global_batch_size}

    def metrics(self) -> dict[str, float]:
        return {"update/planned": float(self.updates), "update/rows": float(self.mini_batch_rows),
                "update/real_rows": float(self.real_rows / self.updates),
                "update/padding_rows": float(self.padded_rows - self.real_rows)}


@dataclass(frozen=True)
class Batching:
    """verl's batching settings that constrain the row count (``None`` micro-batch: dynamic batch sizes)."""

    dp: int
    mini_batch_prompts: int
    actor_micro: int | None
    log_prob_micros: tuple[int, ...] = ()

    @classmethod
    def from_config(cls, config, dp: int) -> "Batching":
        arr = config.actor_rollout_ref
        actor = None if arr.actor.get("use_dynamic_bsz", False) else arr.actor.get("ppo_micro_batch_size_per_gpu")
        micros = []
        if not arr.rollout.get("log_prob_use_dynamic_bsz", False):
            micros.append(arr.rollout.get("log_prob_micro_batch_size_per_gpu"))
        if not arr.ref.get("log_prob_use_dynamic_bsz", False):
            micros.append(arr.ref.get("log_prob_micro_batch_size_per_gpu"))
        return cls(dp=dp, mini_batch_prompts=int(arr.actor.ppo_mini_batch_size),
                   actor_micro=int(actor) if actor else None, log_prob_micros=tuple(int(m) for m in micros if m))


def plan_update(real_rows: int, groups: int, batching: Batching) -> UpdatePlan:
    """GRPO's update count and loss scale for ``real_rows`` rows in ``groups`` groups (see the module docstring)."""
    if real_rows < 1 or groups < 1:
        raise ValueError(f"an actor update needs rows and groups, got {real_rows} rows in {groups} groups")
    updates = max(1, math.ceil(groups / batching.mini_batch_prompts))
    per_rank = math.lcm(updates * (batching.actor_micro or 1), *batching.log_prob_micros)
    multiple = batching.dp * per_rank
    padded = math.ceil(real_rows / multiple) * multiple
    return UpdatePlan(real_rows=real_rows, groups=groups, updates=updates, multiple=multiple, padded_rows=padded)


def spread_padding(is_padding: Sequence[bool], dp: int, updates: int) -> list[int]:
    """A row order (indices) that keeps each data-parallel rank's rows (verl dispatches contiguous equal chunks)
    and spreads each rank's padding rows evenly over its ``updates`` consecutive mini-batches."""
    n = len(is_padding)
    if n % (dp * updates):
        raise ValueError(f"{n} rows do not split into {dp} ranks x {updates} updates")
    chunk, per_update = n // dp, n // (dp * updates)
    order: list[int] = []
    for rank in range(dp):
        rows = range(rank * chunk, (rank + 1) * chunk)
        pads = [i for i in rows if is_padding[i]]
        real = [i for i in rows if not is_padding[i]]
        total = len(pads)
        for u in range(updates):
            take = total // updates + (u < total % updates)
            slot, pads = pads[:take], pads[take:]
            fill = per_update - len(slot)
            order.extend(real[:fill] + slot)
            real = real[fill:]
    return order


def actor_overrides(plan: UpdatePlan | None, rows: int, signal_rows: int, sequence_mean_over: str,
                    mini_batch_rows: int) -> dict[str, Any]:
    """The ``extra_info`` the step's actor update gets instead of verl's: the plan's (AR3PO), and with
    ``sequence_mean_over: signal_rows`` a loss divisor of the rows with signal per update. ``rows``: the batch's
    rows; ``mini_batch_rows``: verl's ``ppo_mini_batch_size x rollout.n``."""
    overrides = plan.extra_info() if plan is not None else {}
    if sequence_mean_over == "signal_rows":
        updates = plan.updates if plan is not None else max(1, rows // mini_batch_rows)
        overrides["global_batch_size"] = max(1, signal_rows) / updates
    return overrides
