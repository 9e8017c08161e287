"""Configuration of AR3PO (arXiv 2509.25808): adaptive rollout in stages and reuse of earlier correct responses.

Dataclasses mirrored by the recipe's ``ar3po`` YAML; every field is a Hydra override (``heapa.ar3po.k_s=8``,
``heapa.ar3po.reuse.mode=append``). ``__post_init__`` validates and names the offending field so a bad override
fails at start-up, not in the middle of a rollout.

The paper text was not available when this was written. Values marked *unverified* are sensible defaults chosen
here, kept as knobs so that a user who has the paper can set them: the per-stage sizes, the per-prompt cap, the
success threshold, replace-versus-append, the staleness limit and the loss weight of reused samples.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

REUSE_MODES = ("replace", "append")
CORRECTIONS = ("tis", "none")


def _fail(owner: str, name: str, value: Any, why: str) -> None:
    raise ValueError(f"{owner}.{name}={value!r}: {why}")


def _check_int(owner: str, obj: Any, name: str, low: int) -> None:
    value = getattr(obj, name)
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        _fail(owner, name, value, f"must be an integer >= {low}")


def _known_fields(cls: type, data: Mapping[str, Any]) -> dict[str, Any]:
    if not isinstance(data, Mapping):
        raise ValueError(f"{cls.__name__}: expected a mapping, got {type(data).__name__}")
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - names)
    if unknown:
        raise ValueError(f"{cls.__name__}: unknown field(s) {unknown}; known: {sorted(names)}")
    return dict(data)


@dataclass
class ReuseConfig:
    """Response reuse: a bounded bank of earlier correct responses fills groups that stay all-wrong.

    - ``mode``: ``replace`` swaps one wrong response for the stored one (group size stays fixed, so batch shapes
      and GRPO's group sizes do not change); ``append`` adds it (one more sample). *Unverified*: default replace.
    - ``per_prompt``: correct responses kept per prompt (newest win). ``capacity``: responses kept in total; when
      full, the least recently used prompt is evicted whole (counted). 0 (the default) sizes it from the dataset:
      one prompt's ``per_prompt`` responses for every seed record, so a prompt's entry survives until its next
      visit. The bank is saved in the recipe's ``heapa_state.json`` at every checkpoint (token ids and rollout
      log-probs: ~15 bytes per response token); the recipe logs the bound at start.
    - ``max_age``: a stored response older than this many steps is not reused (0 = no limit). Default 64: at the
      paper's scale (17k prompts, 512 per step) a prompt returns every ~34 steps, so a tighter limit would disable
      reuse there; ``correction`` handles the policy gap within it.
    - ``correction``: ``none`` (default) treats the reused response as on-policy (ratio 1); ``tis`` multiplies each
      reused token's advantage by the truncated importance ratio ``min(is_cap, pi_now / pi_behaviour)`` (the
      behaviour log-probs are the ones stored with the response; needs ``rollout.calculate_log_probs``). Measured on
      the CPU trainer (docs/ar3po.md): the ratio of a reused success averages 1.10 (the policy has already been
      trained toward it), so ``tis`` up-weights what was learned, and it ended ~2 points lower on both seeds.
    - ``weight``: loss weight the adapter gives reused samples on top (1.0 = no extra weight). *Unverified* knob.
    - ``mark_field``: the per-sample batch field (bool) that marks reused samples, for metrics and loss weights.
    """

    enabled: bool = True
    mode: str = "replace"
    per_prompt: int = 1
    capacity: int = 0
    max_age: int = 64
    correction: str = "none"
    is_cap: float = 2.0
    weight: float = 1.0
    mark_field: str = "ar3po_reused"

    def __post_init__(self) -> None:
        o = "ReuseConfig"
        if not isinstance(self.enabled, bool):
            _fail(o, "enabled", self.enabled, "must be a bool")
        if self.mode not in REUSE_MODES:
            _fail(o, "mode", self.mode, f"must be one of {REUSE_MODES}")
        _check_int(o, self, "per_prompt", 1)
        _check_int(o, self, "capacity", 0)
        _check_int(o, self, "max_age", 0)
        if self.correction not in CORRECTIONS:
            _fail(o, "correction", self.correction, f"must be one of {CORRECTIONS}")
        if isinstance(self.is_cap, bool) or not isinstance(self.is_cap, (int, float)) or not (
            math.isfinite(self.is_cap) and self.is_cap > 0.0
        ):
            _fail(o, "is_cap", self.is_cap, "must be a finite number > 0")
        self.is_cap = float(self.is_cap)
        if self.capacity and self.capacity < self.per_prompt:
            _fail(o, "capacity", self.capacity, f"must be >= per_prompt ({self.per_prompt})")
        if isinstance(self.weight, bool) or not isinstance(self.weight, (int, float)) or not (
            math.isfinite(self.weight) and self.weight >= 0.0
        ):
            _fail(o, "weight", self.weight, "must be a finite number >= 0")
        self.weight = float(self.weight)
        if not isinstance(self.mark_field, str) or not self.mark_field.isidentifier():
            _fail(o, "mark_field", self.mark_field, "must be a non-empty identifier (it names a batch field)")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ReuseConfig:
        return cls(**_known_fields(cls, data))


@dataclass
class AR3POConfig:
    """Adaptive rollout: ``k1`` responses per prompt, then ``k_s`` more per stage for prompts still unsolved.

    A prompt stops as soon as one of its responses is correct (``acc > success_threshold``). Unsolved prompts get
    up to ``max_stages`` stages in all, never more than ``max_per_prompt`` responses (the last stage is trimmed to
    fit). With the defaults a prompt costs 4, 8, 12 or 16 responses: the ceiling equals GRPO's usual n=16, so an
    AR3PO run and a GRPO run with the same ceiling compare directly. All sizes are *unverified* knobs (the paper
    reports ~5.7 responses/prompt late in training).

    ``success_threshold``: rewards here are verl's per-trajectory ``acc`` (0/1 for math); 0.5 separates them
    without trusting float equality. Raise it for partial-credit rewards. *Unverified* knob.
    """

    enabled: bool = False
    k1: int = 4
    k_s: int = 4
    max_stages: int = 4
    max_per_prompt: int = 16
    success_threshold: float = 0.5
    reuse: ReuseConfig = field(default_factory=ReuseConfig)

    def __post_init__(self) -> None:
        o = "AR3POConfig"
        if not isinstance(self.enabled, bool):
            _fail(o, "enabled", self.enabled, "must be a bool")
        for name in ("k1", "k_s", "max_stages", "max_per_prompt"):
            _check_int(o, self, name, 1)
        if self.k1 > self.max_per_prompt:
            _fail(o, "k1", self.k1, f"must be <= max_per_prompt ({self.max_per_prompt})")
        t = self.success_threshold
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not math.isfinite(t):
            _fail(o, "success_threshold", t, "must be a finite number")
        self.success_threshold = float(t)
        if isinstance(self.reuse, Mapping):
            self.reuse = ReuseConfig.from_dict(self.reuse)
        if not isinstance(self.reuse, ReuseConfig):
            _fail(o, "reuse", self.reuse, "must be a ReuseConfig or a mapping of its fields")

    def max_responses(self) -> int:
        """Most responses any prompt can receive in one step (stages and cap together)."""
        return min(self.max_per_prompt, self.k1 + (self.max_stages - 1) * self.k_s)

    def stage_of(self, position: int) -> int:
        """Stage (1-based) that produces the response at 0-based ``position`` of a prompt's group.

        Stage 1 makes positions ``[0, k1)``, stage s > 1 makes ``[k1 + (s-2) k_s, k1 + (s-1) k_s)``; the cap only
        trims the last stage, so the formula holds for every group the planner allows.
        """
        if isinstance(position, bool) or not isinstance(position, int) or position < 0:
            raise ValueError(f"AR3POConfig.stage_of: position={position!r} must be an integer >= 0")
        return 1 if position < self.k1 else 2 + (position - self.k1) // self.k_s

    def is_correct(self, acc: float) -> bool:
        """Whether one response counts as correct (the stop rule and the bank both use this)."""
        return float(acc) > self.success_threshold

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> AR3POConfig:
        """Build from a plain dict (e.g. ``OmegaConf.to_container`` of the YAML); unknown keys are errors."""
        return cls(**_known_fields(cls, data))
