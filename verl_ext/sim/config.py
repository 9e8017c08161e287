"""Scenario configuration of the simulator: dataclasses mirrored by the YAML files in ``scenarios/``.

One ``ScenarioConfig`` holds everything a run depends on except the strategy name and the seed, so a scenario
file fully documents a benchmark. Every dataclass validates in ``__post_init__`` and names the offending field;
``ScenarioConfig.from_dict`` rejects unknown keys at every level (a typo in a YAML file fails loudly instead of
silently using a default). The ``pool`` and ``lineage`` blocks are the real ``PoolConfig``/``LineageConfig``
fields; ``augment.parents`` holds the real ``AugmentConfig`` parent-selection fields.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from verl_ext.augment.config import AugmentConfig
from verl_ext.pool.config import PoolConfig
from verl_ext.pool.errors import ConfigError
from verl_ext.pool.lineage.config import LineageConfig


def _num(owner: str, name: str, value: Any, low: float = -math.inf, high: float = math.inf,
         low_open: bool = False) -> None:
    ok = not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value)
    if ok:
        ok = (value > low if low_open else value >= low) and value <= high
    if not ok:
        lo = "(" if low_open else "["
        raise ConfigError(f"{owner}.{name} must be a number in {lo}{low}, {high}], got {value!r}")


def _int(owner: str, name: str, value: Any, low: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ConfigError(f"{owner}.{name} must be an integer >= {low}, got {value!r}")


def _check_mixture(owner: str, name: str, comps: Any) -> list[dict[str, float]]:
    """A difficulty mixture: a non-empty list of ``{weight, mean, std}`` (logits, relative to ability 0)."""
    if not isinstance(comps, list) or not comps:
        raise ConfigError(f"{owner}.{name} must be a non-empty list of {{weight, mean, std}}, got {comps!r}")
    out = []
    for j, comp in enumerate(comps):
        where = f"{name}[{j}]"
        if not isinstance(comp, dict) or set(comp) != {"weight", "mean", "std"}:
            raise ConfigError(f"{owner}.{where} must have exactly the keys weight, mean, std; got {comp!r}")
        _num(owner, where + ".weight", comp["weight"], 0.0, low_open=True)
        _num(owner, where + ".mean", comp["mean"])
        _num(owner, where + ".std", comp["std"], 0.0)
        out.append({k: float(v) for k, v in comp.items()})
    return out


@dataclass
class PromptsConfig:
    """The data: ``n_train`` pool seeds, ``n_test`` held-out prompts (they define accuracy), ``n_topics`` topics
    (assigned uniformly), difficulties drawn from a normal mixture in logits (``test_difficulty``: None = the
    training mixture)."""

    n_train: int = 2000
    n_test: int = 500
    n_topics: int = 4
    difficulty: list = field(default_factory=lambda: [{"weight": 1.0, "mean": 0.5, "std": 1.5}])
    test_difficulty: list | None = None

    def __post_init__(self) -> None:
        for name in ("n_train", "n_test", "n_topics"):
            _int("prompts", name, getattr(self, name), 1)
        self.difficulty = _check_mixture("prompts", "difficulty", self.difficulty)
        if self.test_difficulty is not None:
            self.test_difficulty = _check_mixture("prompts", "test_difficulty", self.test_difficulty)


@dataclass
class LearnerConfig:
    """The synthetic policy. Solve probability of prompt i: ``sigmoid(discrimination * (ability[topic_i] +
    memo_i - difficulty_i))``. A step moves ``ability`` by ``learning_rate * mean over the batch of (group reward
    spread * topic share)``: only mixed groups count; ``transfer`` is the share of each group's gain spread over
    all topics (the rest goes to its own). ``item_learning_rate`` adds prompt-specific gain (memorisation, which
    the test set does not see); ``drift_std`` is a random walk of each topic's ability per step.
    ``repeat_decay`` (opt-in, 1 = off, every shipped scenario): a prompt's contribution to the ability update is
    multiplied by ``repeat_decay ** (times it was trained before)``: a diminishing return for re-training one
    prompt (what the policy could generalise from it, it has mostly taken), which the pool cannot observe.
    With 1 re-training a prompt teaches as much as a new one, so nothing rewards exploring the seed set.
    ``prompt_entropy_decay`` (opt-in, 0 = off, every shipped scenario): HIVE's probe reads ``(1 - decay) ** updates``
    times the binary entropy, the policy-wide fall of a real prompt entropy while it trains (the CPU comparison:
    1.3 -> 0.4 nats in 40 steps, about 0.03 a step), which a probe ranked against older measurements mistakes for
    certainty."""

    init_ability: float = 0.0
    discrimination: float = 1.0
    learning_rate: float = 0.012
    transfer: float = 0.5
    item_learning_rate: float = 0.2
    drift_std: float = 0.01
    repeat_decay: float = 1.0
    prompt_entropy_decay: float = 0.0

    def __post_init__(self) -> None:
        _num("learner", "init_ability", self.init_ability)
        _num("learner", "discrimination", self.discrimination, 0.0, low_open=True)
        _num("learner", "learning_rate", self.learning_rate, 0.0)
        _num("learner", "transfer", self.transfer, 0.0, 1.0)
        _num("learner", "item_learning_rate", self.item_learning_rate, 0.0)
        _num("learner", "drift_std", self.drift_std, 0.0)
        _num("learner", "repeat_decay", self.repeat_decay, 0.0, 1.0)
        _num("learner", "prompt_entropy_decay", self.prompt_entropy_decay, 0.0, 0.99)


@dataclass
class TrainConfig:
    """The loop: ``batch_size`` prompts x ``n`` rollouts per step, until ``budget_rollouts`` responses; accuracy
    is measured every ``eval_every`` steps; ``target_accuracy`` defines "rollouts to target"."""

    batch_size: int = 64
    n: int = 8
    budget_rollouts: int = 102_400
    target_accuracy: float = 0.6
    eval_every: int = 1

    def __post_init__(self) -> None:
        _int("train", "batch_size", self.batch_size, 1)
        _int("train", "n", self.n, 1)
        _int("train", "budget_rollouts", self.budget_rollouts, 1)
        _int("train", "eval_every", self.eval_every, 1)
        _num("train", "target_accuracy", self.target_accuracy, 0.0, 1.0)


@dataclass
class SimAugmentConfig:
    """On-policy augmentation as the simulator models it (used by the ``heapa`` strategies only).

    ``parents``: real ``AugmentConfig`` fields (``parent_selection``, ``band_low``, ``band_high``,
    ``num_parents``, ``num_per_prompt``). Each candidate child has difficulty ``parent + N(shift, std)``; the policy
    reports a difficulty factor ``clip(exp(report_scale * (delta + N(0, report_noise))), 0.75, 1.33)``. A share
    ``parse_fail_rate`` is rejected before the teacher; of the rest, ``invalid_rate`` are unsolvable, of which the
    teacher lets ``invalid_slip`` through; valid ones are accepted with ``teacher_accept``. Verdicts arrive
    ``delay_steps`` steps later (asynchronous validation)."""

    parents: dict = field(default_factory=lambda: {"parent_selection": "band", "band_low": 0.05,
                                                   "band_high": 0.95, "num_parents": 16, "num_per_prompt": 2})
    child_difficulty_shift: float = 0.0
    child_difficulty_std: float = 0.5
    report_scale: float = 0.3
    report_noise: float = 0.3
    parse_fail_rate: float = 0.1
    teacher_accept: float = 0.9
    invalid_rate: float = 0.1
    invalid_slip: float = 0.2
    delay_steps: int = 1

    def __post_init__(self) -> None:
        if not isinstance(self.parents, dict):
            raise ConfigError(f"augment.parents must be a mapping of AugmentConfig fields, got {self.parents!r}")
        allowed = {"parent_selection", "band_low", "band_high", "num_parents", "num_per_prompt"}
        unknown = set(self.parents) - allowed
        if unknown:
            raise ConfigError(f"augment.parents: unknown keys {sorted(unknown)}; known: {sorted(allowed)}")
        try:
            AugmentConfig(enabled=True, **self.parents)
        except ValueError as err:
            raise ConfigError(f"augment.parents: {err}") from None
        _num("augment", "child_difficulty_shift", self.child_difficulty_shift)
        for name in ("child_difficulty_std", "report_scale", "report_noise"):
            _num("augment", name, getattr(self, name), 0.0)
        for name in ("parse_fail_rate", "teacher_accept", "invalid_rate", "invalid_slip"):
            _num("augment", name, getattr(self, name), 0.0, 1.0)
        _int("augment", "delay_steps", self.delay_steps, 0)


_SECTIONS = {"prompts": PromptsConfig, "learner": LearnerConfig, "train": TrainConfig, "augment": SimAugmentConfig}


@dataclass
class ScenarioConfig:
    """A whole scenario. ``pool``/``lineage``: ``PoolConfig``/``LineageConfig`` fields (validated when a run builds
    them, and here); ``strategies``: per strategy name, keyword arguments for its constructor."""

    name: str = "custom"
    description: str = ""
    prompts: PromptsConfig = field(default_factory=PromptsConfig)
    learner: LearnerConfig = field(default_factory=LearnerConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    augment: SimAugmentConfig = field(default_factory=SimAugmentConfig)
    pool: dict = field(default_factory=lambda: {"max_pool_size": 3000})
    lineage: dict = field(default_factory=dict)
    strategies: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ConfigError(f"scenario name must be a non-empty string, got {self.name!r}")
        for key, cls in _SECTIONS.items():
            if not isinstance(getattr(self, key), cls):
                raise ConfigError(f"scenario.{key} must be a {cls.__name__}; use ScenarioConfig.from_dict for dicts")
        for key in ("pool", "lineage", "strategies"):
            if not isinstance(getattr(self, key), dict):
                raise ConfigError(f"scenario.{key} must be a mapping, got {getattr(self, key)!r}")
        pool = self.pool_config()  # validate now, not mid-benchmark
        self.lineage_config()
        for name, kwargs in self.strategies.items():
            if not isinstance(kwargs, dict):
                raise ConfigError(f"strategies.{name} must be a mapping of constructor arguments, got {kwargs!r}")
        if pool.max_pool_size < self.prompts.n_train:
            raise ConfigError(f"pool.max_pool_size ({pool.max_pool_size}) is below "
                              f"prompts.n_train ({self.prompts.n_train})")

    def pool_config(self, track_changes: bool = False, **overrides: Any) -> PoolConfig:
        """The scenario's ``PoolConfig``; ``overrides`` (a simulator strategy's ablation) replace its fields."""
        data = dict(self.pool)
        if "track_changes" in data:
            raise ConfigError("pool.track_changes is set by the simulator (on exactly when lineage runs)")
        return PoolConfig.from_dict({**data, **overrides, "track_changes": track_changes})

    def lineage_config(self) -> LineageConfig:
        try:
            return LineageConfig(**self.lineage)
        except TypeError as err:  # an unknown field name
            raise ConfigError(f"lineage: {err}") from None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "ScenarioConfig":
        """Build from plain data (a parsed YAML file); unknown keys at any level raise ``ConfigError``."""
        if not isinstance(data, dict):
            raise ConfigError(f"a scenario must be a mapping, got {type(data).__name__}")
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = set(data) - known
        if unknown:
            raise ConfigError(f"unknown scenario keys {sorted(unknown)}; known: {sorted(known)}")
        kwargs = dict(data)
        for key, section in _SECTIONS.items():
            if key in kwargs:
                kwargs[key] = _build_section(key, section, kwargs[key])
        return cls(**kwargs)


def _build_section(key: str, section: type, value: Any) -> Any:
    if not isinstance(value, dict):
        raise ConfigError(f"scenario.{key} must be a mapping, got {value!r}")
    fields_ = {f.name for f in dataclasses.fields(section)}
    unknown = set(value) - fields_
    if unknown:
        raise ConfigError(f"unknown {key} keys {sorted(unknown)}; known: {sorted(fields_)}")
    return section(**value)


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
