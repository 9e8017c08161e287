"""Reinforce-Ada's exit rules, down-sampling, baseline and round planner."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from verl_ext.allocation import RoundsConfig, RoundsPlanner, baseline, has_exited, keep_indices, kept_passes, \
    planned_total
from verl_ext.allocation.rounds import EXITS


def test_exit_rules():
    assert has_exited(1, 8, 8, "positive") and not has_exited(0, 32, 8, "positive")
    assert has_exited(4, 8, 8, "balanced") and not has_exited(5, 8, 8, "balanced")
    assert has_exited(5, 9, 8, "balanced") and has_exited(4, 7, 7, "balanced")  # odd n: 3 of one, 4 of the other
    assert not has_exited(3, 5, 7, "balanced") and kept_passes(4, 7, 7) == 4


@given(st.integers(1, 16), st.integers(0, 64), st.integers(0, 64))
def test_the_kept_group_is_n_balanced_where_it_can_be(n, passes, fails):
    total = passes + fails
    if total < n:
        with pytest.raises(ValueError, match="cannot keep"):
            kept_passes(passes, total, n)
        return
    c = kept_passes(passes, total, n)
    assert 0 <= c <= passes and 0 <= n - c <= fails
    if passes >= n // 2 and fails >= n - n // 2:
        assert c == n // 2
    else:  # the scarcer kind is kept whole
        assert c == passes or n - c == fails


def test_round_sizes_and_bad_settings():
    assert RoundsConfig().sizes(8) == (8, 32) and RoundsConfig(round_size=4, max_per_prompt=16).sizes(8) == (4, 16)
    with pytest.raises(ValueError, match="exit must be one of"):
        RoundsConfig(exit="any").sizes(8)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="n \\(8\\) <= it"):
        RoundsConfig(max_per_prompt=4, round_size=2).sizes(8)


def test_no_prompt_exits_below_n():
    assert not has_exited(1, 4, 8, "positive") and not has_exited(2, 3, 4, "balanced")


@given(st.lists(st.booleans(), min_size=0, max_size=40), st.integers(1, 12))
def test_kept_rows_are_n_balanced_and_earliest(correct, n):
    kept = keep_indices(correct, n)
    assert kept == sorted(set(kept)) and all(0 <= i < len(correct) for i in kept)
    if len(correct) <= n:
        assert kept == list(range(len(correct)))
        return
    assert len(kept) == n
    right = [i for i in kept if correct[i]]
    assert len(right) == kept_passes(sum(correct), len(correct), n)
    for kind in (True, False):  # the earliest of each kind
        mine = [i for i in kept if correct[i] is kind]
        assert mine == [i for i, c in enumerate(correct) if c is kind][:len(mine)]


def test_baseline_is_verls_grpo_statistics():
    import torch

    scores = [1.0, 0.0, 0.0, 1.0, 1.0, 0.0, 0.0, 0.0]
    mean, std = baseline(scores)
    t = torch.tensor(scores, dtype=torch.float64)
    assert mean == pytest.approx(float(t.mean())) and std == pytest.approx(float(torch.std(t)))
    assert baseline([0.7]) == (0.0, 1.0)
    with pytest.raises(ValueError):
        baseline([])


@given(st.lists(st.booleans(), min_size=64, max_size=64), st.sampled_from(EXITS), st.integers(1, 8),
       st.integers(1, 8))
def test_the_planner_follows_the_rule_and_the_cap(stream, rule, n, round_size):
    config = RoundsConfig(exit=rule, round_size=round_size, max_per_prompt=max(4 * n, round_size))
    step, cap = config.sizes(n)
    planner = RoundsPlanner(config, n, bool)
    grant, used = planner.begin(["p"]), 0
    while grant:
        assert 1 <= grant["p"] <= step and used + grant["p"] <= cap
        planner.record({"p": [float(x) for x in stream[used:used + grant["p"]]]})
        used += grant["p"]
        grant = planner.next_stage()
    seen = stream[:used]
    assert used == cap or has_exited(sum(seen), used, n, rule)
    assert used - step < n or not has_exited(sum(stream[:used - step]), used - step, n, rule)  # not a round late
    assert planned_total(seen, config, n) == used
    assert planned_total(seen[:-1], config, n) == used  # one response short: the rule asked for more


def test_the_planner_refuses_out_of_order_results():
    planner = RoundsPlanner(RoundsConfig(), 2, bool)
    planner.begin(["a", "b"])
    with pytest.raises(ValueError, match="owed"):
        planner.record({"a": [1.0, 0.0, 1.0]})
    planner.record({"a": [1.0, 0.0]})
    with pytest.raises(RuntimeError, match="still owes"):
        planner.next_stage()
    planner.record({"b": [0.0, 0.0]})
    assert planner.next_stage() == {"b": 2} and planner.rounds == 2
    with pytest.raises(ValueError, match="duplicate"):
        planner.begin(["a", "a"])
    with pytest.raises(Exception, match="exit"):
        RoundsConfig.from_dict({"exit": "any"})
