"""Configuration of AR3PO (arXiv 2509.25808): adaptive rollout in stages and reuse of earlier correct responses.

Dataclasses mirrored by the recipe's ``ar3po`` YAML; every field is a Hydra override (``heapa.ar3po.k_s=8``,
``heapa.ar3po.reuse.mode=append``). Types and ranges are declared on the fields and checked by pydantic
(``verl_ext.config_model``); errors name the key (``ar3po.reuse.per_prompt``) so a bad override fails at start-up,
not in the middle of a rollout.

The paper text was not available when this was written. Values marked *unverified* are sensible defaults chosen
here, kept as knobs so that a user who has the paper can set them: the per-stage sizes, the per-prompt cap, the
success threshold, replace-versus-append, the staleness limit and the loss weight of reused samples.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import field
from typing import Annotated, Any, Literal

from pydantic import Field, field_validator, model_validator

from verl_ext.config_model import Bool, Float, Invalid, NonNegInt, PositiveInt, Str, config_dataclass, parse

REUSE_MODES = ("replace", "append")
EXTEND_RULES = ("unsolved", "mixed", "measured")
CORRECTIONS = ("tis", "none")


@config_dataclass(name="ar3po.reuse")
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

    enabled: Bool = True
    mode: Literal[REUSE_MODES] = "replace"
    per_prompt: PositiveInt = 1
    capacity: NonNegInt = 0
    max_age: NonNegInt = 64
    correction: Literal[CORRECTIONS] = "none"
    is_cap: Annotated[Float, Field(gt=0.0)] = 2.0
    weight: Annotated[Float, Field(ge=0.0)] = 1.0
    mark_field: Str = "ar3po_reused"

    @field_validator("mark_field")
    @classmethod
    def _identifier(cls, value: str) -> str:
        if not value.isidentifier():
            raise Invalid("must be a non-empty identifier (it names a batch field)")
        return value

    @model_validator(mode="after")
    def _capacity_holds_a_prompt(self) -> "ReuseConfig":
        if self.capacity and self.capacity < self.per_prompt:
            raise Invalid(f"must be >= per_prompt ({self.per_prompt})", field="capacity", value=self.capacity)
        return self

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ReuseConfig:
        return parse(cls, data)


@config_dataclass(name="ar3po")
class AR3POConfig:
    """Adaptive rollout: ``k1`` responses per prompt, then ``k_s`` more per stage for the prompts ``extend`` picks.

    A response is correct when ``acc > success_threshold``. Extended prompts get up to ``max_stages`` stages in
    all, never more than ``max_per_prompt`` responses (the last stage is trimmed to fit). With the defaults a
    prompt costs 4 (its first stage was all correct or all wrong) or 16 (``mixed``; under ``unsolved``: 4, 8, 12
    or 16): the ceiling equals GRPO's usual n=16, so an
    AR3PO run and a GRPO run with the same ceiling compare directly. All sizes are *unverified* knobs (the paper
    reports ~5.7 responses/prompt late in training).

    ``extend``: which prompts the later stages go to. ``mixed`` (the default): prompts whose group already has both
    a correct and a wrong response, filled up to the ceiling; a group that is all correct or all wrong after stage
    1 stops there (an all-wrong one can still get a banked success by reuse). ``unsolved`` (the paper's rule):
    prompts with no correct response yet, so a hard prompt gets more chances. Why ``mixed`` is the default
    (measured, docs/ar3po.md): on the CPU comparison, a single pass over a hard dataset, ``unsolved`` spent the
    later stages on prompts that stayed all wrong and ended 2 points below GRPO at equal rollouts (0.26 of its rows
    with a non-zero advantage against GRPO's 0.47), while ``mixed`` keeps 0.52 and shows no loss. ``measured``:
    ``unsolved`` for the prompts the caller names as measured (HeaPA's pool has a pass rate for them, so an
    all-wrong first stage is more likely bad luck than a hopeless prompt) and ``mixed`` for the rest (a prompt
    drawn blind); without a pool every prompt is unmeasured and it is ``mixed``.

    ``success_threshold``: rewards here are verl's per-trajectory ``acc`` (0/1 for math); 0.5 separates them
    without trusting float equality. Raise it for partial-credit rewards. *Unverified* knob.
    """

    enabled: Bool = False
    k1: PositiveInt = 4
    k_s: PositiveInt = 4
    max_stages: PositiveInt = 4
    max_per_prompt: PositiveInt = 16
    success_threshold: Float = 0.5
    extend: Literal[EXTEND_RULES] = "mixed"
    reuse: ReuseConfig = field(default_factory=ReuseConfig)

    @model_validator(mode="after")
    def _first_stage_fits(self) -> "AR3POConfig":
        if self.k1 > self.max_per_prompt:
            raise Invalid(f"must be <= max_per_prompt ({self.max_per_prompt})", field="k1", value=self.k1)
        return self

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
        return parse(cls, data)
