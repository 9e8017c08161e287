"""Reading a finished staged step back: stage of each response, the planner's size for recorded rewards, account."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from verl_ext.ar3po import AR3POConfig, StagePlanner, planned_size, stage_account, stage_metrics


def _cfg(**kw):
    return AR3POConfig(**{"extend": "unsolved", "k1": 2, "k_s": 3, "max_stages": 3, "max_per_prompt": 7, **kw})


def test_stage_of_follows_the_stage_sizes():
    cfg = _cfg()
    assert [cfg.stage_of(i) for i in range(7)] == [1, 1, 2, 2, 2, 3, 3]  # the cap trims stage 3 to 2
    with pytest.raises(ValueError, match="stage_of"):
        cfg.stage_of(-1)


def test_planned_size_stops_at_first_success_and_at_the_cap():
    cfg = _cfg()
    assert planned_size(cfg, [1, 0]) == 2          # solved in stage 1
    assert planned_size(cfg, [0, 0, 0, 1, 0]) == 5  # solved in stage 2: the stage still completes
    assert planned_size(cfg, [0] * 7) == 7          # unsolved: all stages, trimmed to the cap
    assert planned_size(cfg, [0, 0, 0]) == 5        # a short record: what the planner had asked for by then
    assert planned_size(cfg, []) == 2


def test_stage_account_counts_stages_solves_and_mismatches():
    cfg = _cfg()
    acc = stage_account(cfg, {"easy": [1, 1], "mid": [0, 0, 0, 1, 0], "hard": [0] * 7, "broken": [1, 1, 0]})
    assert acc["stages_used"] == 3 and acc["prompts"] == 4
    assert acc["solved_per_stage"] == [2, 1, 0]  # easy and broken in stage 1, mid in stage 2
    assert acc["unsolved"] == 1
    assert acc["mismatched"] == ["broken"]  # solved in stage 1 but got a third response
    assert acc["stages_mean"] == pytest.approx((1 + 2 + 3 + 2) / 4)
    m = stage_metrics(acc)
    assert m["rollout/plan_mismatch"] == 1.0 and m["rollout/solved_stage/2"] == 1.0 and m["rollout/stages_used"] == 3


def test_empty_step():
    acc = stage_account(_cfg(), {})
    assert acc["stages_used"] == 0 and acc["solved_per_stage"] == [] and acc["stages_mean"] == 0.0


@settings(max_examples=200, deadline=None)
@given(k1=st.integers(1, 4), k_s=st.integers(1, 4), stages=st.integers(1, 4), cap=st.integers(1, 12),
       outcomes=st.lists(st.lists(st.booleans(), min_size=12, max_size=12), min_size=1, max_size=6))
def test_groups_the_planner_produces_always_account_cleanly(k1, k_s, stages, cap, outcomes):
    """Drive the real planner with arbitrary rewards; reading the groups back finds no mismatch and the same
    stages and solves the planner reports."""
    if k1 > cap:
        return
    cfg = AR3POConfig(extend="unsolved", k1=k1, k_s=k_s, max_stages=stages, max_per_prompt=cap)
    planner = StagePlanner(cfg)
    ids = list(range(len(outcomes)))
    plan = planner.begin(ids)
    while plan:
        planner.record({pid: [float(x) for x in outcomes[pid][len(planner.groups()[pid]):][:n]]
                        for pid, n in plan.items()})
        plan = planner.next_stage()
    groups = planner.groups()
    account = stage_account(cfg, groups)
    summary = planner.summary()
    assert account["mismatched"] == []
    assert account["unsolved"] == summary["unsolved"]
    assert account["solved_per_stage"] == summary["solved_per_stage"][:account["stages_used"]]
    assert all(planned_size(cfg, accs) == len(accs) <= cfg.max_responses() for accs in groups.values())
