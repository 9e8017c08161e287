"""One simulated training run: a scenario, a strategy name, a seed -> a ``RunResult``.

The loop is the recipe's step (DESIGN "The step, as data flows") with the GPU parts replaced by the
``SyntheticWorld``: select (the real strategy on the real ``QueryPool``) -> rollouts -> ``pool.feedback`` and
``strategy.observe`` -> policy update -> augmentation fire and integrate -> lineage ``step`` -> ``pool.reinsert``
-> test accuracy. Simulator strategy names map to registry strategies plus options (``SIM_STRATEGIES``):
``heapa`` is ``boundary`` with augmentation and lineage; ``oracle`` and ``hive`` get the world's callbacks; the
``*_ar3po*`` names draw each step's responses with AR3PO's staged allocation and reuse (``verl_ext.sim.rollout``).

Determinism: every random stream derives from ``numpy.random.SeedSequence(seed)``; the data (prompt
difficulties, topics, test set) depends on the seed only, so all strategies of one seed see the same prompts.
"""

from __future__ import annotations

import inspect
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from verl_ext.pool import QueryPool
from verl_ext.pool.lineage.refresh import LineageRefresher
from verl_ext.selection import Strategy, build_strategy, get_strategy_class
from verl_ext.selection.queue import SelectionQueue
from verl_ext.sim.augment import SimAugmenter
from verl_ext.sim.config import ScenarioConfig, TrainConfig
from verl_ext.allocation import AllocationConfig, RoundsConfig
from verl_ext.sim.rollout import (AllocatedRollout, RoundsRollout, StagedRollout, StepRollout, ar3po_config,
                                  dynamic_rollout, fixed_rollout)
from verl_ext.sim.world import SyntheticWorld


@dataclass(frozen=True)
class SimStrategy:
    """A simulator strategy: the registry strategy it runs and what the simulator wires around it."""

    registry_name: str
    augment: bool = False
    lineage: bool = False
    pool: dict[str, Any] = field(default_factory=dict)  # PoolConfig fields over the scenario's (ablations)
    options: dict[str, Any] = field(default_factory=dict)  # strategy options under the scenario's (ablations)
    ar3po: dict[str, Any] | None = None  # AR3POConfig fields: staged groups up to train.n, reuse; None = fixed n
    allocation: dict[str, Any] | None = None  # AllocationConfig fields: k * n responses spread; None = fixed n
    rounds: dict[str, Any] | None = None  # RoundsConfig fields: Reinforce-Ada's rounds; None = fixed n
    dynamic: bool = False  # DAPO's dynamic sampling: refill until k groups with signal (fixed n groups only)


# stages of 4 up to the scenario's train.n (the ceiling), reuse of a success banked within 64 steps
AR3PO_SIM: dict[str, Any] = {"k1": 4, "k_s": 4, "max_stages": 4, "extend": "unsolved",
                             "reuse": {"enabled": True, "mode": "replace", "max_age": 64}}

SIM_STRATEGIES: dict[str, SimStrategy] = {
    "uniform": SimStrategy("uniform"),
    "prioritized": SimStrategy("prioritized"),
    "boundary": SimStrategy("boundary"),
    "heapa": SimStrategy("boundary", augment=True, lineage=True),
    "heapa_nolineage": SimStrategy("boundary", augment=True),
    # the exploration rules of issue 23 side by side, whatever the default is (docs/pool.md)
    "heapa_fixed": SimStrategy("boundary", augment=True, lineage=True, pool={"exploration": "fixed"}),
    "heapa_adaptive": SimStrategy("boundary", augment=True, lineage=True, pool={"exploration": "adaptive"}),
    "heapa_greedy": SimStrategy("boundary", augment=True, lineage=True, pool={"exploration": "greedy"}),
    # a seed trained v times counts 0.05 v farther from the target, in the draw and in greedy's count (docs/pool.md)
    "heapa_revisit": SimStrategy("boundary", augment=True, lineage=True,
                                 pool={"exploration": "greedy", "revisit_penalty": 0.05}),
    # the frontier without a hard edge (heapa_grpo's boundary; docs/sim.md), all seats or half of them
    "heapa_signal": SimStrategy("boundary", augment=True, lineage=True, pool={"boundary": "signal"}),
    "heapa_signal_half": SimStrategy("boundary", augment=True, lineage=True,
                                     pool={"boundary": "signal", "signal_share": 0.5}),
    # the split between the two chosen from what each draw's records measured (docs/pool.md)
    "heapa_progress": SimStrategy("boundary", augment=True, lineage=True, pool={"boundary": "progress"}),
    "hive": SimStrategy("hive"),
    "hive_window": SimStrategy("hive", options={"prune_reference": "window"}),  # the rule before (docs/hive.md)
    "mopps": SimStrategy("mopps"),
    "greso": SimStrategy("greso"),
    "oracle": SimStrategy("oracle"),
    # AR3PO's allocation (docs/ar3po.md): the paper's rule (later stages to unsolved prompts) and `mixed`
    "uniform_ar3po": SimStrategy("uniform", ar3po=AR3PO_SIM),
    "uniform_ar3po_mixed": SimStrategy("uniform", ar3po={**AR3PO_SIM, "extend": "mixed"}),
    "heapa_ar3po": SimStrategy("boundary", augment=True, lineage=True, ar3po=AR3PO_SIM),
    "heapa_ar3po_mixed": SimStrategy("boundary", augment=True, lineage=True, ar3po={**AR3PO_SIM, "extend": "mixed"}),
    # the paper's rule for records the pool has measured, `mixed` for those drawn blind
    "uniform_ar3po_measured": SimStrategy("uniform", ar3po={**AR3PO_SIM, "extend": "measured"}),
    "heapa_ar3po_measured": SimStrategy("boundary", augment=True, lineage=True,
                                        ar3po={**AR3PO_SIM, "extend": "measured"}),
    # the paper's rule in stages of 2, as the CPU launcher runs heapa_ar3po (a prompt costs 2, 4, 6 or 8 at n = 8)
    "heapa_ar3po_stages2": SimStrategy("boundary", augment=True, lineage=True, ar3po={**AR3PO_SIM, "k1": 2, "k_s": 2}),
    # the step's k * n responses spread from the pool's estimates (verl_ext.allocation; docs/sim.md)
    "uniform_alloc": SimStrategy("uniform", allocation={}),
    "heapa_alloc": SimStrategy("boundary", augment=True, lineage=True, allocation={}),
    "heapa_signal_alloc": SimStrategy("boundary", augment=True, lineage=True, pool={"boundary": "signal"},
                                      allocation={}),
    # Reinforce-Ada (verl_ext.allocation.rounds): rounds of n until the exit rule holds, up to 4n; docs/sim.md
    "reinforce_ada": SimStrategy("uniform", rounds={}),
    "reinforce_ada_positive": SimStrategy("uniform", rounds={"exit": "positive"}),
    "heapa_reinforce_ada": SimStrategy("boundary", augment=True, lineage=True, rounds={}),
    # DAPO's dynamic sampling (verl's refill rule, verl_ext.sim.rollout.dynamic_rollout); heapa_dapo's frontier
    # is the split (`progress`), its two draws alone beside it (docs/sim.md)
    "dapo": SimStrategy("uniform", dynamic=True),
    "heapa_dapo": SimStrategy("boundary", augment=True, lineage=True, pool={"boundary": "progress"}, dynamic=True),
    "heapa_dapo_target": SimStrategy("boundary", augment=True, lineage=True, pool={"boundary": "target"},
                                     dynamic=True),
    "heapa_dapo_signal": SimStrategy("boundary", augment=True, lineage=True, pool={"boundary": "signal"},
                                     dynamic=True),
}

StrategyFactory = Callable[[SyntheticWorld, int], Strategy]


@dataclass
class RunResult:
    """What one run measured. ``rollouts[i]``/``accuracy[i]``: cumulative training responses and test accuracy
    after evaluation i (index 0 = before training). Augmentation generations, teacher calls and HIVE's
    verification forward passes are counted apart from training rollouts. ``responses``: training responses
    generated in all; ``reused``: groups that learned from a banked success (AR3PO reuse; never generated now)."""

    strategy: str
    seed: int
    rollouts: list[int]
    accuracy: list[float]
    target_accuracy: float
    budget_rollouts: int
    groups: int = 0
    zero_variance_groups: int = 0
    steps: int = 0
    augment: dict[str, int] = field(default_factory=dict)
    verify_forwards: int = 0
    pool_metrics: dict[str, float] = field(default_factory=dict)
    responses: int = 0
    reused: int = 0
    wall_s: float = 0.0

    @property
    def rollouts_to_target(self) -> int | None:
        """Training rollouts at the first evaluation at or above the target; None if never reached."""
        for r, acc in zip(self.rollouts, self.accuracy):
            if acc >= self.target_accuracy:
                return r
        return None

    @property
    def final_accuracy(self) -> float:
        """Accuracy when the rollout budget was spent (or the pool ran dry)."""
        return self.accuracy[-1]

    @property
    def responses_per_prompt(self) -> float:
        """Mean generated responses per group (``train.n`` for fixed groups)."""
        return self.responses / self.groups if self.groups else 0.0

    @property
    def zero_variance_share(self) -> float:
        return self.zero_variance_groups / self.groups if self.groups else 0.0

    def same_outcome(self, other: "RunResult") -> bool:
        """Equal in everything but wall-clock time (for determinism checks)."""
        mine, theirs = dict(vars(self)), dict(vars(other))
        mine.pop("wall_s")
        theirs.pop("wall_s")
        return mine == theirs


def _strategy_kwargs(cls: type, options: dict[str, Any], seed: int) -> dict[str, Any]:
    kwargs = dict(options)
    if "seed" in inspect.signature(cls).parameters and "seed" not in kwargs:
        kwargs["seed"] = seed
    return kwargs


def build_sim_strategy(name: str, config: ScenarioConfig, world: SyntheticWorld, seed: int,
                       probe: Callable[[list[int]], dict[int, float]] | None = None) -> Strategy:
    """The registry strategy behind simulator name ``name``, with the scenario's options and the world's
    callbacks (``oracle``: true pass rates; ``hive``: ``probe``, default the world's prompt-entropy probe)."""
    spec = SIM_STRATEGIES[name]
    cls = get_strategy_class(spec.registry_name)
    kwargs = _strategy_kwargs(cls, {**spec.options, **config.strategies.get(name, {})}, seed)
    if spec.registry_name == "oracle":
        kwargs["true_pass_rate"] = world.solve_prob
    if spec.registry_name == "hive":
        kwargs["prompt_entropy"] = probe if probe is not None else world.prompt_entropy
    return build_strategy(spec.registry_name, **kwargs)


class _CountingProbe:
    """Wraps HIVE's probe to count verification forward passes (a cost apart from rollouts)."""

    def __init__(self, probe: Callable[[list[int]], dict[int, float]]) -> None:
        self.probe, self.calls = probe, 0

    def __call__(self, ids: list[int]) -> dict[int, float]:
        self.calls += len(ids)
        return self.probe(ids)


def run_simulation(config: ScenarioConfig, strategy: str = "uniform", seed: int = 0,
                   strategy_factory: StrategyFactory | None = None) -> RunResult:
    """Run one strategy on one seed. ``strategy_factory(world, seed)`` overrides the built strategy (tests use it
    for strategies that are not registered); ``strategy`` then only names the result and the wiring to use."""
    if strategy not in SIM_STRATEGIES and strategy_factory is None:
        raise ValueError(f"unknown simulator strategy {strategy!r}; known: {', '.join(sorted(SIM_STRATEGIES))}")
    spec = SIM_STRATEGIES.get(strategy, SimStrategy(strategy))
    started = time.perf_counter()
    # the first six are spawn(6)'s, the seventh the drift's own, any later one a rollout realisation k > 0
    k = config.train.rollout_stream
    streams = np.random.SeedSequence(seed).spawn(7 + k)
    rng_init, rng_aug, rng_verify = (np.random.default_rng(streams[i]) for i in (0, 2, 3))
    rng_roll = np.random.default_rng(streams[1] if k == 0 else streams[6 + k])
    pool_seed, strategy_seed = (int(s.generate_state(1)[0]) for s in streams[4:6])
    world = SyntheticWorld(config.prompts, config.learner, rng_init, rng_roll, rng_verify,
                           rng_drift=np.random.default_rng(streams[6]))
    pool = QueryPool(config.pool_config(track_changes=spec.lineage, **spec.pool), seed=pool_seed)
    n_train = config.prompts.n_train
    topics = [{"topic": int(t)} for t in world.seed_topic]  # what ``cold_group_key: topic`` groups by
    ids = pool.add_seeds_bulk([f"prompt {i}" for i in range(n_train)], ["0"] * n_train, "sim", extras=topics)
    world.register(np.asarray(ids), world.seed_difficulty, world.seed_topic, np.ones(n_train, dtype=bool))

    probe = _CountingProbe(world.prompt_entropy)
    if strategy_factory is not None:
        strat = strategy_factory(world, strategy_seed)
    else:
        strat = build_sim_strategy(strategy, config, world, strategy_seed, probe)
    refresher = LineageRefresher(pool, config.lineage_config()) if spec.lineage else None
    augmenter = SimAugmenter(config.augment, world, pool, refresher, rng_aug) if spec.augment else None
    if sum(x is not None for x in (spec.ar3po, spec.allocation, spec.rounds)) + spec.dynamic > 1:
        raise ValueError(f"simulator strategy {strategy!r}: AR3PO's stages, the allocator, Reinforce-Ada's rounds "
                         "and DAPO's dynamic sampling each size the groups; pick one")
    staged: StagedRollout | AllocatedRollout | RoundsRollout | None = None
    if spec.ar3po is not None:
        staged = StagedRollout(ar3po_config(spec.ar3po, config.train), world, n_train,
                               lambda rid: pool.measured_value(rid) is not None)
    elif spec.allocation is not None:
        staged = AllocatedRollout(AllocationConfig(**spec.allocation), world, pool, config.train.n)
    elif spec.rounds is not None:
        staged = RoundsRollout(RoundsConfig(**spec.rounds), world, config.train.n)

    result = _train(config, world, pool, strat, augmenter, refresher, staged, spec.dynamic)
    result.strategy, result.seed = strategy, seed
    result.augment = dict(augmenter.counts) if augmenter else {}
    result.verify_forwards = probe.calls
    result.pool_metrics = pool.metrics()
    result.wall_s = time.perf_counter() - started
    return result


def _train(config: ScenarioConfig, world: SyntheticWorld, pool: QueryPool, strat: Strategy,
           augmenter: SimAugmenter | None, refresher: LineageRefresher | None,
           staged: StagedRollout | AllocatedRollout | RoundsRollout | None = None,
           dynamic: bool = False) -> RunResult:
    """The step loop, until the rollout budget is spent or the pool has nothing left to hand out. Feedback,
    observe, augmentation and the cost hear the generated groups (size m each); the update also the reused success,
    and under ``dynamic`` only the groups DAPO keeps."""
    train = config.train
    k = train.batch_size
    out = RunResult("", 0, [0], [world.test_accuracy()], train.target_accuracy, train.budget_rollouts)
    spent, step = 0, 0
    queue = SelectionQueue(k) if dynamic else None  # DAPO's refills: the recipe's sampler's queue
    in_flight: deque[tuple[int, int, np.ndarray, StepRollout]] = deque()  # (trains at, selected at, ids, rollout)
    while spent < train.budget_rollouts:
        drawn = _select_and_roll(world, pool, strat, staged, queue, train, step, train.budget_rollouts - spent)
        if drawn is None and not in_flight:
            break
        if drawn is not None:
            ids, draw = drawn
            spent += int(draw.sizes.sum())
            in_flight.append((step + train.feedback_delay, step, ids, draw))
        # Due batches train; so does everything in flight once the budget is spent (the run's last step) or when
        # the pool had nothing to hand out (its records are all in flight: waiting would stall the loop).
        while in_flight and (in_flight[0][0] <= step or spent >= train.budget_rollouts or drawn is None):
            _, selected, ids, draw = in_flight.popleft()
            _train_on(world, pool, strat, augmenter, out, ids, draw, step, k, selected)
        if refresher is not None:
            refresher.step(step)
        pool.reinsert(step, k)
        step += 1
        if step % train.eval_every == 0 or spent >= train.budget_rollouts:
            out.rollouts.append(spent)
            out.accuracy.append(world.test_accuracy())
    out.steps, out.responses = step, spent
    return out


def _select_and_roll(world: SyntheticWorld, pool: QueryPool, strat: Strategy,
                     staged: StagedRollout | AllocatedRollout | RoundsRollout | None,
                     queue: SelectionQueue | None, train: TrainConfig, step: int,
                     budget_left: int) -> tuple[np.ndarray, StepRollout] | None:
    """The step's records and their rollout; ``None`` when the pool hands out nothing. With a ``queue`` (DAPO's
    dynamic sampling) the step and its refills take records from it as dropped groups come back."""
    if queue is not None:
        def hear(ids: np.ndarray, passes: np.ndarray) -> None:  # verl's evictions, reported to the pool at once
            _feed_back(pool, strat, ids, passes, np.full(len(ids), train.n), step, step)

        ids, draw = dynamic_rollout(world, lambda m: queue.take(pool, strat, m, step), train.batch_size, train.n,
                                    budget_left, hear)
        return (ids, draw) if len(ids) else None
    ids = np.asarray(strat.select(pool, train.batch_size, step), dtype=np.int64)
    if not len(ids):
        return None
    return ids, fixed_rollout(world, ids, train.n) if staged is None else staged(ids, step)


def _feed_back(pool: QueryPool, strat: Strategy, ids: np.ndarray, passes: np.ndarray, sizes: np.ndarray,
               step: int, selected: int) -> None:
    """Groups rolled out at step ``selected`` reach the pool and the strategy at ``step``."""
    results = {int(i): (int(p), int(m)) for i, p, m in zip(ids, passes, sizes)}
    pool.feedback(results, step, dict.fromkeys(results, selected) if selected < step else None)
    strat.observe(results, step)


def _train_on(world: SyntheticWorld, pool: QueryPool, strat: Strategy, augmenter: SimAugmenter | None,
              out: RunResult, ids: np.ndarray, draw: StepRollout, step: int, k: int, selected: int) -> None:
    """One batch's outcomes, rolled out at step ``selected``, reach the pool and the strategy, and the policy
    trains on it, at ``step``."""
    passes, sizes = draw.passes, draw.sizes
    unheard = slice(None) if draw.heard is None else ~draw.heard
    _feed_back(pool, strat, ids[unheard], passes[unheard], sizes[unheard], step, selected)
    learn_sizes = sizes if draw.learn_sizes is None else draw.learn_sizes
    kept = slice(None) if draw.trained is None else draw.trained
    world.learn(ids[kept], draw.learn_passes[kept], learn_sizes[kept], batch_size=k)
    out.groups += len(ids)
    out.reused += draw.reused
    out.zero_variance_groups += int(np.count_nonzero((passes == 0) | (passes == sizes)))
    if augmenter is not None:
        augmenter.fire(ids, passes, sizes, step)
        augmenter.integrate(step)
