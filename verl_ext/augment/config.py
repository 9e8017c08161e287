"""Configuration of augmentation (what the policy is asked to write) and of the teacher (who validates it).

Dataclasses with paper defaults (spec §5) mirrored by the recipe's YAML; every field is a Hydra override.
Types and ranges are declared on the fields and checked by pydantic (``verl_ext.config_model``). The scalar fields
are the lax kind: a value typed on the command line is converted to the declared type (``"5"`` -> 5.0, ``7`` ->
``"7"``), never from a bool, so a bad override (``timeout_s=abc``) fails at start-up with
``teacher.timeout_s must be a number > 0, got 'abc'``, not mid-run with a TypeError.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Mapping, Sequence
from dataclasses import field
from typing import Annotated, Any, Literal

from pydantic import Field, field_validator, model_validator

from verl_ext.augment.protocol import (
    DEFAULT_FORMAT,
    DEFAULT_INSTRUCTION,
    DEFAULT_SHOTS,
    TAG_END,
    AugmentPrompt,
    Shot,
)
from verl_ext.config_model import Bool, Invalid, LaxFloat, LaxInt, LaxStr, config_dataclass, parse

PARENT_SELECTIONS = ("all", "band")
TEACHER_BACKENDS = ("programmatic", "openai")

DEFAULT_TEACHER_PROMPT = (
    "You check machine-written math problems. You get an ORIGINAL problem and a GENERATION that was meant to be "
    "a new problem similar to it. Extract one self-contained problem from the GENERATION (drop any solution, "
    "commentary or tags). Decide whether it is well-posed and solvable with a single definite final answer. "
    "If it is, solve it and give the final answer only (no working). Rate its difficulty relative to the "
    "ORIGINAL as a factor between 0.75 and 1.33 (above 1 means harder). Reply with one JSON object and nothing "
    'else: {"clean": string, "solvable": boolean, "answer": string, "difficulty": number}'
)


_Count = Annotated[LaxInt, Field(ge=1)]
_NonNegCount = Annotated[LaxInt, Field(ge=0)]
_Seconds = Annotated[LaxFloat, Field(ge=0.0)]
_Share = Annotated[LaxFloat, Field(ge=0.0, le=1.0)]


def _shots_default() -> list[dict[str, Any]]:
    return [dataclasses.asdict(s) for s in DEFAULT_SHOTS]


@config_dataclass(name="augmentation")
class AugmentConfig:
    """What the policy is asked to write, for which parents, and the pre-teacher limits.

    ``parent_selection='band'`` keeps only parents whose pass rate lies in [band_low, band_high] (the frontier:
    all-solved or all-failed parents teach little). ``num_parents=0`` means no cap.
    """

    enabled: Bool = False
    parent_selection: Literal[PARENT_SELECTIONS] = "all"
    band_low: _Share = 0.0
    band_high: _Share = 1.0
    num_parents: _NonNegCount = 0
    num_per_prompt: _Count = 1
    max_new_tokens: _Count = 256
    temperature: Annotated[LaxFloat, Field(ge=0.0)] = 1.0
    top_p: Annotated[LaxFloat, Field(gt=0.0, le=1.0)] = 1.0
    stop: list[Annotated[str, Field(min_length=1, strict=True)]] = field(default_factory=lambda: [TAG_END])
    max_candidate_chars: _Count = 2000
    seen_capacity: _Count = 1_000_000
    instruction: LaxStr = DEFAULT_INSTRUCTION
    answer_format: LaxStr = DEFAULT_FORMAT
    shots: list[dict[str, Any]] = field(default_factory=_shots_default)

    @model_validator(mode="after")
    def _consistent(self) -> "AugmentConfig":
        """The band must be a band, and the shots must make a prompt."""
        if self.band_low > self.band_high:
            raise Invalid(f"must be <= band_high ({self.band_high})", field="band_low", value=self.band_low)
        self.prompt_spec()
        return self

    def prompt_spec(self) -> AugmentPrompt:
        """The ``AugmentPrompt`` these fields describe."""
        shots = []
        for i, s in enumerate(self.shots):
            try:
                shots.append(Shot(original=str(s["original"]), new=str(s["new"]), difficulty=float(s["difficulty"])))
            except (KeyError, TypeError, ValueError) as err:
                raise Invalid(f"needs 'original', 'new' and a numeric 'difficulty': {err}", field=f"shots[{i}]",
                              value=s) from err
        return AugmentPrompt(instruction=self.instruction, answer_format=self.answer_format, shots=tuple(shots))

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> AugmentConfig:
        return parse(cls, data)


@config_dataclass(name="teacher")
class TeacherConfig:
    """The teacher backend and its transport limits.

    ``api_key_env`` holds the NAME of an environment variable with the key, never the key itself; when the
    variable is unset or '' requests go without a key (a local vLLM server needs none). ``timeout_s`` bounds each
    HTTP attempt in total (connect + send + the whole body), so a server that trickles bytes cannot hold a worker;
    ``max_retries`` more attempts follow timeouts, dropped or cut-off responses, 408/429 and 5xx, after an
    exponential backoff or the server's ``Retry-After`` (capped at ``max_retry_after_s``). ``temperature`` and
    ``max_tokens`` are sent only when set (hosted reasoning models reject them); ``extra_body`` adds any other
    request field (e.g. ``{max_completion_tokens: 2048}``). Verdicts whose clean problem exceeds
    ``max_clean_chars`` or whose answer exceeds ``max_answer_chars`` are rejected (counted). ``probe_timeout_s``:
    how long the recipe's start-up check waits for the server (0 = no check). ``concurrency`` is both the
    validator's worker count and the cap on simultaneous requests; ``prompt`` is the system message.
    """

    backend: Literal[TEACHER_BACKENDS] = "programmatic"
    base_url: LaxStr = "http://127.0.0.1:8000/v1"
    model: LaxStr = ""
    api_key_env: LaxStr = ""
    timeout_s: Annotated[LaxFloat, Field(gt=0.0)] = 60.0
    max_retries: _NonNegCount = 3
    backoff_s: _Seconds = 1.0
    max_backoff_s: _Seconds = 30.0
    max_retry_after_s: _Seconds = 60.0
    concurrency: _Count = 8
    queue_capacity: _Count = 4096
    json_mode: Bool = True
    temperature: Annotated[LaxFloat, Field(ge=0.0)] | None = None
    max_tokens: _Count | None = None
    extra_body: dict[str, Any] = field(default_factory=dict)
    max_clean_chars: _Count = 4000
    max_answer_chars: _Count = 512
    latency_window: _Count = 1024
    probe_timeout_s: _Seconds = 10.0
    prompt: LaxStr = DEFAULT_TEACHER_PROMPT

    @field_validator("prompt")
    @classmethod
    def _prompt_not_blank(cls, value: str) -> str:
        if not value.strip():
            raise Invalid("must not be empty")
        return value

    @model_validator(mode="after")
    def _openai_needs_a_server(self) -> "TeacherConfig":
        """An OpenAI-compatible teacher needs a model name and an http(s) URL."""
        if self.backend == "openai":
            if not self.model:
                raise Invalid("is required for backend 'openai' (set TEACHER_MODEL)", field="model")
            if not self.base_url.startswith(("http://", "https://")):
                raise Invalid("must start with http:// or https://", field="base_url", value=self.base_url)
        return self

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TeacherConfig:
        return parse(cls, data)


def select_parents(
    config: AugmentConfig,
    pass_rates: Mapping[Any, float | None],
    rng: random.Random,
) -> list[Any]:
    """Parent ids to augment this step, from the batch's ids and their latest pass rates.

    Band mode drops parents without a measured pass rate. The cap samples without replacement using the
    caller's (checkpointed) generator, so resume picks the same parents. Order follows ``pass_rates``.
    """
    ids: Sequence[Any] = list(pass_rates)
    if config.parent_selection == "band":
        ids = [i for i in ids if (p := pass_rates[i]) is not None and config.band_low <= p <= config.band_high]
    if config.num_parents and len(ids) > config.num_parents:
        keep = set(rng.sample(range(len(ids)), config.num_parents))
        ids = [x for j, x in enumerate(ids) if j in keep]
    return list(ids)
