"""Hypothesis properties of the planner and the bank over random configs and reward streams."""

from hypothesis import given, settings
from hypothesis import strategies as st

from verl_ext.ar3po import AR3POConfig, ResponseBank, ReuseConfig, StagePlanner

configs = st.builds(
    lambda k1, k_s, stages, extra, extend: AR3POConfig(k1=k1, k_s=k_s, max_stages=stages, max_per_prompt=k1 + extra,
                                                       extend=extend),
    st.integers(1, 6), st.integers(1, 6), st.integers(1, 5), st.integers(0, 12), st.sampled_from(["unsolved", "mixed", "measured"]),
)
# per prompt: probability-free stream of rewards long enough for any plan (0/1 draws)
streams = st.lists(st.lists(st.sampled_from([0.0, 1.0]), min_size=64, max_size=64), min_size=0, max_size=8)


@settings(max_examples=150, deadline=None)
@given(configs, streams, st.lists(st.booleans(), min_size=8, max_size=8))
def test_planner_invariants(cfg, rows, known):
    planner = StagePlanner(cfg)
    ids = list(range(len(rows)))
    measured = [pid for pid in ids if known[pid]]
    plan = planner.begin(ids, measured=measured)

    def rule(pid):  # the rule each prompt follows
        return cfg.extend if cfg.extend != "measured" else ("unsolved" if pid in measured else "mixed")
    granted = {pid: 0 for pid in ids}
    stages = 0
    while plan:
        stages += 1
        for pid in plan if stages > 1 else ():
            if rule(pid) == "unsolved":
                assert pid not in planner.solved_at(), "a solved prompt never gets more"
            else:
                assert set(rows[pid][:granted[pid]]) == {0.0, 1.0}, "only a group with signal gets more"
        for pid, n in plan.items():
            assert n >= 1
            granted[pid] += n
        planner.record({pid: rows[pid][granted[pid] - n:granted[pid]] for pid, n in plan.items()})
        plan = planner.next_stage()
    assert planner.done() and stages == planner.summary()["stages_used"] <= cfg.max_stages
    responses = planner.responses()
    assert responses == granted
    assert all(n <= cfg.max_per_prompt and n <= cfg.max_responses() for n in responses.values())
    s = planner.summary()
    assert s["responses_total"] == sum(granted.values())
    assert sum(s["solved_per_stage"]) + s["unsolved"] == len(ids)
    assert sum(s["responses_hist"].values()) == len(ids)
    for pid in ids:
        got = rows[pid][:responses[pid]]
        if rule(pid) == "mixed":  # all-equal after stage 1 stops there; a mixed group uses every stage or the cap
            first = set(rows[pid][:cfg.k1])
            assert responses[pid] == (cfg.max_responses() if first == {0.0, 1.0} else cfg.k1)
            continue
        if pid in planner.solved_at():  # stops exactly at the stage of the first correct response
            assert 1.0 in got
        else:  # unsolved prompts used every stage or hit the cap
            assert 1.0 not in got
            assert responses[pid] == cfg.max_responses()


ops = st.lists(st.tuples(st.integers(0, 6), st.integers(0, 5), st.booleans()), max_size=60)


@settings(max_examples=150, deadline=None)
@given(st.integers(1, 3), st.integers(0, 6), ops)
def test_bank_bounds_and_accounting(per_prompt, extra, operations):
    cfg = AR3POConfig(reuse=ReuseConfig(per_prompt=per_prompt, capacity=per_prompt + extra))
    bank = ResponseBank(cfg)
    stored = 0
    for step, (pid, tok, reuse) in enumerate(operations):
        if reuse:
            plan = bank.reuse_for_group(pid, [0.0, 0.0], step)
            assert (plan is None) == (pid not in bank)
        else:
            stored += bank.put(pid, {"token_ids": [tok], "acc": 1.0}, step)
        assert len(bank) <= cfg.reuse.capacity
        c = bank.counters()
        assert len(bank) == stored - c["replaced"] - c["evicted"]
    clone = ResponseBank(cfg)
    clone.load_state_dict(bank.state_dict())
    assert clone.state_dict() == bank.state_dict()
