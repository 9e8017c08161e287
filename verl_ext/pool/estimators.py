"""Pass-rate estimators and the reward/pass-rate scale helpers.

An estimator turns the outcome of a record's rollout groups (``passes`` out of ``n``) into one number in [0, 1]:
the record's estimated pass rate, which ranks it in the pool. Estimators are stateless configuration; the
per-record state lives in ``record.stat`` (JSON-safe) so checkpoints never need the estimator object itself.

- ``last``: the paper's statistic, the latest group mean (overwritten each visit).
- ``ema(alpha)``: exponential moving average, ``alpha`` = weight of the newest group.
- ``beta(decay, alpha0, beta0)``: MoPPS-style discounted Beta posterior,
  ``a <- decay*a + (1-decay)*alpha0 + passes``, ``b <- decay*b + (1-decay)*beta0 + (n - passes)``,
  value ``a / (a + b)``.

The paper states its formulas on DAPO's +-1 reward scale; ``to_reward``/``to_pass`` convert, and
``child_initial_estimate`` applies the augmented child's initial-statistic rule (spec section 5).
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from typing import Any, ClassVar

from verl_ext.pool.errors import ConfigError
from verl_ext.pool.record import PromptRecord


def to_reward(p: float) -> float:
    """Pass rate in [0, 1] -> DAPO reward scale [-1, 1]."""
    return 2.0 * p - 1.0


def to_pass(r: float) -> float:
    """DAPO reward scale [-1, 1] -> pass rate in [0, 1]."""
    return (r + 1.0) / 2.0


def scale_by_difficulty(b: float, d: float) -> float:
    """The paper's ``g(v, d)`` on the reward scale: ``v/d`` if ``v >= 0`` else ``v*d``, clipped to [-1, 1]."""
    est = b / d if b >= 0 else b * d
    return min(1.0, max(-1.0, est))


def child_initial_estimate(parent_pass: float, d: float) -> float:
    """Initial pass-rate estimate of an augmented child from its parent's pass rate and difficulty factor ``d``.

    A harder child (``d > 1``) pulls the parent's reward towards -1 (lower pass rate), an easier one towards +1.
    """
    if not (d > 0 and math.isfinite(d)):
        raise ValueError(f"difficulty factor must be a finite number > 0, got {d!r}")
    check_pass_rate(parent_pass, "parent pass rate")
    return to_pass(scale_by_difficulty(to_reward(parent_pass), d))


def child_prior(estimate: float, strength: float | None) -> float:
    """The ranking value of an unmeasured child: its parent-derived ``estimate`` as ``strength`` pseudo-rollouts
    on top of a uniform Beta(1, 1) prior, i.e. ``(1 + strength * estimate) / (2 + strength)``.

    ``None`` keeps the paper's rule (the estimate itself). A child of a parent scored 0.0 then reads as uncertain
    (0.25 at strength 2) instead of certainly hopeless, so it is measured once before it is judged; one rollout
    group of 8 outweighs the prior.
    """
    if strength is None:
        return estimate
    return (1.0 + strength * estimate) / (2.0 + strength)


def check_pass_rate(p: float, what: str = "pass rate") -> float:
    """Return ``float(p)`` if it is a number in [0, 1], else raise ``ValueError`` naming ``what``."""
    if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0.0 <= p <= 1.0:
        raise ValueError(f"{what} must be a number in [0, 1], got {p!r}")
    return float(p)


class Estimator(ABC):
    """Interface: fold a group outcome into ``record.stat``; read the estimate back (``None`` = never measured)."""

    name: ClassVar[str] = ""

    @abstractmethod
    def update(self, record: PromptRecord, passes: int, n: int, weight: float = 1.0) -> None:
        """Fold ``passes`` successes out of ``n`` rollouts into ``record.stat``; ``weight`` in (0, 1] is how much
        the outcome counts against what the record already holds (``PoolConfig.stale_discount``: an outcome an
        older policy generated counts less). A first measurement is taken whole: there is nothing to weigh it
        against."""

    @abstractmethod
    def value(self, record: PromptRecord) -> float | None:
        """Estimated pass rate in [0, 1], or ``None`` if the record was never measured."""

    def params(self) -> dict[str, Any]:
        """Constructor keyword arguments (JSON-safe), so ``build_estimator(name, **params)`` rebuilds it."""
        return {}

    def spec(self) -> dict[str, Any]:
        """``{"name": ..., "params": {...}}``: what a checkpoint records to detect an estimator change."""
        return {"name": self.name, "params": self.params()}


class LastEstimator(Estimator):
    """The paper's statistic: the pass rate of the latest group."""

    name = "last"

    def update(self, record: PromptRecord, passes: int, n: int, weight: float = 1.0) -> None:
        p = passes / n
        record.stat = p if record.stat is None or weight >= 1.0 else weight * p + (1.0 - weight) * record.stat

    def value(self, record: PromptRecord) -> float | None:
        return record.stat


class EmaEstimator(Estimator):
    """Exponential moving average of group pass rates; the first group sets the value."""

    name = "ema"

    def __init__(self, alpha: float = 0.5) -> None:
        if not 0.0 < alpha <= 1.0:
            raise ConfigError(f"ema estimator: alpha must be in (0, 1], got {alpha!r}")
        self.alpha = float(alpha)

    def update(self, record: PromptRecord, passes: int, n: int, weight: float = 1.0) -> None:
        p = passes / n
        alpha = self.alpha * min(weight, 1.0)
        record.stat = p if record.stat is None else (1.0 - alpha) * record.stat + alpha * p

    def value(self, record: PromptRecord) -> float | None:
        return record.stat

    def params(self) -> dict[str, Any]:
        return {"alpha": self.alpha}


class BetaEstimator(Estimator):
    """Discounted Beta posterior (MoPPS): old evidence decays towards the prior, new evidence adds counts."""

    name = "beta"

    def __init__(self, decay: float = 0.5, alpha0: float = 1.0, beta0: float = 1.0) -> None:
        if not 0.0 <= decay <= 1.0:
            raise ConfigError(f"beta estimator: decay must be in [0, 1], got {decay!r}")
        if not (alpha0 > 0 and beta0 > 0):
            raise ConfigError(f"beta estimator: alpha0 and beta0 must be > 0, got {alpha0!r}, {beta0!r}")
        self.decay, self.alpha0, self.beta0 = float(decay), float(alpha0), float(beta0)

    def update(self, record: PromptRecord, passes: int, n: int, weight: float = 1.0) -> None:
        a, b = record.stat if record.stat is not None else (self.alpha0, self.beta0)
        lam = self.decay
        w = 1.0 if record.stat is None else min(weight, 1.0)  # a weighed outcome adds fewer pseudo-counts
        record.stat = (
            lam * a + (1.0 - lam) * self.alpha0 + w * passes,
            lam * b + (1.0 - lam) * self.beta0 + w * (n - passes),
        )

    def value(self, record: PromptRecord) -> float | None:
        if record.stat is None:
            return None
        a, b = record.stat
        return a / (a + b)

    def params(self) -> dict[str, Any]:
        return {"decay": self.decay, "alpha0": self.alpha0, "beta0": self.beta0}


ESTIMATORS: dict[str, type[Estimator]] = {cls.name: cls for cls in (LastEstimator, EmaEstimator, BetaEstimator)}


def build_estimator(name: str, **params: Any) -> Estimator:
    """Estimator by registry name; unknown names and bad parameters raise ``ConfigError``."""
    try:
        cls = ESTIMATORS[name]
    except KeyError:
        raise ConfigError(f"unknown estimator {name!r}; known: {', '.join(sorted(ESTIMATORS))}") from None
    try:
        return cls(**params)
    except TypeError as err:  # an unknown/misspelled parameter name
        raise ConfigError(f"estimator {name!r}: bad parameters {params!r} ({err})") from None
