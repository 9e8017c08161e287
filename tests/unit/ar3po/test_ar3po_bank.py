"""ResponseBank: capacity and LRU eviction, reuse plans (replace vs append), staleness, finish_step, state."""

import json

import pytest

from verl_ext.ar3po import AR3POConfig, ResponseBank, ReuseConfig, finish_step


def _cfg(**reuse):
    return AR3POConfig(enabled=True, reuse=ReuseConfig(**reuse))


def _resp(tok, acc=1.0, **extra):
    return {"token_ids": [tok, tok + 1], "text": f"r{tok}", "acc": acc, **extra}


def test_put_get_most_recent_and_per_prompt_cap():
    bank = ResponseBank(_cfg(per_prompt=2))
    assert bank.get(1) is None
    assert bank.put(1, _resp(10), step=3) and bank.put(1, _resp(20), step=4) and bank.put(1, _resp(30), step=5)
    got = bank.get(1)
    assert got == {"token_ids": [30, 31], "text": "r30", "acc": 1.0, "step": 5}
    got["token_ids"].append(0)  # a copy: the bank is unchanged
    assert bank.get(1)["token_ids"] == [30, 31]
    assert len(bank) == 2 and bank.counters()["replaced"] == 1
    assert not bank.put(1, _resp(30), step=6)  # duplicate tokens
    assert bank.counters()["duplicates"] == 1 and len(bank) == 2


def test_total_capacity_evicts_least_recently_used_prompt():
    bank = ResponseBank(_cfg(per_prompt=2, capacity=4))
    for pid in ("a", "b"):
        bank.put(pid, _resp(1), 0)
        bank.put(pid, _resp(2), 0)
    assert bank.reuse_for_group("a", [0, 0], step=1) is not None  # touching 'a' makes 'b' the LRU
    bank.put("c", _resp(5), 1)
    assert "b" not in bank and "a" in bank and "c" in bank and len(bank) == 3
    m = bank.metrics()
    assert m["rollout/bank_evicted"] == 2.0 and m["rollout/bank_evicted_prompts"] == 1.0
    assert m["rollout/bank_size"] == 3.0 and m["rollout/bank_prompts"] == 2.0


def test_put_rejects_wrong_or_malformed_responses():
    bank = ResponseBank(_cfg())
    with pytest.raises(ValueError, match="acc=0.0 is not correct"):
        bank.put(1, _resp(1, acc=0.0), 0)
    with pytest.raises(ValueError, match="token_ids"):
        bank.put(1, {"token_ids": "abc", "acc": 1.0}, 0)
    with pytest.raises(ValueError, match="not JSON-safe"):
        bank.put(1, _resp(1, extra=object()), 0)
    with pytest.raises(ValueError, match="step"):
        bank.put(1, _resp(1), -1)
    with pytest.raises(ValueError, match="int or a str"):
        bank.put((1, 2), _resp(1), 0)
    assert len(bank) == 0 and 1 not in bank


def test_put_correct_keeps_only_correct_and_the_newest():
    bank = ResponseBank(_cfg(per_prompt=2))
    group = [_resp(1, 0.0), _resp(2, 1.0), _resp(3, 1.0), _resp(4, 0.0), _resp(5, 1.0)]
    assert bank.put_correct(9, group, step=2) == 2
    assert bank.get(9)["token_ids"] == [5, 6] and bank.counters()["replaced"] == 0


def test_replace_plan_targets_lowest_last_wrong_response():
    bank = ResponseBank(_cfg(mode="replace", weight=0.5))
    bank.put(1, _resp(7, acc=1.0), step=2)
    plan = bank.reuse_for_group(1, [0.0, -1.0, 0.2, -1.0], step=5)
    assert (plan.mode, plan.index, plan.age, plan.weight) == ("replace", 3, 3, 0.5)
    assert plan.apply([0.0, -1.0, 0.2, -1.0]) == [0.0, -1.0, 0.2, 1.0]
    assert bank.reuse_for_group(1, [0, 1, 0, 0], step=5) is None  # not all-wrong: no reuse
    assert bank.reuse_for_group(2, [0, 0], step=5) is None  # nothing stored
    assert bank.counters()["reused"] == 1 and bank.counters()["miss"] == 1


def test_append_plan_grows_group():
    bank = ResponseBank(_cfg(mode="append"))
    bank.put("p", _resp(1), step=0)
    plan = bank.reuse_for_group("p", [0, 0, 0], step=0)
    assert plan.index == 3 and plan.apply([0, 0, 0]) == [0, 0, 0, 1.0]
    assert bank.reuse_for_group("p", [], step=0).apply([]) == [1.0]


def test_max_age_and_disabled():
    bank = ResponseBank(_cfg(max_age=2))
    bank.put(1, _resp(1), step=10)
    assert bank.reuse_for_group(1, [0, 0], step=12) is not None
    assert bank.reuse_for_group(1, [0, 0], step=13) is None and bank.counters()["stale"] == 1
    off = ResponseBank(_cfg(enabled=False))
    off.put(1, _resp(1), step=0)
    assert off.reuse_for_group(1, [0, 0]) is None


def test_finish_step_before_after_metrics():
    bank = ResponseBank(_cfg())
    bank.put("hard", _resp(1), step=0)
    groups = {"easy": [1, 1, 1, 1], "mid": [0, 1, 0, 0], "hard": [0] * 12, "new": [0] * 12}
    out = finish_step(groups, bank, step=1)
    assert set(out.plans) == {"hard"} and out.groups["hard"][-1] == 1.0 and len(out.groups["hard"]) == 12
    m = out.metrics
    assert m["rollout/zero_adv_before"] == pytest.approx(3 / 4) and m["rollout/zero_adv_after"] == pytest.approx(2 / 4)
    assert m["rollout/reused"] == 1.0 and m["rollout/responses_per_prompt_mean"] == pytest.approx(32 / 4)
    assert m["rollout/bank_size"] == 1.0 and m["rollout/responses_hist/12"] == 2.0
    assert groups["hard"] == [0] * 12  # input untouched


def test_state_round_trip_continues_identically():
    cfg = _cfg(per_prompt=2, capacity=5)
    a = ResponseBank(cfg)
    for i, pid in enumerate([1, "x", 2, 1, 3]):
        a.put(pid, _resp(i, meta={"len": i}), step=i)
    a.reuse_for_group(1, [0, 0], step=5)
    b = ResponseBank(cfg)
    b.load_state_dict(json.loads(json.dumps(a.state_dict())))
    assert b.state_dict() == a.state_dict() and b.metrics() == a.metrics()
    for bank in (a, b):
        bank.put(4, _resp(40), step=6)
        bank.put(4, _resp(50), step=6)
    assert a.state_dict() == b.state_dict() and "x" not in b and 1 in b


def test_load_into_smaller_bank_trims_and_counts():
    a = ResponseBank(_cfg(per_prompt=3, capacity=9))
    for pid in range(3):
        for t in range(3):
            a.put(pid, _resp(t), step=0)
    small = ResponseBank(_cfg(per_prompt=2, capacity=4))
    small.load_state_dict(a.state_dict())
    assert len(small) == 4 and 0 not in small and small.counters()["replaced"] == 3
    assert small.get(2)["token_ids"] == [2, 3]
    with pytest.raises(ValueError, match="schema_version"):
        small.load_state_dict({**a.state_dict(), "schema_version": 0})
    with pytest.raises(ValueError, match="unknown counters"):
        small.load_state_dict({**a.state_dict(), "counters": {"bogus": 1}})


def test_capacity_zero_is_sized_by_the_caller_and_ages_are_reported():
    bank = ResponseBank(_cfg(per_prompt=1))  # capacity 0: unbounded until sized (the recipe: one per seed record)
    for pid in range(5):
        bank.put(pid, _resp(pid), step=pid)
    assert bank.capacity is None and len(bank) == 5
    assert sorted(bank.ages(10)) == [6, 7, 8, 9, 10]
    bank.set_capacity(3)
    assert len(bank) == 3 and 0 not in bank and 4 in bank
    with pytest.raises(ValueError, match="per_prompt"):
        bank.set_capacity(0)


def test_default_age_limit_and_one_reuse_per_prompt_per_step():
    bank = ResponseBank(_cfg())
    bank.put(7, _resp(1), step=0)
    assert bank.reuse_for_group(7, [0.0], step=65) is None and bank.counters()["stale"] == 1  # max_age 64
    bank.put(7, _resp(3), step=60)
    plans = bank.plan_reuse({"g1": [0.0, 0.0], "g2": [0.0]}, step=61, record_of={"g1": 7, "g2": 7})
    assert list(plans) == ["g1"] and plans["g1"].age == 1
    bank.unapplied(plans["g1"])
    assert bank.counters()["reused"] == 0
