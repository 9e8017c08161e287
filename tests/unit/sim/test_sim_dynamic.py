"""DAPO's dynamic sampling in the simulator: verl 0.9.1's refill rule (two prompts per dropped group, at most k
dispatched at once, until k groups with signal), the first k such groups train, every generated group is paid for
and heard by the pool."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from verl_ext.sim import SIM_STRATEGIES, run_simulation
from verl_ext.sim.rollout import dynamic_rollout
from verl_ext.sim.runner import SimStrategy
from verl_ext.selection import build_strategy
from verl_ext.selection.queue import SelectionQueue

class ScriptedWorld:
    """Passes per record id, fixed in advance."""

    def __init__(self, passes: dict[int, int]) -> None:
        self.passes = passes

    def rollout(self, ids, n):
        return np.asarray([self.passes[int(i)] for i in ids], dtype=np.int64)


class Handout:
    """Hands out ids 0, 1, 2, ... in order, and records how many each call asked for."""

    def __init__(self, records: int) -> None:
        self.next, self.records, self.asked = 0, records, []

    def __call__(self, m: int) -> list[int]:
        self.asked.append(m)
        out = list(range(self.next, min(self.next + m, self.records)))
        self.next += len(out)
        return out


def test_each_dropped_group_earns_two_refills_and_the_first_k_with_signal_train():
    # k = 4, n = 4: [0, 2, 4, 1] has 2 groups with signal and earns 4 refills; [0, 0, 3, 4] one more with signal
    # and 6 refills, at most 4 at once; [2, 2, 2, 2] completes the batch and its surplus is dropped.
    world = ScriptedWorld(dict(enumerate([0, 2, 4, 1, 0, 0, 3, 4, 2, 2, 2, 2, 1, 1])))
    handout = Handout(14)
    ids, draw = dynamic_rollout(world, handout, k=4, n=4, budget_left=10_000)
    assert handout.asked == [4, 4, 4]
    assert ids.tolist() == list(range(12))
    assert draw.sizes.tolist() == [4] * 12
    assert np.flatnonzero(draw.trained).tolist() == [1, 3, 6, 8]


def test_refills_stop_when_the_pool_has_nothing_or_the_budget_is_spent():
    all_wrong = ScriptedWorld(dict.fromkeys(range(100), 0))
    ids, draw = dynamic_rollout(all_wrong, Handout(10), k=4, n=4, budget_left=10_000)
    assert len(ids) == 10 and not draw.trained.any()
    handout = Handout(100)
    ids, draw = dynamic_rollout(all_wrong, handout, k=4, n=4, budget_left=40)  # 10 groups of 4 responses
    assert handout.asked == [4, 4, 4] and len(ids) == 12 and not draw.trained.any()


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 4), min_size=1, max_size=60), st.integers(1, 8))
def test_the_update_sees_min_k_groups_with_signal_and_every_generated_group_is_paid(passes, k):
    world = ScriptedWorld(dict(enumerate(passes)))
    handout = Handout(len(passes))
    ids, draw = dynamic_rollout(world, handout, k=k, n=4, budget_left=10_000)
    signal = (draw.passes > 0) & (draw.passes < 4)
    assert draw.trained.sum() == min(k, signal.sum())
    assert not (draw.trained & ~signal).any()
    assert len(set(ids.tolist())) == len(ids) == handout.next
    assert max(handout.asked) <= k
    assert signal.sum() >= k or handout.next == len(passes)  # it stops short only when the pool ran out


@pytest.mark.parametrize("name", ["dapo", "heapa_dapo", "heapa_dapo_target", "heapa_dapo_signal"])
def test_dynamic_runs_pay_for_dropped_groups_and_repeat(name, small_scenario):
    res = run_simulation(small_scenario(), name, seed=5)
    plain = run_simulation(small_scenario(), "uniform", seed=5)
    assert res.responses >= plain.responses and res.responses_per_prompt == 8.0
    assert res.groups > 8 * res.steps  # refills: more groups generated than a step trains
    assert res.steps <= plain.steps
    assert res.same_outcome(run_simulation(small_scenario(), name, seed=5))


def test_dynamic_sampling_and_staged_groups_do_not_combine(monkeypatch, small_scenario):
    monkeypatch.setitem(SIM_STRATEGIES, "both", SimStrategy("uniform", ar3po={}, dynamic=True))
    with pytest.raises(ValueError, match="dynamic sampling each size the groups"):
        run_simulation(small_scenario(), "both", seed=0)


class CountingStrategy:
    """A ``Handout`` as a strategy: records each selection's size and step."""

    def __init__(self, records: int) -> None:
        self.handout, self.calls = Handout(records), []

    def select(self, pool, k, step):
        self.calls.append((k, step))
        return self.handout(k)


def test_dynamic_refills_draw_from_full_k_selections():
    # the runner's refills never select fewer than k: the strategy sees only selections of k
    world = ScriptedWorld(dict.fromkeys(range(40), 0) | dict.fromkeys(range(40, 80), 2))
    strat = CountingStrategy(80)
    queue = SelectionQueue(8, reinsert=False)  # no pool to reinsert into: the strategy hands out by itself
    ids, draw = dynamic_rollout(world, lambda m: queue.take(None, strat, m, 0), k=8, n=4, budget_left=10_000)
    assert {k for k, _ in strat.calls} == {8} and draw.trained.sum() == 8
    assert len(ids) + len(queue) == 8 * len(strat.calls)


def test_dropped_groups_are_heard_before_the_refills_they_earn_are_selected():
    # the trace of the first test: rounds [0, 2, 4, 1], [0, 0, 3, 4], [2, 2, 2, 2]
    world = ScriptedWorld(dict(enumerate([0, 2, 4, 1, 0, 0, 3, 4, 2, 2, 2, 2])))
    events: list = []
    handout = Handout(12)

    def select(m):
        events.append(("select", m))
        return handout(m)

    ids, draw = dynamic_rollout(world, select, k=4, n=4, budget_left=10_000,
                                hear=lambda i, p: events.append(("hear", i.tolist(), p.tolist())))
    assert events == [("select", 4), ("hear", [0, 2], [0, 4]), ("select", 4), ("hear", [4, 5, 7], [0, 0, 4]),
                      ("select", 4)]
    assert np.flatnonzero(draw.heard).tolist() == [0, 2, 4, 5, 7]
    assert not (draw.heard & draw.trained).any()


def test_a_dynamic_run_hears_every_generated_group_once_dropped_ones_within_the_step(small_scenario):
    heard: list[tuple[int, int]] = []  # (step, groups) per observe call

    def counting(world, seed):
        strat = build_strategy("uniform", seed=seed)
        observe = strat.observe
        strat.observe = lambda results, step: (heard.append((step, len(results))), observe(results, step))[-1]
        return strat

    res = run_simulation(small_scenario(), "dapo", seed=3, strategy_factory=counting)
    assert sum(groups for _, groups in heard) == res.groups
    assert len(heard) > res.steps  # evicted groups are heard before their step's end
