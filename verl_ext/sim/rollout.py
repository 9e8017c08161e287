"""A step's rollouts in the simulator: GRPO's fixed groups, AR3PO's staged groups with response reuse, the
step's ``k * n`` responses spread by the budget allocator, Reinforce-Ada's rounds (``verl_ext.allocation``), or
DAPO's dynamic sampling (fixed groups, refilled until the batch holds ``k`` groups with signal).

Why the real AR3PO core: the allocation rule under test is ``verl_ext.ar3po``'s ``StagePlanner`` and the reuse is
its ``ResponseBank``, so the simulator measures the code the recipe runs; only generation is replaced by the
world's Bernoulli draws (one ``binomial`` per stage; responses within a stage are exchangeable, so the order of
successes inside a stage cannot change the planner's decisions). The planner keys groups by batch position, so a
record that appears twice in one batch gets two groups, as in the recipe; the bank keys by record id and reuses
a stored success for the first of them only.

What each consumer hears (as in the recipe): ``passes``/``sizes`` are the generated outcomes (pool feedback,
``strategy.observe``, augmentation, rollout cost); ``learn_passes`` adds the reused success, for the update only.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from verl_ext.allocation import AllocationConfig, Allocator, RoundsConfig, has_exited, kept_passes
from verl_ext.ar3po import AR3POConfig, ResponseBank, StagePlanner
from verl_ext.pool import QueryPool
from verl_ext.sim.config import TrainConfig
from verl_ext.sim.world import SyntheticWorld


@dataclass
class StepRollout:
    """One step's groups: generated ``passes`` out of ``sizes``; ``learn_passes`` = ``passes`` plus reused
    successes (what the update sees, out of ``learn_sizes`` when set); ``reused`` groups that got a banked
    success."""

    passes: np.ndarray
    sizes: np.ndarray
    learn_passes: np.ndarray
    reused: int = 0
    learn_sizes: np.ndarray | None = None  # the groups the update sees, when not the generated ones (Reinforce-Ada)
    trained: np.ndarray | None = None  # which groups the update sees (DAPO drops the rest); None = all
    heard: np.ndarray | None = None  # groups the pool already heard within the step (DAPO's evicted ones)


def fixed_rollout(world: SyntheticWorld, ids: np.ndarray, n: int) -> StepRollout:
    """GRPO: ``n`` responses for every prompt, one draw for the batch (the stream every fixed-n run has used)."""
    passes = world.rollout(ids, n)
    return StepRollout(passes, np.full(len(ids), n, dtype=np.int64), passes)


def ar3po_config(options: dict[str, Any], train: TrainConfig) -> AR3POConfig:
    """``AR3POConfig`` from a simulator strategy's ``ar3po`` fields; the ceiling defaults to the scenario's
    ``train.n``, so the staged group never exceeds the fixed-n group it is compared with."""
    return AR3POConfig.from_dict({"max_per_prompt": train.n, **options, "enabled": True})


class StagedRollout:
    """AR3PO's rollout for one run: a planner per step, a bank across steps. ``reuse.mode`` must be ``replace``
    (group sizes stay what was generated; ``append`` would change the rollout cost the simulator compares).
    ``measured``: whether the pool has measured a record, read when the step starts, as the trainer reads it when
    it fetches the batch (``extend: measured``)."""

    def __init__(self, config: AR3POConfig, world: SyntheticWorld, records: int,
                 measured: Callable[[int], bool] | None = None) -> None:
        if config.reuse.enabled and config.reuse.mode != "replace":
            raise ValueError(f"simulator AR3PO supports reuse.mode 'replace' only, got {config.reuse.mode!r}")
        self.config, self.world, self.measured = config, world, measured
        self.planner = StagePlanner(config)
        self.bank = ResponseBank(config)
        if self.bank.capacity is None:  # capacity 0: one prompt's entries for every seed record, as the recipe
            self.bank.set_capacity(config.reuse.per_prompt * max(records, 1))

    def __call__(self, ids: np.ndarray, step: int) -> StepRollout:
        cfg = self.config
        known = ([j for j, i in enumerate(ids) if self.measured(int(i))]
                 if self.measured is not None and cfg.extend == "measured" else [])
        plan = self.planner.begin(range(len(ids)), measured=known)
        while plan:
            pos = np.fromiter(plan.keys(), dtype=np.int64, count=len(plan))
            counts = np.fromiter(plan.values(), dtype=np.int64, count=len(plan))
            drawn = self.world.rollout(ids[pos], counts)
            self.planner.record({int(j): [1.0] * int(p) + [0.0] * int(c - p)
                                 for j, p, c in zip(pos, drawn, counts)})
            plan = self.planner.next_stage()
        groups = self.planner.groups()
        sizes = np.array([len(groups[j]) for j in range(len(ids))], dtype=np.int64)
        passes = np.array([sum(cfg.is_correct(a) for a in groups[j]) for j in range(len(ids))], dtype=np.int64)
        learn_passes = passes.copy()
        reused = 0
        if cfg.reuse.enabled:
            record_of = {j: int(i) for j, i in enumerate(ids)}
            plans = self.bank.plan_reuse(groups, step, record_of=record_of)
            for j in plans:  # replace: one wrong response becomes the banked success
                learn_passes[j] += 1
            reused = len(plans)
            for j in np.flatnonzero(passes > 0):  # bank the fresh successes after planning, as the recipe does
                self.bank.put(int(ids[j]), {"token_ids": [step], "acc": 1.0}, step)
        return StepRollout(passes, sizes, learn_passes, reused)


class AllocatedRollout:
    """The allocator's rollout: the step's ``k * n`` responses spread over its prompts from the pool's estimates
    (``ranking_value``: lineage-aware, a child's prior before its first measurement); a prompt never measured
    takes the pass rates of the last ``history`` groups as its belief. The update hears the groups as generated."""

    def __init__(self, config: AllocationConfig, world: SyntheticWorld, pool: QueryPool, n: int) -> None:
        self.allocator = Allocator(config, n)
        self.world, self.pool = world, pool

    def __call__(self, ids: np.ndarray, step: int) -> StepRollout:
        plan = self.allocator.plan([int(i) for i in ids], self.pool.ranking_value)
        sizes = np.asarray([plan[int(i)] for i in ids], dtype=np.int64)
        passes = self.world.rollout(ids, sizes)
        self.allocator.observe({int(i): (int(p), int(m)) for i, p, m in zip(ids, passes, sizes)})
        return StepRollout(passes, sizes, passes)


class RoundsRollout:
    """Reinforce-Ada's rollout: rounds until each prompt's exit rule holds or it reaches the cap. The pool hears
    every generated response; the update hears the ``n`` kept (``kept_passes``), so its groups are GRPO's size.
    The paper's baseline from every generated response is not modelled: the learner's spread is the kept group's."""

    def __init__(self, config: RoundsConfig, world: SyntheticWorld, n: int) -> None:
        self.round_size, self.cap = config.sizes(n)
        self.rule, self.world, self.n = config.exit, world, n

    def __call__(self, ids: np.ndarray, step: int) -> StepRollout:
        passes = np.zeros(len(ids), dtype=np.int64)
        sizes = np.zeros(len(ids), dtype=np.int64)
        active = np.arange(len(ids))
        while active.size:
            draw = np.minimum(self.round_size, self.cap - sizes[active])
            passes[active] += self.world.rollout(ids[active], draw)
            sizes[active] += draw
            done = [sizes[j] >= self.cap or (sizes[j] >= self.n and has_exited(int(passes[j]), int(sizes[j]),
                                                                                 self.n, self.rule))
                    for j in active]
            active = active[~np.asarray(done, dtype=bool)]
        kept = np.array([kept_passes(int(p), int(m), self.n) for p, m in zip(passes, sizes)], dtype=np.int64)
        return StepRollout(passes, sizes, kept, learn_sizes=np.full(len(ids), self.n, dtype=np.int64))


def dynamic_rollout(world: SyntheticWorld, select: Callable[[int], list[int]], k: int, n: int,
                    budget_left: int, hear: Callable[[np.ndarray, np.ndarray], None] | None = None
                    ) -> tuple[np.ndarray, StepRollout]:
    """DAPO's dynamic sampling as verl 0.9.1's replay buffer runs it (``ReplayBuffer.sample`` with
    ``filter_groups``): ``k`` prompts, then every all-right or all-wrong group earns two refill prompts, at most
    ``k`` dispatched at once, until ``k`` groups with signal are in; the first ``k`` of them train, the others
    (dropped and surplus) are generated and heard by the pool but not trained. ``select(m)`` hands out up to ``m``
    records; refills stop early when it has none or the run's budget (``budget_left`` responses) is spent.
    ``hear(ids, passes)`` gets each round's groups without signal as they come back, before the refills they earn
    are selected (the recipe's replay buffer reports verl's evictions to the pool at once); they are marked
    ``heard``. Returns the generated records and their rollout (``trained`` marks the groups the update sees)."""
    parts_ids, parts_passes = [np.empty(0, dtype=np.int64)], [np.empty(0, dtype=np.int64)]
    mixed, generated, credit = 0, 0, k  # the first k prompts are the step's own dispatch
    while mixed < k and credit > 0 and generated < budget_left:
        more = np.asarray(select(min(credit, k)), dtype=np.int64)
        if not len(more):
            break
        drawn = world.rollout(more, n)
        signal = _signal(drawn, n)
        if hear is not None and not signal.all():
            hear(more[~signal], drawn[~signal])
        mixed += int(signal.sum())
        credit += 2 * int((~signal).sum()) - len(more)
        generated += len(more) * n
        parts_ids.append(more)
        parts_passes.append(drawn)
    ids, passes = np.concatenate(parts_ids), np.concatenate(parts_passes)
    trained = _signal(passes, n)
    heard = ~trained if hear is not None else None
    trained[np.flatnonzero(trained)[k:]] = False  # the surplus beyond k groups with signal
    return ids, StepRollout(passes, np.full(len(ids), n, dtype=np.int64), passes, trained=trained, heard=heard)


def _signal(passes: np.ndarray, n: int) -> np.ndarray:
    """Groups with both a right and a wrong response (DAPO keeps these)."""
    return (passes > 0) & (passes < n)
