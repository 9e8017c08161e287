"""Estimators and scale helpers against hand-computed values."""

import pytest

from verl_ext.pool import (
    BetaEstimator,
    ConfigError,
    EmaEstimator,
    LastEstimator,
    PromptRecord,
    build_estimator,
    child_initial_estimate,
    to_pass,
    to_reward,
)


def _rec():
    return PromptRecord(0, "q", "a", "s")


def test_last():
    est, rec = LastEstimator(), _rec()
    assert est.value(rec) is None
    est.update(rec, 3, 4)
    assert est.value(rec) == 0.75
    est.update(rec, 0, 8)
    assert est.value(rec) == 0.0


def test_ema():
    est, rec = EmaEstimator(alpha=0.25), _rec()
    est.update(rec, 4, 4)  # first group sets the value
    assert est.value(rec) == 1.0
    est.update(rec, 0, 4)  # 0.75*1 + 0.25*0
    assert est.value(rec) == pytest.approx(0.75)
    est.update(rec, 2, 4)  # 0.75*0.75 + 0.25*0.5
    assert est.value(rec) == pytest.approx(0.6875)


def test_beta():
    est, rec = BetaEstimator(decay=0.5, alpha0=1.0, beta0=1.0), _rec()
    assert est.value(rec) is None
    est.update(rec, 3, 4)  # a = .5+.5+3 = 4, b = .5+.5+1 = 2
    assert rec.stat == (4.0, 2.0)
    assert est.value(rec) == pytest.approx(4 / 6)
    est.update(rec, 0, 4)  # a = 2+.5+0 = 2.5, b = 1+.5+4 = 5.5
    assert rec.stat == (2.5, 5.5)
    assert est.value(rec) == pytest.approx(2.5 / 8)


def test_build_and_errors():
    assert build_estimator("ema", alpha=0.1).spec() == {"name": "ema", "params": {"alpha": 0.1}}
    with pytest.raises(ConfigError, match="known: beta, ema, last"):
        build_estimator("mean")
    with pytest.raises(ConfigError, match="bad parameters"):
        build_estimator("ema", alhpa=0.1)
    with pytest.raises(ConfigError):
        EmaEstimator(alpha=0)
    with pytest.raises(ConfigError):
        BetaEstimator(decay=1.5)
    with pytest.raises(ConfigError):
        BetaEstimator(alpha0=0)


def test_scales():
    assert to_reward(0.75) == 0.5 and to_pass(-0.5) == 0.25
    # parent p=0.75 -> b=0.5; harder child d=1.25: 0.5/1.25 = 0.4 -> p = 0.7
    assert child_initial_estimate(0.75, 1.25) == pytest.approx(0.7)
    # parent p=0.25 -> b=-0.5; d=1.2: -0.6 -> p = 0.2
    assert child_initial_estimate(0.25, 1.2) == pytest.approx(0.2)
    # easier child of a failing parent: b=-1, d=0.8 -> -0.8 -> 0.1
    assert child_initial_estimate(0.0, 0.8) == pytest.approx(0.1)
    # clipping: b=0.9, d=0.5 -> 1.8 -> 1 -> p = 1
    assert child_initial_estimate(0.95, 0.5) == 1.0
    with pytest.raises(ValueError):
        child_initial_estimate(0.5, 0)
    with pytest.raises(ValueError):
        child_initial_estimate(1.5, 1.0)
