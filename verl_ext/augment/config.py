"""Configuration of augmentation (what the policy is asked to write) and of the teacher (who validates it).

Dataclasses with paper defaults (spec §5) mirrored by the recipe's YAML; every field is a Hydra override.
``__post_init__`` first converts each field to its declared type (Hydra hands over strings and ints as typed on
the command line) and then validates; both name the offending field, so a bad override (``timeout_s=abc``) fails
at start-up with ``TeacherConfig.timeout_s='abc': must be a number``, not mid-run with a TypeError.
"""

from __future__ import annotations

import dataclasses
import math
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


def _to_number(owner: str, name: str, value: Any, kind: type) -> Any:
    if isinstance(value, bool):
        _fail(owner, name, value, f"must be {'an integer' if kind is int else 'a number'}, not a bool")
    try:
        number = float(value) if kind is float else int(value) if isinstance(value, (int, str)) else value
    except (TypeError, ValueError):
        number = None
    if isinstance(number, float) and math.isnan(number):
        number = None  # never a valid setting
    if kind is int and isinstance(number, float) and number.is_integer():
        number = int(number)
    if not isinstance(number, kind):
        _fail(owner, name, value, "must be an integer" if kind is int else "must be a number")
    return number


def _coerce_fields(obj: Any) -> None:
    """Convert each scalar field to its declared type (``float``, ``int``, ``bool``, ``str``, ``X | None``)."""
    owner = type(obj).__name__
    for f in dataclasses.fields(obj):
        kind = str(f.type)
        value = getattr(obj, f.name)
        optional = kind.endswith(" | None")
        kind = kind.removesuffix(" | None")
        if value is None and optional:
            continue
        if kind in ("float", "int"):
            value = _to_number(owner, f.name, value, float if kind == "float" else int)
        elif kind == "bool" and not isinstance(value, bool):
            _fail(owner, f.name, value, "must be true or false")
        elif kind == "str":
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                value = str(value)  # Hydra reads `model=7` as an int
            elif not isinstance(value, str):
                _fail(owner, f.name, value, "must be a string")
        elif kind.startswith("dict") and not isinstance(value, Mapping):
            _fail(owner, f.name, value, "must be a mapping")
        setattr(obj, f.name, value)


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
        _coerce_fields(self)
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

    backend: str = "programmatic"
    base_url: str = "http://127.0.0.1:8000/v1"
    model: str = ""
    api_key_env: str = ""
    timeout_s: float = 60.0
    max_retries: int = 3
    backoff_s: float = 1.0
    max_backoff_s: float = 30.0
    max_retry_after_s: float = 60.0
    concurrency: int = 8
    queue_capacity: int = 4096
    json_mode: bool = True
    temperature: float | None = None
    max_tokens: int | None = None
    extra_body: dict[str, Any] = field(default_factory=dict)
    max_clean_chars: int = 4000
    max_answer_chars: int = 512
    latency_window: int = 1024
    probe_timeout_s: float = 10.0
    prompt: str = DEFAULT_TEACHER_PROMPT

    def __post_init__(self) -> None:
        o = "TeacherConfig"
        _coerce_fields(self)
        if self.backend not in TEACHER_BACKENDS:
            _fail(o, "backend", self.backend, f"must be one of {TEACHER_BACKENDS}")
        if self.backend == "openai":
            if not self.model:
                _fail(o, "model", self.model, "required for backend 'openai' (set TEACHER_MODEL)")
            if not self.base_url.startswith(("http://", "https://")):
                _fail(o, "base_url", self.base_url, "must start with http:// or https://")
        for name in ("timeout_s", "concurrency", "queue_capacity", "max_clean_chars", "max_answer_chars",
                     "latency_window"):
            if getattr(self, name) <= 0:
                _fail(o, name, getattr(self, name), "must be > 0")
        for name in ("max_retries", "backoff_s", "max_backoff_s", "max_retry_after_s", "probe_timeout_s"):
            if getattr(self, name) < 0:
                _fail(o, name, getattr(self, name), "must be >= 0")
        if self.temperature is not None and self.temperature < 0:
            _fail(o, "temperature", self.temperature, "must be >= 0 (or null: not sent)")
        if self.max_tokens is not None and self.max_tokens <= 0:
            _fail(o, "max_tokens", self.max_tokens, "must be > 0 (or null: not sent)")
        self.extra_body = dict(self.extra_body)
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
