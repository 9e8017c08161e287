"""The recipe's ``heapa:`` config block, validated once at start-up into typed objects.

``HeapaSettings`` mirrors the YAML block field for field and nests the components' own config dataclasses
(``PoolConfig``, ``LineageConfig``, ``AugmentConfig``, ...); pydantic (``verl_ext.config_model``) checks every type,
range and choice and rejects unknown keys at every level, so bad values fail before Ray starts with the full key
named (``heapa.pool.reinsertion.rate must be an integer >= 1 or null, got 0``).
"""

from __future__ import annotations

import dataclasses
import inspect
import logging
from dataclasses import field
from typing import Annotated, Any, Literal, Mapping

from pydantic import Field, field_validator, model_validator

from verl_ext.adapters.feedback import PASS_THRESHOLD
from verl_ext.adapters.rows import RowFormat
from verl_ext.allocation import AllocationConfig, RoundsConfig
from verl_ext.ar3po import AR3POConfig
from verl_ext.augment import AugmentConfig, TeacherConfig
from verl_ext.config_model import Bool, Float, Int, Invalid, NonNegInt, PositiveInt, Str, config_dataclass, parse
from verl_ext.pool import PoolConfig
from verl_ext.pool.config import FRONTIER_FIELDS
from verl_ext.pool.lineage import LineageConfig
from verl_ext.selection import available_strategies, get_strategy_class
from verl_ext.selection.registry import options_model, split_options, validate_options

from recipe.heapa.config_surface import apply_moved_keys, legacy_pool_options
from recipe.heapa.stages.augmentation import resolve_prompt_preset
from recipe.heapa.ops.preemption import RunSettings

logger = logging.getLogger(__name__)

PLATFORMS = ("gpu", "cpu")
SEQUENCE_MEAN_OVER = ("all_rows", "signal_rows")


class HeapaConfigError(ValueError):
    """A bad value in the ``heapa:`` block; the message names the key."""


@config_dataclass(name="heapa.feedback", error=HeapaConfigError)
class FeedbackSettings:
    """``heapa.feedback``: which reward field holds correctness, and above what value a response passes."""

    acc_field: Str = "acc"
    pass_threshold: Annotated[Float, Field(ge=0.0, lt=1.0)] = PASS_THRESHOLD


@config_dataclass(name="heapa.update", error=HeapaConfigError)
class UpdateSettings:
    """``heapa.update``: what the sequence-mean losses divide by (a study knob).

    ``sequence_mean_over``: ``all_rows`` (verl's and GRPO's rule: every row of the update, so all-equal groups,
    whose advantage is zero, shrink every other row's step) or ``signal_rows`` (only rows with a non-zero advantage:
    the step does not depend on how many all-equal groups a method trains). Only for the sequence-mean loss modes
    (``token-mean`` divides by the update's tokens in the engine).
    """

    sequence_mean_over: Literal[SEQUENCE_MEAN_OVER] = "all_rows"


@config_dataclass(name="heapa.hive", error=HeapaConfigError)
class HiveSettings:
    """HIVE's online verification in the recipe (``heapa.hive``); used when ``heapa.selection.name=hive``.

    ``verify``: run the actor's prompt-entropy pass for HIVE's candidates (off = history-only selection).
    ``tail_tokens``: average the next-token entropy over the last N prompt positions (the last one is the policy's
    distribution over its first response token, the one before it the end of the assistant header); 0 = all
    positions, which measures how surprising the prompt text and template are rather than the answer. Default 2,
    chosen by ``scripts/hive_probe_study.py`` (figures in docs/hive.md).
    ``probe_max_tokens``: tokens per forward micro-batch per GPU of that pass, which runs beside the awake rollout
    servers (the memory arithmetic is in ``stages/hive_verify.py``'s docstring).
    """

    verify: Bool = True
    tail_tokens: NonNegInt = 2
    probe_max_tokens: PositiveInt = 4096


@config_dataclass(name="heapa.selection", error=HeapaConfigError)
class SelectionSettings:
    """``heapa.selection``: the strategy by registry name and its constructor options (``kwargs``), which
    ``parse_settings`` checks against that strategy's own options model once the name is known."""

    name: Str = "boundary"
    kwargs: dict[str, Any] = field(default_factory=dict)

    @field_validator("name")
    @classmethod
    def _registered(cls, name: str) -> str:
        if name not in available_strategies():
            raise Invalid(f"is unknown; choose one of {available_strategies()}")
        return name


@config_dataclass(name="heapa", error=HeapaConfigError)
class HeapaSettings:
    """Everything the recipe reads from ``heapa:``: the YAML block, validated, as the components' config objects.

    The teacher is validated only when augmentation is on (something will call it): a GRPO run needs no
    ``TEACHER_MODEL``. ``augmentation.prompt_preset`` is resolved into the prompt fields it stands for.
    """

    method: Str = "custom"
    platform: Literal[PLATFORMS] = "gpu"
    seed: Int = 0
    rows: RowFormat = field(default_factory=RowFormat)
    pool: PoolConfig = field(default_factory=PoolConfig)
    selection: SelectionSettings = field(default_factory=SelectionSettings)
    lineage: LineageConfig = field(default_factory=LineageConfig)
    feedback: FeedbackSettings = field(default_factory=FeedbackSettings)
    augmentation: AugmentConfig = field(default_factory=AugmentConfig)
    teacher: TeacherConfig = field(default_factory=TeacherConfig)
    trace_file: Str | None = None
    poll_interval_s: Annotated[Float, Field(gt=0.0)] | None = None
    ar3po: AR3POConfig = field(default_factory=AR3POConfig)
    reinforce_ada: RoundsConfig = field(default_factory=RoundsConfig)
    allocation: AllocationConfig = field(default_factory=AllocationConfig)
    hive: HiveSettings = field(default_factory=HiveSettings)
    run: RunSettings = field(default_factory=RunSettings)
    update: UpdateSettings = field(default_factory=UpdateSettings)

    @field_validator("augmentation", mode="before")
    @classmethod
    def _prompt_preset(cls, value: Any) -> Any:
        return resolve_prompt_preset(value) if isinstance(value, Mapping) else value

    @field_validator("teacher", mode="before")
    @classmethod
    def _teacher_when_used(cls, value: Any, info: Any) -> Any:
        augmentation = info.data.get("augmentation")
        return value if augmentation is not None and augmentation.enabled else TeacherConfig()

    @field_validator("trace_file", mode="before")
    @classmethod
    def _empty_is_none(cls, value: Any) -> Any:
        return value or None

    @model_validator(mode="after")
    def _one_staged_rollout(self) -> "HeapaSettings":
        if self.ar3po.enabled and self.reinforce_ada.enabled:
            raise Invalid("cannot be on with heapa.ar3po.enabled: each rolls a prompt out by its own rule; pick one",
                          field="reinforce_ada.enabled", value=True)
        staged = "heapa.ar3po.enabled" if self.ar3po.enabled else "heapa.reinforce_ada.enabled"
        if self.allocation.enabled and (self.ar3po.enabled or self.reinforce_ada.enabled):
            raise Invalid(f"cannot be on with {staged}: that rollout decides each prompt's responses by its own "
                          "rule; pick one", field="allocation.enabled", value=True)
        return self

    @property
    def selection_name(self) -> str:
        return self.selection.name

    @property
    def selection_kwargs(self) -> dict[str, Any]:
        return self.selection.kwargs


_AR3PO_HINT = (" (the ar3po presets set max_per_prompt to actor_rollout_ref.rollout.n: raise rollout.n or lower "
               "heapa.ar3po.k1)")


def parse_settings(block: Mapping[str, Any]) -> HeapaSettings:
    """Validate a plain-dict ``heapa`` block (``OmegaConf.to_container(cfg.heapa, resolve=True)``), once."""
    block = apply_moved_keys(block)
    try:
        settings = parse(HeapaSettings, {k: v for k, v in block.items() if v is not None or k not in _NULL_IS_DEFAULT})
    except HeapaConfigError as exc:
        if "heapa.ar3po.k1" in str(exc) and "max_per_prompt" in str(exc):
            raise HeapaConfigError(f"{exc}{_AR3PO_HINT}") from None
        raise
    name = settings.selection.name
    try:
        settings.selection.kwargs = validate_options(name, settings.selection.kwargs, prefix="heapa.selection.kwargs")
    except ValueError as exc:
        raise HeapaConfigError(f"{exc}{_kwargs_hint(name, settings.selection.kwargs)}") from None
    constructor, pool_options = split_options(name, settings.selection.kwargs)
    for key, old in legacy_pool_options(block).items():  # an old command line means what it meant: it wins
        if key in pool_options and pool_options[key] != old:
            logger.warning("heapa.pool.%s=%r (deprecated) overrides heapa.selection.kwargs.%s=%r", key, old, key,
                           pool_options[key])
        pool_options.pop(key, None)
    settings.pool = dataclasses.replace(settings.pool, **pool_options)
    try:  # built once, so a rule that spans options (greso: hard_threshold below easy_threshold) fails here too
        get_strategy_class(name)(**constructor)
    except (TypeError, ValueError) as exc:
        raise HeapaConfigError(f"heapa.selection.kwargs for {name!r}: {exc}") from exc
    return settings


def _kwargs_hint(name: str, kwargs: Mapping[str, Any]) -> str:
    # A preset's frontier options left behind when the command line switches the strategy away from boundary.
    stray = sorted(set(kwargs) & set(FRONTIER_FIELDS) - set(options_model(get_strategy_class(name)).model_fields))
    if not stray:
        return ""
    removals = " ".join(f"~heapa.selection.kwargs.{key}" for key in stray)
    return f" ({stray} are the boundary strategy's options, e.g. from a heapa_* preset: remove them with {removals})"


# Sections that YAML may leave empty (``pool:`` with nothing under it): null means "all defaults", as before.
_NULL_IS_DEFAULT = {"rows", "pool", "selection", "lineage", "feedback", "augmentation", "teacher", "ar3po",
                    "reinforce_ada", "allocation", "hive", "run", "update"}


def strategy_kwargs(name: str, user_kwargs: Mapping[str, Any], seed: int, **wiring: Any) -> dict[str, Any]:
    """Constructor arguments for strategy ``name``: the user's ``heapa.selection.kwargs``, plus ``heapa.seed`` when
    the class takes a ``seed`` the user did not set, plus the recipe's wiring (HIVE's ``prompt_entropy``) for the
    parameters the class declares. So every strategy follows ``heapa.seed`` unless its own ``seed`` is set.
    """
    params = inspect.signature(get_strategy_class(name)).parameters
    kwargs, _ = split_options(name, user_kwargs)  # the pool's options went to its config in parse_settings
    if "seed" in params and "seed" not in kwargs:
        kwargs["seed"] = int(seed)
    for key, value in wiring.items():
        if key in params and value is not None and key not in kwargs:
            kwargs[key] = value
    return kwargs
