"""The recipe's ``heapa:`` config block, validated once at start-up into the components' own dataclasses.

Bad values fail before Ray starts, with the offending key named (``heapa.pool.low_fraction: ...``).
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Any, Mapping

from verl_ext.adapters.rows import RowFormat
from verl_ext.ar3po import AR3POConfig
from verl_ext.augment import AugmentConfig, TeacherConfig
from verl_ext.pool import PoolConfig
from verl_ext.pool.lineage import LineageConfig
from verl_ext.selection import available_strategies, get_strategy_class

from .augmentation import parse_augment_config
from .run_control import RunSettings

PLATFORMS = ("gpu", "cpu")
_KNOWN = {"method", "platform", "seed", "rows", "pool", "selection", "lineage", "feedback", "augmentation",
          "teacher", "trace_file", "poll_interval_s", "ar3po", "hive", "run", "update"}


class HeapaConfigError(ValueError):
    """A bad value in the ``heapa:`` block; the message names the key."""


@dataclass
class FeedbackSettings:
    acc_field: str = "acc"
    pass_threshold: float = 0.5

    def __post_init__(self) -> None:
        if not 0.0 <= float(self.pass_threshold) < 1.0:
            raise HeapaConfigError(f"heapa.feedback.pass_threshold must be in [0, 1), got {self.pass_threshold}")


SEQUENCE_MEAN_OVER = ("all_rows", "signal_rows")


@dataclass
class UpdateSettings:
    """``heapa.update``: what the sequence-mean losses divide by (a study knob of issue "Faster learning per rollout").

    ``sequence_mean_over``: ``all_rows`` (verl's and GRPO's rule: every row of the update, so all-equal groups,
    whose advantage is zero, shrink every other row's step) or ``signal_rows`` (only rows with a non-zero advantage:
    the step no longer depends on how many all-equal groups a method trains). Only for the sequence-mean loss modes
    (``token-mean`` divides by the update's tokens in the engine).
    """

    sequence_mean_over: str = "all_rows"

    def __post_init__(self) -> None:
        if self.sequence_mean_over not in SEQUENCE_MEAN_OVER:
            raise HeapaConfigError(f"sequence_mean_over must be one of {SEQUENCE_MEAN_OVER}, got "
                                   f"{self.sequence_mean_over!r}")


@dataclass
class HiveSettings:
    """HIVE's online verification in the recipe (``heapa.hive``); used when ``heapa.selection.name=hive``.

    ``verify``: run the actor's prompt-entropy pass for HIVE's candidates (off = history-only selection).
    ``tail_tokens``: average the next-token entropy over the last N prompt positions (the last one is the policy's
    distribution over its first response token, the one before it the end of the assistant header); 0 = all
    positions, which measures how surprising the prompt text and template are rather than the answer. Default 2,
    chosen by ``scripts/hive_probe_study.py`` (figures in docs/hive.md).
    ``probe_max_tokens``: tokens per forward micro-batch per GPU of that pass, which runs beside the awake rollout
    servers (the memory arithmetic is in ``hive_verify.py``'s docstring).
    """

    verify: bool = True
    tail_tokens: int = 2
    probe_max_tokens: int = 4096

    def __post_init__(self) -> None:
        if not isinstance(self.verify, bool):
            raise HeapaConfigError(f"verify must be a bool, got {self.verify!r}")
        if isinstance(self.tail_tokens, bool) or not isinstance(self.tail_tokens, int) or self.tail_tokens < 0:
            raise HeapaConfigError(f"tail_tokens must be an integer >= 0, got {self.tail_tokens!r}")
        budget = self.probe_max_tokens
        if isinstance(budget, bool) or not isinstance(budget, int) or budget < 1:
            raise HeapaConfigError(f"probe_max_tokens must be an integer >= 1 (tokens per probe forward micro-batch "
                                   f"per GPU), got {self.probe_max_tokens!r}")


@dataclass
class HeapaSettings:
    """Everything the recipe reads from ``heapa:``, as the components' validated config objects."""

    method: str
    platform: str
    seed: int
    rows: RowFormat
    pool: PoolConfig
    selection_name: str
    selection_kwargs: dict[str, Any]
    lineage: LineageConfig
    feedback: FeedbackSettings
    augmentation: AugmentConfig = field(default_factory=AugmentConfig)
    teacher: TeacherConfig = field(default_factory=TeacherConfig)
    trace_file: str | None = None
    poll_interval_s: float | None = None
    ar3po: AR3POConfig = field(default_factory=AR3POConfig)
    hive: HiveSettings = field(default_factory=HiveSettings)
    run: RunSettings = field(default_factory=RunSettings)
    update: UpdateSettings = field(default_factory=UpdateSettings)


def _section(block: Mapping[str, Any], key: str, build):
    try:
        return build(dict(block.get(key) or {}))
    except (TypeError, ValueError) as exc:
        raise HeapaConfigError(f"heapa.{key}: {exc}") from exc


def _poll_interval(value: Any) -> float | None:
    if value is None:
        return None
    if float(value) <= 0:
        raise HeapaConfigError(f"heapa.poll_interval_s must be > 0 (or null for verl's 2 s), got {value}")
    return float(value)


def _ar3po(block: Mapping[str, Any]) -> AR3POConfig:
    try:
        return _section(block, "ar3po", AR3POConfig.from_dict)
    except HeapaConfigError as exc:
        if "max_per_prompt" not in str(exc):
            raise
        raise HeapaConfigError(f"{exc} (the ar3po presets set max_per_prompt to actor_rollout_ref.rollout.n: raise "
                               "rollout.n or lower heapa.ar3po.k1)") from exc


def parse_settings(block: Mapping[str, Any]) -> HeapaSettings:
    """Validate a plain-dict ``heapa`` block (``OmegaConf.to_container(cfg.heapa, resolve=True)``)."""
    unknown = set(block) - _KNOWN
    if unknown:
        raise HeapaConfigError(f"heapa: unknown keys {sorted(unknown)}; known: {sorted(_KNOWN)}")
    platform = str(block.get("platform", "gpu"))
    if platform not in PLATFORMS:
        raise HeapaConfigError(f"heapa.platform must be one of {PLATFORMS}, got {platform!r}")
    selection = dict(block.get("selection") or {})
    name = str(selection.get("name", "boundary"))
    if name not in available_strategies():
        raise HeapaConfigError(f"heapa.selection.name={name!r} is unknown; choose one of {available_strategies()}")
    kwargs = dict(selection.get("kwargs") or {})
    try:
        get_strategy_class(name)(**{k: v for k, v in kwargs.items()})
    except (TypeError, ValueError) as exc:
        raise HeapaConfigError(f"heapa.selection.kwargs for {name!r}: {exc}") from exc
    augmentation = _section(block, "augmentation", parse_augment_config)
    # The teacher is validated only when something will call it: a GRPO run needs no TEACHER_MODEL.
    teacher = _section(block, "teacher", TeacherConfig.from_dict) if augmentation.enabled else TeacherConfig()
    return HeapaSettings(
        method=str(block.get("method", "custom")),
        platform=platform,
        seed=int(block.get("seed", 0)),
        rows=_section(block, "rows", RowFormat.from_dict),
        pool=_section(block, "pool", PoolConfig.from_dict),
        selection_name=name,
        selection_kwargs=kwargs,
        lineage=_section(block, "lineage", lambda d: LineageConfig(**d)),
        feedback=_section(block, "feedback", lambda d: FeedbackSettings(**d)),
        augmentation=augmentation,
        teacher=teacher,
        trace_file=block.get("trace_file") or None,
        poll_interval_s=_poll_interval(block.get("poll_interval_s")),
        ar3po=_ar3po(block),
        hive=_section(block, "hive", lambda d: HiveSettings(**d)),
        run=_section(block, "run", RunSettings.from_dict),
        update=_section(block, "update", lambda d: UpdateSettings(**d)),
    )


def strategy_kwargs(name: str, user_kwargs: Mapping[str, Any], seed: int, **wiring: Any) -> dict[str, Any]:
    """Constructor arguments for strategy ``name``: the user's ``heapa.selection.kwargs``, plus ``heapa.seed`` when
    the class takes a ``seed`` the user did not set, plus the recipe's wiring (HIVE's ``prompt_entropy``) for the
    parameters the class declares. Without this every strategy ran on its default seed 0 whatever ``heapa.seed`` said.
    """
    params = inspect.signature(get_strategy_class(name)).parameters
    kwargs = dict(user_kwargs)
    if "seed" in params and "seed" not in kwargs:
        kwargs["seed"] = int(seed)
    for key, value in wiring.items():
        if key in params and value is not None and key not in kwargs:
            kwargs[key] = value
    return kwargs
