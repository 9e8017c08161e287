"""The budget allocator: bounds and total kept, exact against exhaustive search, and where the responses go."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from verl_ext.allocation import AllocationConfig, allocate, mixed_probability, prior_support

rates = st.floats(0.0, 1.0, allow_nan=False)
beliefs = st.lists(st.one_of(rates, st.lists(rates, min_size=1, max_size=4)), min_size=1, max_size=6)


def value(beliefs, counts) -> float:
    return sum(float(np.mean(mixed_probability(np.atleast_1d(b), m))) for b, m in zip(beliefs, counts))


@given(beliefs, st.integers(1, 4), st.integers(0, 12), st.integers(0, 30))
def test_counts_stay_in_bounds_and_spend_what_the_bounds_allow(bs, minimum, extra, spare):
    maximum = minimum + extra
    budget = len(bs) * minimum + spare
    counts = allocate(bs, budget, minimum, maximum)
    assert len(counts) == len(bs) and all(minimum <= c <= maximum for c in counts)
    assert sum(counts) == min(budget, len(bs) * maximum)


@settings(max_examples=60)
@given(st.lists(st.one_of(rates, st.lists(rates, min_size=1, max_size=3)), min_size=1, max_size=3),
       st.integers(0, 9))
def test_greedy_is_exact_against_every_split(bs, spare):
    minimum, maximum = 2, 8
    budget = len(bs) * minimum + spare
    best = max(value(bs, c) for c in itertools.product(range(minimum, maximum + 1), repeat=len(bs))
               if sum(c) == min(budget, len(bs) * maximum))
    assert value(bs, allocate(bs, budget, minimum, maximum)) == pytest.approx(best, abs=1e-12)


@given(rates, st.integers(1, 8), st.integers(2, 16))
def test_the_same_belief_everywhere_is_fixed_n(p, k, n):
    counts = allocate([p] * k, k * n, 1, 4 * n)
    assert max(counts) - min(counts) <= 1 and sum(counts) == k * n


def test_responses_go_where_a_larger_group_turns_mixed():
    counts = allocate([0.5, 0.05, 0.95, 0.5], 4 * 8, 2, 32)
    assert counts[1] > 8 and counts[2] > 8 and counts[0] < 8 and counts[3] < 8
    assert counts[1] == counts[2]  # mirror images: p and 1 - p are as hard to mix
    unsolvable = allocate([0.0, 0.4], 16, 2, 32)  # a group that can never be mixed gets the minimum
    assert unsolvable == [2, 14]


def test_bad_bounds_and_budgets_are_named():
    with pytest.raises(ValueError, match="cannot give 3 prompts 4 responses"):
        allocate([0.5] * 3, 11, 4, 8)
    with pytest.raises(ValueError, match="minimum"):
        allocate([0.5], 4, 3, 2)
    with pytest.raises(ValueError, match="minimum \\(4\\) <= n \\(2\\)"):
        AllocationConfig(minimum=4).bounds(2)
    assert AllocationConfig().bounds(8) == (2, 32) and allocate([], 10, 2, 4) == []


def test_prior_support_is_the_measured_rates_quantiles():
    assert prior_support([]).tolist() == [0.5]
    support = prior_support(np.linspace(0, 1, 101), points=4)
    assert support.tolist() == pytest.approx([0.125, 0.375, 0.625, 0.875])


def test_allocator_plans_from_estimates_and_learns_its_prior():
    from verl_ext.allocation import Allocator

    alloc = Allocator(AllocationConfig(enabled=True), n=8)
    # nothing measured: one shared belief (0.5), so every prompt gets n
    assert alloc.plan([1, 2, 3], lambda rid: None) == {1: 8, 2: 8, 3: 8}
    estimates = {1: 0.5, 2: 0.05, 3: None}
    plan = alloc.plan([1, 2, 3], estimates.get)
    assert sum(plan.values()) == 24 and plan[2] > plan[1]  # a rare success needs more responses to show
    metrics = alloc.metrics()
    assert metrics["select/alloc_measured_frac"] == pytest.approx(2 / 3)
    assert metrics["select/alloc_expected_mixed"] >= metrics["select/alloc_expected_mixed_at_n"] - 1e-12
    alloc.observe({1: (0, 8), 2: (8, 8), 3: (0, 0)})  # an empty group teaches the prior nothing
    assert list(alloc.recent) == [0.0, 1.0]
    again = Allocator(AllocationConfig(enabled=True, history=2), n=8)
    again.load_state_dict(alloc.state_dict())
    assert again.state_dict() == alloc.state_dict()
    assert again.plan([4, 5], lambda rid: None) == alloc.plan([4, 5], lambda rid: None)
    with pytest.raises(ValueError, match="Allocator"):
        again.load_state_dict({"schema_version": 99, "recent": []})
    assert Allocator(AllocationConfig(), n=8).plan([], lambda rid: None) == {}
