"""StagePlanner: hand-computed staged plans, ordering errors, summary and state round trips."""

import json

import pytest

from verl_ext.ar3po import AR3POConfig, PlannerError, StagePlanner


def _drive(planner, ids, answers):
    """Run a step where ``answers[id]`` is the full list of rewards the prompt would get, in order."""
    plan = planner.begin(ids)
    used = {pid: 0 for pid in ids}
    plans = [plan]
    while plan:
        res = {}
        for pid, n in plan.items():
            res[pid] = answers[pid][used[pid]:used[pid] + n]
            used[pid] += n
        planner.record(res)
        plan = planner.next_stage()
        plans.append(plan)
    return plans


def test_solved_in_stage_one_stops_unsolved_continue_to_max_stages():
    p = StagePlanner(AR3POConfig(extend="unsolved", k1=4, k_s=4, max_stages=3, max_per_prompt=16))
    answers = {"easy": [1, 0, 0, 0], "mid": [0] * 4 + [0, 0, 1, 0], "hard": [0] * 12}
    plans = _drive(p, ["easy", "mid", "hard"], answers)
    assert plans == [{"easy": 4, "mid": 4, "hard": 4}, {"mid": 4, "hard": 4}, {"hard": 4}, {}]
    assert p.done() and p.stage == 3
    assert p.responses() == {"easy": 4, "mid": 8, "hard": 12}
    assert p.solved_at() == {"easy": 1, "mid": 2} and p.unsolved() == ["hard"]
    s = p.summary()
    assert s["responses_total"] == 24 and s["responses_per_prompt_mean"] == 8.0
    assert list(s["responses_hist"].items()) == [("4", 1), ("8", 1), ("12", 1)]
    assert s["solved_per_stage"] == [1, 1, 0] and s["unsolved"] == 1 and s["stages_used"] == 3
    assert s["zero_adv_before"] == 1 and s["all_wrong"] == 1
    m = p.metrics()
    assert m["rollout/solved_stage/2"] == 1.0 and m["rollout/zero_adv_before"] == pytest.approx(1 / 3)
    json.dumps(s)


def test_cap_trims_last_stage():
    p = StagePlanner(AR3POConfig(extend="unsolved", k1=4, k_s=8, max_stages=5, max_per_prompt=14))
    plans = _drive(p, [7], {7: [0] * 14})
    assert plans == [{7: 4}, {7: 8}, {7: 2}, {}]
    assert p.responses() == {7: 14} and p.stage == 3


def test_all_solved_in_stage_one_is_one_stage():
    p = StagePlanner(AR3POConfig(extend="unsolved"))
    plans = _drive(p, [1, 2], {1: [1, 1, 1, 1], 2: [0, 1, 1, 1]})
    assert plans == [{1: 4, 2: 4}, {}]
    assert p.summary()["zero_adv_before"] == 1  # prompt 1 is all-correct: no signal either


def test_results_may_arrive_in_pieces_and_done_tracks_it():
    p = StagePlanner(AR3POConfig(extend="unsolved", k1=2, k_s=2, max_stages=2))
    p.begin(["a"])
    p.record({"a": [0]})
    assert not p.done()
    with pytest.raises(PlannerError, match="owes results"):
        p.next_stage()
    p.record({"a": [0]})
    assert not p.done()  # stage 2 would still be granted
    assert p.next_stage() == {"a": 2}
    p.record({"a": [0, 0]})
    assert p.done() and p.next_stage() == {}


def test_driving_errors_are_loud_and_change_nothing():
    p = StagePlanner(AR3POConfig(extend="unsolved", k1=2))
    with pytest.raises(PlannerError, match="before begin"):
        p.record({"a": [1]})
    with pytest.raises(PlannerError, match="before begin"):
        p.next_stage()
    with pytest.raises(ValueError, match="duplicate prompt ids"):
        p.begin(["a", "b", "a"])
    p.begin(["a", "b"])
    with pytest.raises(ValueError, match="'z' was not asked"):
        p.record({"z": [1]})
    with pytest.raises(ValueError, match="got 3 results"):
        p.record({"a": [0, 0, 0]})
    with pytest.raises(ValueError, match="not a finite number"):
        p.record({"a": [0], "b": [float("inf")]})
    assert p.groups() == {"a": [], "b": []}  # the bad calls recorded nothing


def test_begin_resets_and_empty_step_is_done():
    p = StagePlanner(AR3POConfig(extend="unsolved"))
    _drive(p, [1], {1: [0] * 16})
    assert p.begin([]) == {} and p.done() and p.groups() == {}
    assert p.begin([2]) == {2: 4} and p.groups() == {2: []}


def test_state_round_trip_mid_step_resumes_exactly():
    cfg = AR3POConfig(extend="unsolved", k1=2, k_s=3, max_stages=3, max_per_prompt=7)
    answers = {1: [0, 0, 0, 1, 0], 2: [1, 1], 3: [0] * 7}
    a = StagePlanner(cfg)
    a.begin([1, 2, 3])
    a.record({1: [0, 0], 2: [1, 1], 3: [0]})
    b = StagePlanner(cfg)
    b.load_state_dict(json.loads(json.dumps(a.state_dict())))
    for p in (a, b):
        p.record({3: [0]})
        assert p.next_stage() == {1: 3, 3: 3}
        p.record({1: answers[1][2:5], 3: [0, 0, 0]})
        assert p.next_stage() == {3: 2}
        p.record({3: [0, 0]})
        assert p.next_stage() == {}
    assert a.state_dict() == b.state_dict() and a.summary() == b.summary()


def test_state_errors():
    p = StagePlanner(AR3POConfig(extend="unsolved"))
    state = p.state_dict()
    with pytest.raises(ValueError, match="schema_version"):
        p.load_state_dict({**state, "schema_version": 99})
    p.begin([1])
    bad = p.state_dict()
    bad["pending"] = [[5, 1]]
    with pytest.raises(ValueError, match="unknown prompt ids"):
        p.load_state_dict(bad)


def test_extend_mixed_fills_only_groups_with_signal():
    """``extend: mixed``: all-correct and all-wrong groups stop after stage 1; mixed ones fill to the ceiling."""
    p = StagePlanner(AR3POConfig(k1=2, k_s=2, max_stages=4, max_per_prompt=8, extend="mixed"))
    answers = {"easy": [1, 1], "mixed": [1, 0, 0, 0, 1, 1, 0, 0], "hard": [0, 0]}
    plans = _drive(p, ["easy", "mixed", "hard"], answers)
    assert plans == [{"easy": 2, "mixed": 2, "hard": 2}, {"mixed": 2}, {"mixed": 2}, {"mixed": 2}, {}]
    assert p.responses() == {"easy": 2, "mixed": 8, "hard": 2}
    assert p.unsolved() == ["hard"] and p.summary()["zero_adv_before"] == 2


def test_extend_mixed_planned_size_round_trips():
    from verl_ext.ar3po import planned_size
    cfg = AR3POConfig(k1=4, k_s=4, max_stages=2, max_per_prompt=8, extend="mixed")
    assert planned_size(cfg, [0, 0, 0, 0]) == 4
    assert planned_size(cfg, [1, 1, 1, 1]) == 4
    assert planned_size(cfg, [0, 1, 0, 0, 0, 0, 0, 0]) == 8


def test_extend_measured_uses_the_papers_rule_only_for_prompts_named_measured():
    """``extend: measured``: a measured prompt that came back all wrong gets more chances (the paper's rule); a
    blind one stops (``mixed``), and a blind mixed group fills up as under ``mixed``."""
    p = StagePlanner(AR3POConfig(k1=2, k_s=2, max_stages=3, max_per_prompt=6, extend="measured"))
    answers = {"known_hard": [0, 0, 0, 1], "blind_hard": [0, 0], "known_mixed": [1, 0], "blind_mixed": [1, 0] * 3}
    plans = []
    plan = p.begin(list(answers), measured=["known_hard", "known_mixed", "elsewhere"])
    while plan:
        plans.append(plan)
        p.record({pid: answers[pid][len(p.groups()[pid]):len(p.groups()[pid]) + n] for pid, n in plan.items()})
        plan = p.next_stage()
    assert plans[1] == {"known_hard": 2, "blind_mixed": 2} and plans[2] == {"blind_mixed": 2}
    assert p.responses() == {"known_hard": 4, "blind_hard": 2, "known_mixed": 2, "blind_mixed": 6}
    from verl_ext.ar3po import planned_size, stage_account
    cfg = p.config
    assert [planned_size(cfg, answers["known_hard"], m) for m in (True, False)] == [4, 2]
    groups = {pid: answers[pid][:n] for pid, n in p.responses().items()}
    assert stage_account(cfg, groups, {"known_hard", "known_mixed"})["mismatched"] == []
    assert stage_account(cfg, groups)["mismatched"] == ["known_hard", "known_mixed"]  # told nothing: blind
    clone = StagePlanner(cfg)  # the measured prompts survive a checkpoint, and a version-1 state loads as none
    clone.load_state_dict(json.loads(json.dumps(p.state_dict())))
    assert clone.state_dict() == p.state_dict() and clone.state_dict()["measured"] == ["known_hard", "known_mixed"]
    old = {k: v for k, v in p.state_dict().items() if k != "measured"}
    clone.load_state_dict({**old, "schema_version": 1})
    assert clone.state_dict()["measured"] == []


def test_extend_rejects_unknown_rule():
    with pytest.raises(ValueError, match="extend"):
        AR3POConfig.from_dict({"extend": "always"})
