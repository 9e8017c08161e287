"""``train.feedback_delay``: the simulator's model of an asynchronous trainer. A batch rolled out at step s trains,
and reaches the pool and the strategy, at s + d; its records stay in flight meanwhile; the last batches are trained
when the budget runs out; d = 0 is the synchronous loop, draw for draw."""

import pytest

from verl_ext.sim import ScenarioConfig, run_simulation
from verl_ext.sim.runner import build_sim_strategy


def tiny(delay: int) -> ScenarioConfig:
    """A small pool and 40 steps: enough batches in flight to check the bookkeeping."""
    return ScenarioConfig.from_dict({
        "name": "delay", "prompts": {"n_train": 300, "n_test": 200, "n_topics": 2},
        "train": {"batch_size": 16, "n": 8, "budget_rollouts": 16 * 8 * 40, "feedback_delay": delay},
        "pool": {"max_pool_size": 450, "reinsertion": {"trigger": "always"}},
    })


class Recording:
    """Wraps a registry strategy and records what it selected and what it heard, per step."""

    def __init__(self, name, cfg, world, seed):
        self.inner = build_sim_strategy(name, cfg, world, seed)
        self.name = name
        self.selected, self.observed = {}, {}

    def select(self, pool, k, step):
        batch = self.inner.select(pool, k, step)
        self.selected[step] = list(batch)
        return batch

    def observe(self, results, step):
        self.observed.setdefault(step, []).extend(results)
        self.inner.observe(results, step)

    def __getattr__(self, attr):
        return getattr(self.inner, attr)


@pytest.mark.parametrize("name", ["uniform", "heapa"])
@pytest.mark.parametrize("delay", [1, 3])
def test_each_batch_is_heard_once_delay_steps_later_and_never_drawn_while_in_flight(name, delay):
    cfg = tiny(delay)
    made = {}

    def factory(world, seed):
        made["s"] = Recording(name, cfg, world, seed)
        return made["s"]

    res = run_simulation(cfg, name, seed=2, strategy_factory=factory)
    rec = made["s"]
    last = max(rec.selected)
    due = {s: min(s + delay, last) for s in rec.selected}  # the budget's end trains what is still in flight
    for step, batch in rec.selected.items():
        assert set(batch) <= set(rec.observed[due[step]]), f"step {step}'s batch not heard at step {due[step]}"
        in_flight = {rid for s, b in rec.selected.items() if s < step <= due[s] for rid in b}
        assert not in_flight & set(batch), f"step {step} drew a record still in flight"
    assert min(rec.observed) == min(delay, last)
    heard = [rid for ids in rec.observed.values() for rid in ids]
    assert sorted(heard) == sorted(rid for b in rec.selected.values() for rid in b)
    assert res.groups == len(heard) and res.responses == res.groups * cfg.train.n


def test_no_delay_is_the_synchronous_loop_and_a_delay_changes_the_run():
    base = run_simulation(tiny(0), "heapa", seed=1)
    assert run_simulation(tiny(0), "heapa", seed=1).same_outcome(base)
    assert not run_simulation(tiny(2), "heapa", seed=1).same_outcome(base)


def test_a_child_that_evicts_its_own_parent_enters_unlinked():
    """A full pool makes room for a child by evicting the farthest child, which can be the new child's parent (a
    child of a child): the new one stays, without a lineage edge, instead of ending the run with a dangling-parent
    LineageError (seed 2 did: 5 such children, all evictions of children)."""
    res = run_simulation(tiny(0), "heapa", seed=2)
    assert res.augment["unlinked"] > 0 and res.augment["linked"] > 0
