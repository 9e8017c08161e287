"""Configuration dataclasses of the pool, mirrored by the recipe's YAML (``heapa.pool.*``).

Defaults are the ones measured best in the simulator over every shipped scenario (docs/sim.md); every paper
choice stays one override away and is named in ``PoolConfig``'s docstring. Types, ranges and choices are declared
on the fields and checked by pydantic (``verl_ext.config_model``); a bad value raises a ``ConfigError`` that names
the key (``pool.reinsertion.rate must be an integer >= 1 or null, got 0``), so a typo in a Hydra override fails at
startup, not hours into a run.
"""

from __future__ import annotations

import dataclasses
from dataclasses import field
from typing import Annotated, Any, Literal

from pydantic import Field, model_validator

from verl_ext.config_model import Bool, Float, Fraction, Invalid, NonNegInt, PositiveInt, Str, config_dataclass, parse
from verl_ext.pool.errors import ConfigError
from verl_ext.pool.estimators import build_estimator

SAMPLING_MODES = ("medium_only", "mixed")
BOUNDARIES = ("target", "median", "signal", "progress")
EVICTIONS = ("farthest", "paper")
REINSERT_TRIGGERS = ("below_batch", "always", "never")
EXPLORATIONS = ("adaptive", "fixed", "greedy")
WINDOW_SEATS = ("cold", "frontier")
COLD_DRAWS = ("arrival", "signal")
# The fields only the frontier rule (the ``boundary`` strategy, ``verl_ext/selection/frontier/``) and the pool's
# frontier metrics read: the recipe exposes them as that strategy's options (``heapa.selection.kwargs.*``).
FRONTIER_FIELDS = ("boundary", "target_pass_rate", "candidate_ratio", "signal_share", "progress_min_share",
                   "progress_decay", "progress_min_count", "low_fraction", "sampling_mode", "mixed_easy_fraction",
                   "cold_fraction", "exploration", "frontier_band", "frontier_batches", "max_window_visits",
                   "window_seat", "revisit_penalty", "child_distance_penalty", "cold_draw", "cold_group_key")


@config_dataclass(name="pool.reinsertion", error=ConfigError)
class ReinsertionConfig:
    """Controlled reinsertion of archived (trained) records back into the pool.

    - ``trigger``: ``below_batch`` (the reference: only when the pool holds fewer than one batch), ``always``
      (every step, as far as free capacity allows) or ``never``.
    - ``rate``: at most this many records per call; ``None`` = as many as fit (the reference reinserts all).
    - ``drop_solved_streak``: retire records solved (pass rate 1.0) in each of their last k visits; 0 disables.
    - ``max_visits``: retire records trained this many times; ``None`` disables.
    """

    trigger: Literal[REINSERT_TRIGGERS] = "always"
    rate: PositiveInt | None = None
    drop_solved_streak: NonNegInt = 0
    max_visits: PositiveInt | None = None


@config_dataclass(name="pool", error=ConfigError)
class PoolConfig:
    """Everything that shapes a ``QueryPool``. Defaults are measured ones (docs/sim.md); the paper's choices are
    one override away (``boundary=median``, ``estimator=last``, ``eviction=paper``, ``child_prior_strength=null``,
    ``reinsertion.trigger=below_batch``). The frontier selection's knobs (``FRONTIER_FIELDS``) are read by
    ``verl_ext/selection/frontier/`` (the ``boundary`` strategy) and by the pool's coverage metrics; they live on
    the pool's config because the rule draws from the pool's buckets, and the recipe sets them as the strategy's
    options (``heapa.selection.kwargs.*``).

    - ``max_pool_size``: live records (cold + scored + in flight); inserts beyond it evict (spec section 1).
    - ``boundary``: where the frontier is. ``target``: records whose estimate is nearest ``target_pass_rate``
      (holds in every pool shape); ``median``: the paper's split at rank ``low_fraction``; ``signal``: every
      scored record may be drawn, with weight ``v(1-v)`` of its estimate ``v`` (how likely its group is mixed), so
      a record at 0.85 comes half as often as one at 0.5 instead of never (``target_pass_rate`` only centres the
      greedy exploration count and the frontier metrics there).
      ``progress``: each batch splits its frontier seats between the ``signal`` and the ``target`` draw, the
      split chosen from what the records each draw took measured when they came back (``pool/progress.py``).
    - ``signal_share``: under ``signal``, the share of the frontier seats drawn that way; the rest go to the
      records nearest ``target_pass_rate`` as under ``target`` (1 = all by weight).
    - ``progress_min_share``: under ``progress``, the least share of the frontier seats each draw keeps (the
      signal share is this or ``1 -`` this), so both stay measured.
    - ``progress_decay``: under ``progress``, the weight an arm's older measurements keep per new one (and the
      prior's older first measurements per new one).
    - ``progress_min_count``: under ``progress``, the (decayed) re-visits each arm needs before the split may
      leave the target side.
    - ``target_pass_rate``: the pass rate ``target`` aims at (0.5: a group is most likely mixed there).
    - ``candidate_ratio``: ``target`` draws the batch at random from this many times ``need`` nearest records
      (1 = the nearest ones; ``median`` always uses the paper's 2).
    - ``low_fraction``: rank share below the split for ``median`` (0.5 = the median).
    - ``sampling_mode``: ``medium_only`` (frontier only) or ``mixed`` (part of each batch from the easiest).
    - ``mixed_easy_fraction``: in ``mixed`` mode, the share of the scored part of a batch taken from the easiest.
    - ``cold_fraction``: the share of a batch from the cold (never measured) queue while scored records can fill
      the rest: the floor of the ``greedy`` and ``adaptive`` shares, the share of ``fixed`` (1 = the paper's
      cold-first pass under every rule).
    - ``exploration`` (``selection/frontier/exploration.py``): ``greedy`` (default; a seat goes cold when the
      frontier has no pick nearer the target than a cold draw is expected to be: ``clip(1 - F_d / k,
      cold_fraction, 1)``),
      ``adaptive`` (the cold share grows while the frontier set is thin:
      ``clip(1 - F / (frontier_batches * k), cold_fraction, 1)``) or ``fixed`` (``cold_fraction``).
    - ``frontier_band``: the frontier set ``F`` = measured seeds within this distance of ``target_pass_rate``
      (also the band of the ``pool/frontier_size`` metric).
    - ``frontier_batches``: ``adaptive`` falls to the floor once ``F`` holds this many batches of records.
    - ``max_window_visits``: a frontier pick trained this many times in the last ``metrics_window`` steps yields
      its seat to a cold record while any is left, then to the frontier's next pick not trained that often
      (``None`` = no bound).
    - ``window_seat``: where such a seat goes first: ``cold`` (the never-measured queue, then the frontier's next
      pick) or ``frontier`` (the frontier's next pick not trained that often, then the cold queue).
    - ``revisit_penalty``: a seed trained v times counts as ``revisit_penalty * v`` farther from the target, in
      the ``target`` draw (and ``progress``'s target seats) and when ``greedy`` compares the frontier with a cold
      draw: where re-training one problem teaches its skill less each time, a seed re-drawn often yields its seat
      to fresher ones and, once none is nearer than a cold draw, to the cold queue. 0 = off (docs/pool.md).
    - ``cold_draw``: which never-measured records the frontier's cold seats take: ``arrival`` (the queue's
      order) or ``signal`` (a group first, weighted by its cold records times ``v(1-v)`` of what its records read
      at their first measurement, then its earliest arrival: ``cold_groups.py``).
    - ``cold_group_key``: the group of a record for ``cold_draw: signal``: ``data_source`` or a dotted path into
      the record's ``extra`` (``extra_info.level``: the ``level`` of a verl row's ``extra_info``); records without
      it share one group, and the pool logs a warning naming the key at the first such record.
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
    - ``stale_discount``: an outcome heard d steps after its group was selected (an asynchronous trainer's
      feedback delay) weighs ``stale_discount ** d`` against what the record's estimate already holds (1 = every
      outcome counts whole, as in the synchronous trainer; docs/sim.md measures it).
    - ``history_length``: visits remembered in each record's solved history (for ``drop_solved_streak``).
    - ``track_changes``: keep the evicted/changed id lists for ``drain_evicted``/``drain_changed`` (lineage);
      set False when nothing drains them, so they cannot grow.
    """

    max_pool_size: PositiveInt = 100_000
    boundary: Literal[BOUNDARIES] = "target"
    target_pass_rate: Fraction = 0.5
    candidate_ratio: Annotated[Float, Field(ge=1.0, le=1e6)] = 1.0
    signal_share: Fraction = 1.0
    progress_min_share: Annotated[Float, Field(ge=0.0, le=0.5)] = 0.1
    progress_decay: Annotated[Float, Field(ge=0.0, lt=1.0)] = 0.995
    progress_min_count: Annotated[Float, Field(ge=0.0)] = 20.0
    low_fraction: Fraction = 0.5
    sampling_mode: Literal[SAMPLING_MODES] = "medium_only"
    mixed_easy_fraction: Fraction = 0.5
    cold_fraction: Fraction = 0.25
    exploration: Literal[EXPLORATIONS] = "greedy"
    frontier_band: Fraction = 0.25
    frontier_batches: Annotated[Float, Field(ge=0.0, le=1e6)] = 4.0
    max_window_visits: PositiveInt | None = None
    window_seat: Literal[WINDOW_SEATS] = "cold"
    revisit_penalty: Fraction = 0.0
    cold_draw: Literal[COLD_DRAWS] = "arrival"
    cold_group_key: Annotated[Str, Field(min_length=1)] = "data_source"
    metrics_window: PositiveInt = 10
    max_child_fraction: Fraction = 0.5
    child_distance_penalty: Fraction | None = None
    child_prior_strength: Annotated[Float, Field(ge=0.0)] | None = 2.0
    eviction: Literal[EVICTIONS] = "farthest"
    resolution: PositiveInt = 1000
    archive_capacity: NonNegInt | None = None
    reinsertion: ReinsertionConfig = field(default_factory=ReinsertionConfig)
    estimator: Str = "beta"
    estimator_params: dict[str, Any] = field(default_factory=dict)
    stale_discount: Annotated[Float, Field(gt=0.0, le=1.0)] = 1.0
    history_length: PositiveInt = 16
    track_changes: Bool = True

    @model_validator(mode="after")
    def _consistent(self) -> "PoolConfig":
        """Checks that span fields: the solved streak needs remembered visits; the estimator builds."""
        streak = self.reinsertion.drop_solved_streak
        if streak > self.history_length:
            raise Invalid(f"({streak}) exceeds history_length ({self.history_length}): the pool would not remember "
                          "enough visits", field="reinsertion.drop_solved_streak")
        self.estimator_params = dict(self.estimator_params)
        build_estimator(self.estimator, **self.estimator_params)  # validates name and parameters
        return self

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
        return parse(cls, data)
