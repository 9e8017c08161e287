"""Configuration dataclasses of the pool, mirrored by the recipe's YAML (``heapa.pool.*``).

Defaults are the ones measured best in the simulator over every shipped scenario (docs/sim.md); every paper
choice stays one override away and is named in ``PoolConfig``'s docstring. ``__post_init__`` rejects bad values with a ``ConfigError`` that
names the field, so a typo in a Hydra override fails at startup, not hours into a run.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from verl_ext.pool.errors import ConfigError
from verl_ext.pool.estimators import build_estimator

SAMPLING_MODES = ("medium_only", "mixed")
BOUNDARIES = ("target", "median")
EVICTIONS = ("farthest", "paper")
REINSERT_TRIGGERS = ("below_batch", "always", "never")
EXPLORATIONS = ("adaptive", "fixed", "greedy")


def _check_int(name: str, value: Any, minimum: int, allow_none: bool = False) -> None:
    if value is None and allow_none:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        extra = " or null" if allow_none else ""
        raise ConfigError(f"{name} must be an integer >= {minimum}{extra}, got {value!r}")


def _check_fraction(name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value <= 1.0:
        raise ConfigError(f"{name} must be a number in [0, 1], got {value!r}")


@dataclass
class ReinsertionConfig:
    """Controlled reinsertion of archived (trained) records back into the pool.

    - ``trigger``: ``below_batch`` (the reference: only when the pool holds fewer than one batch), ``always``
      (every step, as far as free capacity allows) or ``never``.
    - ``rate``: at most this many records per call; ``None`` = as many as fit (the reference reinserts all).
    - ``drop_solved_streak``: retire records solved (pass rate 1.0) in each of their last k visits; 0 disables.
    - ``max_visits``: retire records trained this many times; ``None`` disables.
    """

    trigger: str = "always"
    rate: int | None = None
    drop_solved_streak: int = 0
    max_visits: int | None = None

    def __post_init__(self) -> None:
        if self.trigger not in REINSERT_TRIGGERS:
            raise ConfigError(f"reinsertion.trigger must be one of {REINSERT_TRIGGERS}, got {self.trigger!r}")
        _check_int("reinsertion.rate", self.rate, 1, allow_none=True)
        _check_int("reinsertion.drop_solved_streak", self.drop_solved_streak, 0)
        _check_int("reinsertion.max_visits", self.max_visits, 1, allow_none=True)


@dataclass
class PoolConfig:
    """Everything that shapes a ``QueryPool``. Defaults are measured ones (docs/sim.md); the paper's choices are
    one override away (``boundary=median``, ``estimator=last``, ``eviction=paper``, ``child_prior_strength=null``,
    ``reinsertion.trigger=below_batch``).

    - ``max_pool_size``: live records (cold + scored + in flight); inserts beyond it evict (spec section 1).
    - ``boundary``: where the frontier is. ``target``: records whose estimate is nearest ``target_pass_rate``
      (holds in every pool shape); ``median``: the paper's split at rank ``low_fraction``.
    - ``target_pass_rate``: the pass rate ``target`` aims at (0.5: a group is most likely mixed there).
    - ``candidate_ratio``: ``target`` draws the batch at random from this many times ``need`` nearest records
      (1 = the nearest ones; ``median`` always uses the paper's 2).
    - ``low_fraction``: rank share below the split for ``median`` (0.5 = the median).
    - ``sampling_mode``: ``medium_only`` (frontier only) or ``mixed`` (part of each batch from the easiest).
    - ``mixed_easy_fraction``: in ``mixed`` mode, the share of the scored part of a batch taken from the easiest.
    - ``cold_fraction``: the share of a batch from the cold (never measured) queue while scored records can fill
      the rest: the floor of the ``greedy`` and ``adaptive`` shares, the share of ``fixed`` (1 = the paper's
      cold-first pass under every rule).
    - ``exploration`` (``exploration.py``): ``greedy`` (default; a seat goes cold when the frontier has no pick
      nearer the target than a cold draw is expected to be: ``clip(1 - F_d / k, cold_fraction, 1)``),
      ``adaptive`` (the cold share grows while the frontier set is thin:
      ``clip(1 - F / (frontier_batches * k), cold_fraction, 1)``) or ``fixed`` (``cold_fraction``).
    - ``frontier_band``: the frontier set ``F`` = measured seeds within this distance of ``target_pass_rate``
      (also the band of the ``pool/frontier_size`` metric).
    - ``frontier_batches``: ``adaptive`` falls to the floor once ``F`` holds this many batches of records.
    - ``max_window_visits``: a frontier pick trained this many times in the last ``metrics_window`` steps yields
      its seat to a cold record while any is left (``None`` = no bound).
    - ``revisit_penalty``: ``greedy`` counts a seed trained v times as ``revisit_penalty * v`` farther from the
      target when it compares the frontier with a cold draw (0 = off, the default: in the simulator re-training
      a prompt costs nothing; opt-in where repetition is believed to teach less, docs/pool.md).
    - ``metrics_window``: steps over which ``pool/window_*`` count distinct trained records and their visits.
    - ``max_child_fraction``: at most this share of a batch may be augmented children (1 = no cap).
    - ``child_distance_penalty``: ``target`` ranks a child as if its estimate were this much farther from the
      target than it is (a seed's estimate was measured; a child's may belong to an unsolvable problem);
      ``None`` = learned from the share of children found unsolvable at their first measurement
      (``calibration.py``; 0 while none are).
    - ``child_prior_strength``: pseudo-rollouts behind an unmeasured child's parent-derived prior (shrunk towards
      0.5); ``None`` = the paper's rule, the estimate itself.
    - ``eviction``: ``farthest`` (the child farthest from the frontier, seeds only when no child is left) or
      ``paper`` (hardest on a scored insert, easiest to make room for a cold one).
    - ``resolution``: value buckets; values closer than ``1/resolution`` are ties, drawn at random.
    - ``archive_capacity``: bound of the archive (oldest evicted first); ``None`` = ``max_pool_size``.
    - ``estimator`` / ``estimator_params``: pass-rate estimator by name (``last``, ``ema``, ``beta``).
    - ``history_length``: visits remembered in each record's solved history (for ``drop_solved_streak``).
    - ``track_changes``: keep the evicted/changed id lists for ``drain_evicted``/``drain_changed`` (lineage);
      set False when nothing drains them, so they cannot grow.
    """

    max_pool_size: int = 100_000
    boundary: str = "target"
    target_pass_rate: float = 0.5
    candidate_ratio: float = 1.0
    low_fraction: float = 0.5
    sampling_mode: str = "medium_only"
    mixed_easy_fraction: float = 0.5
    cold_fraction: float = 0.25
    exploration: str = "greedy"
    frontier_band: float = 0.25
    frontier_batches: float = 4.0
    max_window_visits: int | None = None
    revisit_penalty: float = 0.0
    metrics_window: int = 10
    max_child_fraction: float = 0.5
    child_distance_penalty: float | None = None
    child_prior_strength: float | None = 2.0
    eviction: str = "farthest"
    resolution: int = 1000
    archive_capacity: int | None = None
    reinsertion: ReinsertionConfig = field(default_factory=ReinsertionConfig)
    estimator: str = "beta"
    estimator_params: dict[str, Any] = field(default_factory=dict)
    history_length: int = 16
    track_changes: bool = True

    def __post_init__(self) -> None:
        if isinstance(self.reinsertion, dict):
            self.reinsertion = ReinsertionConfig(**self.reinsertion)
        _check_int("max_pool_size", self.max_pool_size, 1)
        if self.boundary not in BOUNDARIES:
            raise ConfigError(f"boundary must be one of {BOUNDARIES}, got {self.boundary!r}")
        _check_fraction("target_pass_rate", self.target_pass_rate)
        if isinstance(self.candidate_ratio, bool) or not isinstance(self.candidate_ratio, (int, float)) \
                or not 1.0 <= self.candidate_ratio <= 1e6:
            raise ConfigError(f"candidate_ratio must be a number >= 1, got {self.candidate_ratio!r}")
        _check_fraction("low_fraction", self.low_fraction)
        if self.sampling_mode not in SAMPLING_MODES:
            raise ConfigError(f"sampling_mode must be one of {SAMPLING_MODES}, got {self.sampling_mode!r}")
        _check_fraction("mixed_easy_fraction", self.mixed_easy_fraction)
        _check_fraction("cold_fraction", self.cold_fraction)
        if self.exploration not in EXPLORATIONS:
            raise ConfigError(f"exploration must be one of {EXPLORATIONS}, got {self.exploration!r}")
        _check_fraction("frontier_band", self.frontier_band)
        if isinstance(self.frontier_batches, bool) or not isinstance(self.frontier_batches, (int, float)) \
                or not 0.0 <= self.frontier_batches <= 1e6:
            raise ConfigError(f"frontier_batches must be a number in [0, 1e6], got {self.frontier_batches!r}")
        _check_int("max_window_visits", self.max_window_visits, 1, allow_none=True)
        _check_int("metrics_window", self.metrics_window, 1)
        _check_fraction("revisit_penalty", self.revisit_penalty)
        _check_fraction("max_child_fraction", self.max_child_fraction)
        if self.child_distance_penalty is not None:
            _check_fraction("child_distance_penalty", self.child_distance_penalty)
        if self.child_prior_strength is not None and (
                isinstance(self.child_prior_strength, bool) or not isinstance(self.child_prior_strength, (int, float))
                or not 0.0 <= self.child_prior_strength < float("inf")):
            raise ConfigError(f"child_prior_strength must be a number >= 0 or null, got {self.child_prior_strength!r}")
        if self.eviction not in EVICTIONS:
            raise ConfigError(f"eviction must be one of {EVICTIONS}, got {self.eviction!r}")
        _check_int("resolution", self.resolution, 1)
        _check_int("archive_capacity", self.archive_capacity, 0, allow_none=True)
        _check_int("history_length", self.history_length, 1)
        if self.reinsertion.drop_solved_streak > self.history_length:
            raise ConfigError(
                f"reinsertion.drop_solved_streak ({self.reinsertion.drop_solved_streak}) exceeds history_length "
                f"({self.history_length}): the pool would not remember enough visits"
            )
        if not isinstance(self.track_changes, bool):
            raise ConfigError(f"track_changes must be a bool, got {self.track_changes!r}")
        self.estimator_params = dict(self.estimator_params or {})
        build_estimator(self.estimator, **self.estimator_params)  # validates name and parameters

    @classmethod
    def paper(cls, **overrides: Any) -> "PoolConfig":
        """The reference implementation's choices (spec sections 1-5), for ablations: median split, cold-first,
        ``last`` estimator, hardest/easiest eviction, the parent-derived child estimate as is, no child cap,
        reinsertion only when the pool runs below one batch. ``overrides`` replace any field."""
        base: dict[str, Any] = dict(boundary="median", cold_fraction=1.0, estimator="last", eviction="paper",
                                    child_prior_strength=None, max_child_fraction=1.0, child_distance_penalty=0.0,
                                    reinsertion=ReinsertionConfig(trigger="below_batch"))
        base.update(overrides)
        return cls(**base)

    @property
    def archive_limit(self) -> int:
        """The effective archive bound."""
        return self.max_pool_size if self.archive_capacity is None else self.archive_capacity

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "PoolConfig":
        """Build from a plain dict (e.g. ``OmegaConf.to_container`` of the YAML); unknown keys are errors."""
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = set(data) - known
        if unknown:
            raise ConfigError(f"unknown pool config keys {sorted(unknown)}; known: {sorted(known)}")
        data = dict(data)
        reinsertion = data.get("reinsertion")
        if isinstance(reinsertion, dict):
            known_r = {f.name for f in dataclasses.fields(ReinsertionConfig)}
            bad = set(reinsertion) - known_r
            if bad:
                raise ConfigError(f"unknown reinsertion config keys {sorted(bad)}; known: {sorted(known_r)}")
            data["reinsertion"] = ReinsertionConfig(**reinsertion)
        return cls(**data)
