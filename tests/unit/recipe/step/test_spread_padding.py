"""``spread_padding`` keeps each rank's rows and spreads its padding evenly over its updates (property-based)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from recipe.heapa.step.update_plan import Batching, plan_update, spread_padding


@st.composite
def layouts(draw):
    dp = draw(st.integers(1, 4))
    updates = draw(st.integers(1, 5))
    per_update = draw(st.integers(1, 6))
    flags = draw(st.lists(st.booleans(), min_size=dp * updates * per_update, max_size=dp * updates * per_update))
    return dp, updates, per_update, flags


@given(layouts())
def test_order_is_a_per_rank_permutation_with_padding_spread(layout):
    dp, updates, per_update, flags = layout
    order = spread_padding(flags, dp, updates)
    assert sorted(order) == list(range(len(flags)))
    chunk = len(flags) // dp
    for rank in range(dp):
        part = order[rank * chunk:(rank + 1) * chunk]
        assert all(rank * chunk <= i < (rank + 1) * chunk for i in part)  # verl's dispatch: rows stay on their rank
        pads = [sum(flags[i] for i in part[u * per_update:(u + 1) * per_update]) for u in range(updates)]
        assert max(pads) - min(pads) <= 1


@given(st.integers(1, 5000), st.integers(1, 600), st.integers(1, 8), st.integers(1, 64),
       st.one_of(st.none(), st.integers(1, 64)), st.lists(st.integers(1, 64), max_size=2))
def test_plan_pads_less_than_one_multiple_and_divides(rows, groups, dp, mini, micro, lp):
    plan = plan_update(rows, groups, Batching(dp=dp, mini_batch_prompts=mini, actor_micro=micro,
                                              log_prob_micros=tuple(lp)))
    assert plan.padded_rows % plan.multiple == 0 and 0 <= plan.padded_rows - rows < plan.multiple
    assert plan.updates == max(1, -(-groups // mini))
    per_rank = plan.padded_rows // dp
    assert per_rank % plan.updates == 0 and (per_rank // plan.updates) % (micro or 1) == 0
    assert all(per_rank % m == 0 for m in lp)
    assert abs(plan.global_batch_size * plan.updates - rows) < 1e-6
