"""Scenario configuration of the simulator: dataclasses mirrored by the YAML files in ``scenarios/``.

One ``ScenarioConfig`` holds everything a run depends on except the strategy name and the seed, so a scenario
file fully documents a benchmark. Every dataclass declares its types and ranges for pydantic
(``verl_ext.config_model``), which names the offending key and rejects unknown keys at every level (a typo in a YAML
file fails loudly instead of silently using a default). The ``pool`` and ``lineage`` blocks are the real ``PoolConfig``/``LineageConfig``
fields; ``augment.parents`` holds the real ``AugmentConfig`` parent-selection fields.
"""

from __future__ import annotations

import dataclasses
from dataclasses import field
from importlib import resources
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import ConfigDict, Field, field_validator, model_validator
from typing_extensions import TypedDict

from verl_ext.augment.config import AugmentConfig
from verl_ext.config_model import Bool, Float, Fraction, Invalid, NonNegInt, PositiveInt, Str, config_dataclass, parse
from verl_ext.pool.config import PoolConfig
from verl_ext.pool.errors import ConfigError
from verl_ext.pool.lineage.config import LineageConfig

_NonNeg = Annotated[Float, Field(ge=0.0)]
_PARENT_FIELDS = {"parent_selection", "band_low", "band_high", "num_parents", "num_per_prompt"}


class Component(TypedDict):
    """One normal component of a difficulty mixture (logits, relative to ability 0)."""

    __pydantic_config__ = ConfigDict(extra="forbid", allow_inf_nan=False)  # type: ignore[misc]
    weight: Annotated[Float, Field(gt=0.0)]
    mean: Float
    std: _NonNeg


Mixture = Annotated[list[Component], Field(min_length=1)]


@config_dataclass(name="prompts", error=ConfigError)
class PromptsConfig:
    """The data: ``n_train`` pool seeds, ``n_test`` held-out prompts (they define accuracy), ``n_topics`` topics
    (assigned uniformly), difficulties drawn from a normal mixture in logits (``test_difficulty``: None = the
    training mixture). ``topic_per_component`` (opt-in): each component of the mixture is one topic, a difficulty
    level that is its own skill (a prompt's topic is the component it was drawn from, in the test set too), so
    ``n_topics`` must equal the number of components."""

    n_train: PositiveInt = 2000
    n_test: PositiveInt = 500
    n_topics: PositiveInt = 4
    difficulty: Mixture = field(default_factory=lambda: [{"weight": 1.0, "mean": 0.5, "std": 1.5}])
    test_difficulty: Mixture | None = None
    topic_per_component: Bool = False

    @model_validator(mode="after")
    def _levels(self) -> "PromptsConfig":
        """Under ``topic_per_component`` every mixture has one component per topic."""
        if self.topic_per_component:
            for name in ("difficulty", "test_difficulty"):
                mix = getattr(self, name)
                if mix is not None and len(mix) != self.n_topics:
                    raise Invalid(f"has {len(mix)} components but n_topics is {self.n_topics} "
                                  "(topic_per_component: one component per topic)", field=name)
        return self


@config_dataclass(name="learner", error=ConfigError)
class LearnerConfig:
    """The synthetic policy. Solve probability of prompt i: ``sigmoid(discrimination * (ability[topic_i] +
    memo_i - difficulty_i))``. A step moves ``ability`` by ``learning_rate * mean over the batch of (group reward
    spread * topic share)``: only mixed groups count; ``transfer`` is the share of each group's gain spread over
    all topics (the rest goes to its own). ``item_learning_rate`` adds prompt-specific gain (memorisation, which
    the test set does not see); ``drift_std`` is a random walk of each topic's ability per step.
    ``repeat_decay`` (opt-in, 1 = off in every shipped scenario but ``cpu_levels``): a prompt's contribution to
    the ability update is multiplied by ``repeat_decay ** (times it was trained before)``: a diminishing return for
    re-training one prompt (what the policy could generalise from it, it has mostly taken), which the pool cannot
    observe. With 1 re-training a prompt teaches as much as a new one, so nothing rewards exploring the seed set.
    ``repeat_harm`` (opt-in, 0 = off): each re-training of a prompt (every training after its first) takes
    ``repeat_harm * spread`` from its contribution, which can then go below zero: re-training one problem sharpens
    the policy onto it at the cost of its level (the CPU runs: the re-drawn levels lost accuracy and the actor its
    entropy, ``docs/cpu_learning.md``), a cost the decay alone cannot express (it never teaches less than nothing).
    ``prompt_entropy_decay`` (opt-in, 0 = off, every shipped scenario): HIVE's probe reads ``(1 - decay) ** updates``
    times its noisy binary entropy (the scale moves, not the information), the policy-wide fall of a real prompt entropy while it trains (the CPU comparison:
    1.3 -> 0.4 nats in 40 steps, about 0.03 a step), which a probe ranked against older measurements mistakes for
    certainty.
    ``topic_rates`` (opt-in, None = 1 for every topic, every scenario before ``levels_no_transfer``): per topic, a
    factor on ``learning_rate`` (how learnable that skill is); one value per topic.
    ``drift_stream``: where the random walk draws from. ``roll`` (the default, every scenario's figures in
    docs/sim.md unless they say otherwise) shares the rollouts' stream, so two strategies of one seed that generate
    different numbers of responses walk differently, and a paired difference carries that walk's noise (docs/sim.md,
    "The drift's own stream"). ``own``: a stream of its own, one draw per policy update, so two strategies of one
    seed see the same walk update by update (common random numbers)."""

    init_ability: Float = 0.0
    discrimination: Annotated[Float, Field(gt=0.0)] = 1.0
    learning_rate: _NonNeg = 0.012
    transfer: Fraction = 0.5
    item_learning_rate: _NonNeg = 0.2
    drift_std: _NonNeg = 0.01
    repeat_decay: Fraction = 1.0
    repeat_harm: _NonNeg = 0.0
    prompt_entropy_decay: Annotated[Float, Field(ge=0.0, le=0.99)] = 0.0
    topic_rates: list[_NonNeg] | None = None
    drift_stream: Literal["roll", "own"] = "roll"


@config_dataclass(name="train", error=ConfigError)
class TrainConfig:
    """The loop: ``batch_size`` prompts x ``n`` rollouts per step, until ``budget_rollouts`` responses; accuracy
    is measured every ``eval_every`` steps; ``target_accuracy`` defines "rollouts to target".

    ``feedback_delay`` d models an asynchronous trainer: a batch selected and rolled out at step s (by the policy of
    step s) is trained, and its outcomes reach the pool and the strategy, at step s + d; its records stay in flight
    meanwhile, so selection cannot hand them out again. 0 is the synchronous loop.

    ``rollout_stream`` k: which realisation of the rollout noise a seed draws, the data, the pool's and the
    strategy's streams and (under ``learner.drift_stream: own``) the walk staying the seed's. 0 is the seed's own
    (every published figure). Two strategies of one seed stay paired only while they draw the same records in the
    same order: once one takes its cold records in another order, the same stream lands on other records and the
    pair parts, so a paired reading of a draw-order change is averaged over several k (``verl_ext.sim.paired``)."""

    batch_size: PositiveInt = 64
    n: PositiveInt = 8
    budget_rollouts: PositiveInt = 102_400
    target_accuracy: Fraction = 0.6
    eval_every: PositiveInt = 1
    feedback_delay: NonNegInt = 0
    rollout_stream: NonNegInt = 0


@config_dataclass(name="augment", error=ConfigError)
class SimAugmentConfig:
    """On-policy augmentation as the simulator models it (used by the ``heapa`` strategies only).

    ``parents``: real ``AugmentConfig`` fields (``parent_selection``, ``band_low``, ``band_high``,
    ``num_parents``, ``num_per_prompt``). Each candidate child has difficulty ``parent + N(shift, std)``; the policy
    reports a difficulty factor ``clip(exp(report_scale * (delta + N(0, report_noise))), 0.75, 1.33)``. A share
    ``parse_fail_rate`` is rejected before the teacher; of the rest, ``invalid_rate`` are unsolvable, of which the
    teacher lets ``invalid_slip`` through; valid ones are accepted with ``teacher_accept``. Verdicts arrive
    ``delay_steps`` steps later (asynchronous validation)."""

    parents: dict[str, Any] = field(default_factory=lambda: {"parent_selection": "band", "band_low": 0.05,
                                                             "band_high": 0.95, "num_parents": 16, "num_per_prompt": 2})
    child_difficulty_shift: Float = 0.0
    child_difficulty_std: _NonNeg = 0.5
    report_scale: _NonNeg = 0.3
    report_noise: _NonNeg = 0.3
    parse_fail_rate: Fraction = 0.1
    teacher_accept: Fraction = 0.9
    invalid_rate: Fraction = 0.1
    invalid_slip: Fraction = 0.2
    delay_steps: NonNegInt = 1

    @field_validator("parents")
    @classmethod
    def _real_parent_fields(cls, parents: dict[str, Any]) -> dict[str, Any]:
        """Only ``AugmentConfig``'s parent-selection fields, valid as ``AugmentConfig`` validates them."""
        unknown = set(parents) - _PARENT_FIELDS
        if unknown:
            raise ValueError(f"unknown keys {sorted(unknown)}; known: {sorted(_PARENT_FIELDS)}")
        AugmentConfig(enabled=True, **parents)
        return parents


@config_dataclass(name="scenario", error=ConfigError)
class ScenarioConfig:
    """A whole scenario. ``pool``/``lineage``: ``PoolConfig``/``LineageConfig`` fields (validated when a run builds
    them, and here); ``strategies``: per strategy name, keyword arguments for its constructor."""

    name: Annotated[Str, Field(min_length=1)] = "custom"
    description: Str = ""
    prompts: PromptsConfig = field(default_factory=PromptsConfig)
    learner: LearnerConfig = field(default_factory=LearnerConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    augment: SimAugmentConfig = field(default_factory=SimAugmentConfig)
    pool: dict[str, Any] = field(default_factory=lambda: {"max_pool_size": 3000})
    lineage: dict[str, Any] = field(default_factory=dict)
    strategies: dict[str, dict[str, Any]] = field(default_factory=dict)

    @model_validator(mode="after")
    def _pool_and_lineage(self) -> "ScenarioConfig":
        """The ``pool``/``lineage`` blocks build now, not mid-benchmark, and the pool holds every seed."""
        pool = self.pool_config()
        self.lineage_config()
        rates = self.learner.topic_rates
        if rates is not None and len(rates) != self.prompts.n_topics:
            raise ConfigError(f"learner.topic_rates has {len(rates)} values but prompts.n_topics is "
                              f"{self.prompts.n_topics}")
        if pool.max_pool_size < self.prompts.n_train:
            raise ConfigError(f"pool.max_pool_size ({pool.max_pool_size}) is below "
                              f"prompts.n_train ({self.prompts.n_train})")
        return self

    def pool_config(self, track_changes: bool = False, **overrides: Any) -> PoolConfig:
        """The scenario's ``PoolConfig``; ``overrides`` (a simulator strategy's ablation) replace its fields."""
        data = dict(self.pool)
        if "track_changes" in data:
            raise ConfigError("pool.track_changes is set by the simulator (on exactly when lineage runs)")
        return PoolConfig.from_dict({**data, **overrides, "track_changes": track_changes})

    def lineage_config(self) -> LineageConfig:
        return parse(LineageConfig, self.lineage)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "ScenarioConfig":
        """Build from plain data (a parsed YAML file); unknown keys at any level raise ``ConfigError``."""
        if not isinstance(data, dict):
            raise ConfigError(f"a scenario must be a mapping, got {type(data).__name__}")
        return parse(cls, data)


def available_scenarios() -> list[str]:
    """Names of the scenarios shipped with the package."""
    folder = resources.files("verl_ext.sim") / "scenarios"
    return sorted(p.name[:-5] for p in folder.iterdir() if p.name.endswith(".yaml"))


def load_scenario(name_or_path: str | Path) -> ScenarioConfig:
    """A shipped scenario by name (``default``) or a YAML file by path."""
    path = Path(name_or_path)
    if path.suffix in (".yaml", ".yml") or path.exists():
        if not path.is_file():
            raise ConfigError(f"scenario file {str(path)!r} does not exist")
        text = path.read_text(encoding="utf-8")
    else:
        resource = resources.files("verl_ext.sim") / "scenarios" / f"{name_or_path}.yaml"
        if not resource.is_file():
            raise ConfigError(f"unknown scenario {str(name_or_path)!r}; shipped: {', '.join(available_scenarios())}")
        text = resource.read_text(encoding="utf-8")
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise ConfigError(f"scenario {str(name_or_path)!r} is not valid YAML: {err}") from None
    return ScenarioConfig.from_dict(data or {})


def with_overrides(config: ScenarioConfig, assignments: list[str]) -> ScenarioConfig:
    """``config`` with ``SECTION.KEY=VALUE`` assignments applied (VALUE parsed as YAML), validated like a file:
    e.g. ``learner.repeat_decay=0.7`` or ``pool.exploration=fixed``. The name is kept."""
    data = config.to_dict()
    for item in assignments:
        key, sep, raw = item.partition("=")
        section, dot, name = key.strip().partition(".")
        if not sep or not dot or not name or section not in data or not isinstance(data[section], dict):
            raise ConfigError(f"override {item!r} is not SECTION.KEY=VALUE with SECTION one of "
                              f"{', '.join(k for k, v in data.items() if isinstance(v, dict))}")
        data[section][name] = yaml.safe_load(raw)
    return ScenarioConfig.from_dict(data)
