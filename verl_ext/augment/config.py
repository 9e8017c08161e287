"""Configuration of augmentation (what the policy is asked to write) and of the teacher (who validates it).

Dataclasses with paper defaults (spec §5) mirrored by the recipe's YAML; every field is a Hydra override.
``__post_init__`` validates and names the offending field, so a bad override fails at start-up, not mid-run.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from verl_ext.augment.protocol import (
    DEFAULT_FORMAT,
    DEFAULT_INSTRUCTION,
    DEFAULT_SHOTS,
    TAG_END,
    AugmentPrompt,
    Shot,
)

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


def _fail(owner: str, name: str, value: Any, why: str) -> None:
    raise ValueError(f"{owner}.{name}={value!r}: {why}")


def _shots_default() -> list[dict[str, Any]]:
    return [dataclasses.asdict(s) for s in DEFAULT_SHOTS]


@dataclass
class AugmentConfig:
    """What the policy is asked to write, for which parents, and the pre-teacher limits.

    ``parent_selection='band'`` keeps only parents whose pass rate lies in [band_low, band_high] (the frontier:
    all-solved or all-failed parents teach little). ``num_parents=0`` means no cap.
    """

    enabled: bool = False
    parent_selection: str = "all"
    band_low: float = 0.0
    band_high: float = 1.0
    num_parents: int = 0
    num_per_prompt: int = 1
    max_new_tokens: int = 256
    temperature: float = 1.0
    top_p: float = 1.0
    stop: list[str] = field(default_factory=lambda: [TAG_END])
    max_candidate_chars: int = 2000
    seen_capacity: int = 1_000_000
    instruction: str = DEFAULT_INSTRUCTION
    answer_format: str = DEFAULT_FORMAT
    shots: list[dict[str, Any]] = field(default_factory=_shots_default)

    def __post_init__(self) -> None:
        o = "AugmentConfig"
        if self.parent_selection not in PARENT_SELECTIONS:
            _fail(o, "parent_selection", self.parent_selection, f"must be one of {PARENT_SELECTIONS}")
        if not 0.0 <= self.band_low <= self.band_high <= 1.0:
            _fail(o, "band_low/band_high", (self.band_low, self.band_high), "need 0 <= band_low <= band_high <= 1")
        for name in ("num_per_prompt", "max_new_tokens", "max_candidate_chars", "seen_capacity"):
            if int(getattr(self, name)) <= 0:
                _fail(o, name, getattr(self, name), "must be > 0")
        if self.num_parents < 0:
            _fail(o, "num_parents", self.num_parents, "must be >= 0 (0 = no cap)")
        if self.temperature < 0.0:
            _fail(o, "temperature", self.temperature, "must be >= 0")
        if not 0.0 < self.top_p <= 1.0:
            _fail(o, "top_p", self.top_p, "must be in (0, 1]")
        if isinstance(self.stop, str) or not all(isinstance(s, str) and s for s in self.stop):
            _fail(o, "stop", self.stop, "must be a list of non-empty strings")
        self.stop = list(self.stop)
        self.prompt_spec()  # validates shots

    def prompt_spec(self) -> AugmentPrompt:
        """The ``AugmentPrompt`` these fields describe."""
        shots = []
        for i, s in enumerate(self.shots):
            try:
                shots.append(Shot(original=str(s["original"]), new=str(s["new"]), difficulty=float(s["difficulty"])))
            except (KeyError, TypeError, ValueError) as err:
                raise ValueError(
                    f"AugmentConfig.shots[{i}] needs 'original', 'new' and a numeric 'difficulty': {err}"
                ) from err
        return AugmentPrompt(instruction=self.instruction, answer_format=self.answer_format, shots=tuple(shots))

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> AugmentConfig:
        return cls(**_known_fields(cls, data))


@dataclass
class TeacherConfig:
    """The teacher backend and its transport limits.

    ``api_key_env`` holds the NAME of an environment variable with the key, never the key itself ('' = no key,
    e.g. a local vLLM server). ``concurrency`` is both the validator's worker count and the cap on simultaneous
    requests. ``prompt`` is the system message; the user message carries the original and the generation.
    """

    backend: str = "programmatic"
    base_url: str = "http://127.0.0.1:8000/v1"
    model: str = ""
    api_key_env: str = ""
    timeout_s: float = 60.0
    max_retries: int = 3
    backoff_s: float = 1.0
    max_backoff_s: float = 30.0
    concurrency: int = 8
    queue_capacity: int = 4096
    json_mode: bool = True
    temperature: float = 0.0
    max_tokens: int = 1024
    max_clean_chars: int = 4000
    latency_window: int = 1024
    prompt: str = DEFAULT_TEACHER_PROMPT

    def __post_init__(self) -> None:
        o = "TeacherConfig"
        if self.backend not in TEACHER_BACKENDS:
            _fail(o, "backend", self.backend, f"must be one of {TEACHER_BACKENDS}")
        if self.backend == "openai":
            if not self.model:
                _fail(o, "model", self.model, "required for backend 'openai'")
            if not self.base_url.startswith(("http://", "https://")):
                _fail(o, "base_url", self.base_url, "must start with http:// or https://")
        for name in ("timeout_s", "concurrency", "queue_capacity", "max_tokens", "max_clean_chars",
                     "latency_window"):
            if getattr(self, name) <= 0:
                _fail(o, name, getattr(self, name), "must be > 0")
        for name in ("max_retries", "backoff_s", "max_backoff_s", "temperature"):
            if getattr(self, name) < 0:
                _fail(o, name, getattr(self, name), "must be >= 0")
        if not self.prompt.strip():
            _fail(o, "prompt", self.prompt, "must not be empty")

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TeacherConfig:
        return cls(**_known_fields(cls, data))


def _known_fields(cls: type, data: Mapping[str, Any]) -> dict[str, Any]:
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - names)
    if unknown:
        raise ValueError(f"{cls.__name__}: unknown field(s) {unknown}; known: {sorted(names)}")
    return dict(data)


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
