"""PromptRecord rows and PoolConfig validation."""

import json

import pytest

from verl_ext.pool import ConfigError, PoolConfig, PromptRecord, ReinsertionConfig


def test_record_row_round_trip_is_json_safe():
    rec = PromptRecord(7, [{"role": "user", "content": "1+1?"}], "2", "src", extra={"k": [1, 2]})
    rec.stat = (2.0, 3.0)
    rec.visits, rec.solved_bits = 3, 0b101
    row = json.loads(json.dumps(rec.to_row()))
    back = PromptRecord.from_row(row)
    assert back.to_dict() == rec.to_dict()
    assert back.stat == (2.0, 3.0)
    assert not hasattr(back, "__dict__")
    with pytest.raises(ValueError, match="expected"):
        PromptRecord.from_row(row[:-1])


def test_solved_streak():
    rec = PromptRecord(1, "q", "a", "s")
    rec.visits, rec.solved_bits = 2, 0b11
    assert rec.solved_streak(2) and not rec.solved_streak(3) and not rec.solved_streak(0)
    rec.solved_bits = 0b10
    assert not rec.solved_streak(2) and not rec.solved_streak(1)


@pytest.mark.parametrize(
    "kwargs, field",
    [
        ({"max_pool_size": 0}, "max_pool_size"),
        ({"low_fraction": 1.5}, "low_fraction"),
        ({"sampling_mode": "easy"}, "sampling_mode"),
        ({"mixed_easy_fraction": -0.1}, "mixed_easy_fraction"),
        ({"archive_capacity": -1}, "archive_capacity"),
        ({"estimator": "median"}, "estimator"),
        ({"estimator": "ema", "estimator_params": {"alpha": 2}}, "alpha"),
        ({"reinsertion": {"trigger": "sometimes"}}, "trigger"),
        ({"reinsertion": {"rate": 0}}, "rate"),
        ({"reinsertion": {"drop_solved_streak": 20}}, "history_length"),
    ],
)
def test_config_errors_name_the_field(kwargs, field):
    with pytest.raises(ConfigError, match=field):
        PoolConfig(**kwargs)


def test_config_dict_round_trip():
    cfg = PoolConfig(max_pool_size=10, reinsertion=ReinsertionConfig(rate=3), estimator="beta",
                     estimator_params={"decay": 0.9})
    assert PoolConfig.from_dict(cfg.to_dict()) == cfg
    assert cfg.archive_limit == 10
    with pytest.raises(ConfigError, match=r"pool: unknown keys"):
        PoolConfig.from_dict({"max_pool_sz": 3})
    with pytest.raises(ConfigError, match=r"pool\.reinsertion: unknown keys"):
        PoolConfig.from_dict({"reinsertion": {"rat": 3}})
