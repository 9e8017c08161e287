"""AR3POConfig / ReuseConfig validation, dict round trips and group statistics."""

import json

import pytest

from verl_ext.ar3po import AR3POConfig, ReuseConfig, group_stats, is_zero_advantage


def test_defaults_and_max_responses():
    cfg = AR3POConfig()
    assert (cfg.k1, cfg.k_s, cfg.max_stages, cfg.max_per_prompt) == (4, 4, 4, 16)
    assert cfg.max_responses() == 16
    assert AR3POConfig(max_stages=3).max_responses() == 12
    assert AR3POConfig(k1=4, k_s=8, max_stages=3, max_per_prompt=16).max_responses() == 16
    assert cfg.reuse.mode == "replace" and cfg.reuse.per_prompt == 1 and cfg.reuse.capacity == 0
    assert (cfg.reuse.max_age, cfg.reuse.correction, cfg.reuse.is_cap) == (64, "none", 2.0)
    assert cfg.is_correct(1.0) and not cfg.is_correct(0.0) and not cfg.is_correct(0.5)


@pytest.mark.parametrize("kwargs, field", [
    ({"k1": 0}, "k1"), ({"k_s": -1}, "k_s"), ({"max_stages": 0}, "max_stages"), ({"k1": 2.0}, "k1"),
    ({"k1": 20, "max_per_prompt": 16}, "k1"), ({"success_threshold": float("nan")}, "success_threshold"),
    ({"enabled": "yes"}, "enabled"), ({"reuse": 3}, "reuse"), ({"k1": True}, "k1"),
])
def test_ar3po_config_errors_name_the_field(kwargs, field):
    with pytest.raises(ValueError, match=rf"^ar3po\.{field} "):
        AR3POConfig(**kwargs)


@pytest.mark.parametrize("kwargs, field", [
    ({"mode": "swap"}, "mode"), ({"per_prompt": 0}, "per_prompt"), ({"capacity": 1, "per_prompt": 2}, "capacity"),
    ({"max_age": -1}, "max_age"), ({"weight": -0.5}, "weight"), ({"weight": float("inf")}, "weight"),
    ({"mark_field": ""}, "mark_field"), ({"mark_field": "a b"}, "mark_field"),
])
def test_reuse_config_errors_name_the_field(kwargs, field):
    with pytest.raises(ValueError, match=rf"^ar3po\.reuse\.{field} "):
        ReuseConfig(**kwargs)


def test_from_dict_round_trip_and_unknown_keys():
    cfg = AR3POConfig(enabled=True, k1=2, reuse=ReuseConfig(mode="append", max_age=5))
    data = json.loads(json.dumps(cfg.to_dict()))
    assert AR3POConfig.from_dict(data) == cfg
    with pytest.raises(ValueError, match=r"ar3po: unknown keys \['k2'\]"):
        AR3POConfig.from_dict({"k2": 3})
    with pytest.raises(ValueError, match=r"ar3po\.reuse: unknown keys"):
        AR3POConfig.from_dict({"reuse": {"size": 3}})


def test_group_stats_hand_computed():
    groups = {1: [1, 1, 1, 1], 2: [0, 0, 0, 0, 0, 0, 0, 0], 3: [0, 1, 0, 0], 4: [0.0]}
    s = group_stats(groups)
    assert (s.groups, s.responses, s.all_correct, s.all_wrong, s.zero_adv) == (4, 17, 1, 2, 3)
    assert s.hist == {"1": 1, "4": 2, "8": 1}
    assert s.responses_per_prompt_mean == pytest.approx(17 / 4)
    assert s.frac(s.zero_adv) == pytest.approx(0.75)
    assert group_stats({}).responses_per_prompt_mean == 0.0 and group_stats({}).frac(0) == 0.0
    assert is_zero_advantage([0.3, 0.3]) and not is_zero_advantage([0.3, 0.4])


def test_group_stats_rejects_non_finite():
    with pytest.raises(ValueError, match=r"prompt 'p': acc\[1\]=nan"):
        group_stats({"p": [1.0, float("nan")]})


def test_rollout_core_imports_no_heavy_frameworks():
    import subprocess
    import sys
    from pathlib import Path

    code = "import sys, verl_ext.ar3po; print(sorted({'verl', 'ray', 'torch'} & set(sys.modules)))"
    root = Path(__file__).resolve().parents[3]
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=root).stdout
    assert out.strip() == "[]"


def test_the_default_extends_mixed_groups():
    """The default rule is ``mixed`` (docs/ar3po.md: the paper's ``unsolved`` lost to GRPO on a single pass)."""
    assert AR3POConfig().extend == "mixed" and AR3POConfig(extend="unsolved").extend == "unsolved"
