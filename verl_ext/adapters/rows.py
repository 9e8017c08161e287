"""Seed rows from files: verl's RL row format or benchmark-style records, validated and made pool-ready.

Two layouts are read from parquet, json (an array or JSON lines) and jsonl files:

- **verl rows** (``RowFormat()``, the default): ``data_source``, ``prompt`` (chat messages), ``ability``,
  ``reward_model={"style": "rule", "ground_truth": ...}``, ``extra_info`` — what ``RLHFDataset`` reads.
- **benchmark rows** (``RowFormat(prompt_key="problem", answer_key="answer", ...)``): a question string and an
  answer field; the question becomes one user message, optionally followed by an instruction suffix.

``load_rows`` returns ``SeedRows`` whose lists feed ``QueryPool.add_seeds_bulk`` directly. Each record's ``extra``
keeps what the pool itself does not model (ability, the original ``extra_info``, any other column, non-default
``reward_model`` keys), so ``to_verl_row`` rebuilds the exact RL row. Bad rows raise ``RowError`` naming the file,
row and field, e.g. ``train.parquet row 17: field 'reward_model.ground_truth' missing``; every row is checked (an
invalid JSON line does not hide the others) and the first twenty errors are listed with the total. Repeated prompts
are reported or dropped per ``RowFormat.duplicates``.
"""

from __future__ import annotations

import logging
import math
import os
from bisect import bisect_right
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import Field

from verl_ext.adapters.row_files import BadLine, RowError, iter_file
from verl_ext.config_model import Str, config_dataclass, parse

logger = logging.getLogger(__name__)
MISSING = object()
_MAX_REPORTED = 20
DUPLICATE_POLICIES = ("warn", "error", "drop", "allow")
# Top-level keys the pool models itself (the rest of a row is kept as "columns").
_CORE_KEYS = ("data_source", "prompt", "ability", "reward_model", "extra_info")
DEFAULT_REWARD_MODEL = {"style": "rule"}


@config_dataclass(name="heapa.rows", frozen=True)
class RowFormat:
    """How to read a row.

    ``prompt_key``: the chat-message list (verl rows) or the question (benchmark rows; a string or messages).
    ``answer_key``: ``None`` = verl rows (answer at ``reward_model.ground_truth``); else the answer's field.
    ``data_source``: used where a row has none (benchmark rows default to the file's stem).
    ``instruction_suffix``: appended (after ``suffix_separator``) to the last user message of every prompt,
    e.g. ``"Let's think step by step and output the final answer within \\boxed{}."``.
    ``ability``: default for rows without one. ``extra_keys``: benchmark fields copied into ``extra_info``.
    ``duplicates``: rows whose prompt repeats an earlier row's (same roles and stripped contents): ``warn`` (log
    the count and the first rows; each copy stays its own record), ``error``, ``drop`` (keep the first) or ``allow``.
    """

    prompt_key: Annotated[Str, Field(min_length=1)] = "prompt"
    answer_key: Annotated[Str, Field(min_length=1)] | None = None
    data_source: Str | None = None
    instruction_suffix: Str = ""
    suffix_separator: Str = " "
    ability: Str = "math"
    extra_keys: tuple[Str, ...] = ()
    duplicates: Literal[DUPLICATE_POLICIES] = "warn"

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> "RowFormat":
        """Build from a plain mapping (Hydra/OmegaConf); unknown keys are errors naming ``heapa.rows``."""
        return parse(cls, dict(data or {}))

    @property
    def is_benchmark(self) -> bool:
        return self.answer_key is not None


@dataclass
class SeedRows:
    """Pool-ready columns, one entry per row (see ``QueryPool.add_seeds_bulk``)."""

    prompts: list[list[dict[str, Any]]] = field(default_factory=list)
    answers: list[str] = field(default_factory=list)
    data_sources: list[str] = field(default_factory=list)
    extras: list[dict[str, Any]] = field(default_factory=list)
    # (file, position of its first row here): names a row in messages; not carried through ``select``.
    spans: list[tuple[str, int]] = field(default_factory=list, repr=False)

    def __len__(self) -> int:
        return len(self.prompts)

    def append(self, prompt: list[dict], answer: str, data_source: str, extra: dict) -> None:
        self.prompts.append(prompt)
        self.answers.append(answer)
        self.data_sources.append(data_source)
        self.extras.append(extra)

    def select(self, indices: Sequence[int]) -> "SeedRows":
        """The rows at ``indices`` (in that order)."""
        idx = [int(i) for i in indices]
        return SeedRows([self.prompts[i] for i in idx], [self.answers[i] for i in idx],
                        [self.data_sources[i] for i in idx], [self.extras[i] for i in idx])

    def where(self, position: int) -> str:
        """``file row N`` of the row at ``position`` (N counts the file's rows, blank jsonl lines excluded)."""
        starts = [start for _, start in self.spans]
        i = bisect_right(starts, position) - 1
        return f"row {position}" if i < 0 else f"{self.spans[i][0]} row {position - starts[i]}"

    def pool_kwargs(self) -> dict[str, list]:
        """Keyword arguments for ``QueryPool.add_seeds_bulk``."""
        return {"prompts": self.prompts, "answers": self.answers, "data_sources": self.data_sources,
                "extras": self.extras}


def load_rows(paths: str | os.PathLike | Sequence[str | os.PathLike], fmt: RowFormat | None = None,
              limit: int | None = None) -> SeedRows:
    """Read and validate every row of ``paths`` (files are concatenated in order); ``limit`` caps the total.

    Raises ``RowError`` listing the first bad rows (file, row, field) and how many there were in all;
    ``FileNotFoundError`` / ``ValueError`` for a missing file or an unsupported extension. Repeated prompts are
    then handled per ``fmt.duplicates``.
    """
    fmt = fmt or RowFormat()
    files = [paths] if isinstance(paths, (str, os.PathLike)) else list(paths)
    if not files:
        raise ValueError("load_rows: no data files given")
    out, errors = SeedRows(), []
    for path in files:
        name = os.fspath(path)
        default_source = fmt.data_source or (Path(name).stem if fmt.is_benchmark else None)
        out.spans.append((name, len(out)))
        for where, row in iter_file(name):
            if limit is not None and len(out) >= limit:
                break
            try:
                if isinstance(row, BadLine):
                    raise _FieldError(row.message)
                out.append(*_parse_row(row, fmt, default_source))
            except _FieldError as err:
                errors.append(f"{name} {where}: {err}")
    if errors:
        raise RowError(_listing(f"{len(errors)} bad row(s)", errors))
    return _handle_duplicates(out, fmt.duplicates)


def _listing(head: str, items: list[str]) -> str:
    shown = "\n  ".join(items[:_MAX_REPORTED])
    more = f"\n  ... and {len(items) - _MAX_REPORTED} more" if len(items) > _MAX_REPORTED else ""
    return f"{head}:\n  {shown}{more}"


def duplicate_rows(rows: SeedRows) -> list[tuple[int, int]]:
    """``(position, position of the first row with the same prompt)`` for every repeat, in file order."""
    first: dict[int, list[int]] = {}  # hash of the prompt -> positions of distinct prompts with that hash
    out = []
    for i, prompt in enumerate(rows.prompts):
        key = _prompt_key(prompt)
        bucket = first.setdefault(hash(key), [])
        match = next((j for j in bucket if _prompt_key(rows.prompts[j]) == key), None)
        if match is None:
            bucket.append(i)
        else:
            out.append((i, match))
    return out


def _prompt_key(prompt: list[dict]) -> tuple:
    return tuple((m["role"], m["content"].strip()) for m in prompt)


def _handle_duplicates(rows: SeedRows, policy: str) -> SeedRows:
    if policy == "allow":
        return rows
    dups = duplicate_rows(rows)
    if not dups:
        return rows
    pairs = [f"{rows.where(i)} repeats {rows.where(j)}" for i, j in dups]
    head = f"{len(dups)} of {len(rows)} rows repeat an earlier row's prompt"
    if policy == "error":
        raise RowError(_listing(head + " (set heapa.rows.duplicates=warn|drop|allow to accept them)", pairs))
    if policy == "warn":
        logger.warning("%s; each copy becomes its own pool record (heapa.rows.duplicates=drop keeps the first, "
                       "=allow silences this):\n  %s", head, "\n  ".join(pairs[:5]))
        return rows
    repeated = {i for i, _ in dups}
    logger.info("%s: dropped (heapa.rows.duplicates=drop)", head)
    kept = rows.select([i for i in range(len(rows)) if i not in repeated])
    kept.spans = []  # positions changed: rows of the result are named by position only
    return kept


def to_verl_row(record_id: int, prompt: Any, answer: str, data_source: str, extra: Mapping | None) -> dict:
    """The RL row (as ``RLHFDataset`` reads it from a file) for a pool record; ``extra_info.index`` = its id."""
    extra = extra or {}
    messages = as_messages(prompt)
    extra_info = dict(extra.get("extra_info") or {})
    extra_info["index"] = record_id
    row = dict(extra.get("columns") or {})
    row.update(
        data_source=data_source,
        prompt=messages,
        ability=extra.get("ability", RowFormat.ability),
        reward_model={**(extra.get("reward_model") or DEFAULT_REWARD_MODEL), "ground_truth": answer},
        extra_info=extra_info,
    )
    return row


def child_extra(parent_extra: Mapping | None, **extra_info: Any) -> dict[str, Any]:
    """``extra`` for an augmented child (``QueryPool.add_child(extra=...)``): the parent's ability, extra columns
    (e.g. ``agent_name``) and ``reward_model`` style, with ``extra_info`` = the given keys only (a parent's
    per-problem fields such as ``tools_kwargs`` do not carry over)."""
    parent_extra = parent_extra or {}
    out: dict[str, Any] = {"ability": parent_extra.get("ability", RowFormat.ability),
                           "extra_info": {k: _json_safe(v, f"extra_info.{k}") for k, v in extra_info.items()}}
    for key in ("reward_model", "columns"):
        if parent_extra.get(key):
            out[key] = parent_extra[key]
    return out


def as_messages(prompt: Any) -> list[dict[str, Any]]:
    """A fresh chat-message list (a plain string becomes one user message); callers may mutate it."""
    if isinstance(prompt, str):
        return [{"role": "user", "content": prompt}]
    return [dict(m) for m in prompt]


# --------------------------------------------------------------------------------------------------- internals
class _FieldError(ValueError):
    """A problem with one field of one row (the caller adds file and row)."""


def _parse_row(row: Any, fmt: RowFormat, default_source: str | None) -> tuple[list[dict], str, str, dict]:
    if not isinstance(row, dict):
        raise _FieldError(f"expected an object, got {type(row).__name__}")
    if fmt.is_benchmark:
        return _parse_benchmark(row, fmt, default_source)
    return _parse_verl(row, fmt, default_source)


def _parse_verl(row: dict, fmt: RowFormat, default_source: str | None) -> tuple[list[dict], str, str, dict]:
    source = _data_source(row, default_source)
    prompt = _messages(row.get(fmt.prompt_key, MISSING), fmt.prompt_key, fmt)
    reward_model = row.get("reward_model", MISSING)
    if reward_model is MISSING or reward_model is None:
        raise _FieldError("field 'reward_model.ground_truth' missing")
    if not isinstance(reward_model, dict):
        raise _FieldError(f"field 'reward_model' must be an object, got {type(reward_model).__name__}")
    answer = _answer(reward_model.get("ground_truth", MISSING), "reward_model.ground_truth")
    extra: dict[str, Any] = {"ability": _ability(row, fmt), "extra_info": _extra_info(row)}
    rm_rest = {k: _json_safe(v, f"reward_model.{k}") for k, v in reward_model.items() if k != "ground_truth"}
    if rm_rest != DEFAULT_REWARD_MODEL:
        extra["reward_model"] = rm_rest
    columns = {k: _json_safe(v, k) for k, v in row.items() if k not in _CORE_KEYS and k != fmt.prompt_key}
    if columns:
        extra["columns"] = columns
    return prompt, answer, source, extra


def _parse_benchmark(row: dict, fmt: RowFormat, default_source: str | None) -> tuple[list[dict], str, str, dict]:
    source = _data_source(row, default_source)
    prompt = _messages(row.get(fmt.prompt_key, MISSING), fmt.prompt_key, fmt)
    answer = _answer(row.get(fmt.answer_key, MISSING), fmt.answer_key)
    extra_info = _extra_info(row)
    for key in fmt.extra_keys:
        if key in row:
            extra_info[key] = _json_safe(row[key], key)
    return prompt, answer, source, {"ability": _ability(row, fmt), "extra_info": extra_info}


def _data_source(row: dict, default: str | None) -> str:
    source = row.get("data_source")
    if source is None:
        if default is None:
            raise _FieldError("field 'data_source' missing (or set RowFormat.data_source)")
        return default
    if not isinstance(source, str) or not source:
        raise _FieldError(f"field 'data_source' must be a non-empty string, got {source!r}")
    return source


def _messages(value: Any, key: str, fmt: RowFormat) -> list[dict]:
    if value is MISSING or value is None:
        raise _FieldError(f"field '{key}' missing")
    if isinstance(value, str):
        if not fmt.is_benchmark:
            raise _FieldError(f"field '{key}' must be a list of chat messages, got a string (for question strings "
                              "set RowFormat.answer_key)")
        if not value.strip():
            raise _FieldError(f"field '{key}' is empty")
        messages = [{"role": "user", "content": value}]
    elif isinstance(value, (list, tuple, np.ndarray)):
        messages = []
        for j, msg in enumerate(value):
            if not isinstance(msg, dict):
                raise _FieldError(f"field '{key}[{j}]' must be a chat message object, got {type(msg).__name__}")
            role, content = msg.get("role"), msg.get("content")
            if not isinstance(role, str) or not role:
                raise _FieldError(f"field '{key}[{j}].role' missing or not a string")
            if not isinstance(content, str):
                raise _FieldError(f"field '{key}[{j}].content' must be a string (text-only prompts), got "
                                  f"{type(content).__name__}")
            if not content.strip():
                raise _FieldError(f"field '{key}[{j}].content' is empty or whitespace")
            messages.append({k: _json_safe(v, f"{key}[{j}].{k}") for k, v in msg.items()})
        if not messages:
            raise _FieldError(f"field '{key}' is an empty message list")
    else:
        raise _FieldError(f"field '{key}' must be a list of chat messages, got {type(value).__name__}")
    if not any(m["role"] == "user" for m in messages):
        raise _FieldError(f"field '{key}' has no user message (roles: {[m['role'] for m in messages]})")
    if fmt.instruction_suffix:
        _append_suffix(messages, fmt)
    return messages


def _append_suffix(messages: list[dict], fmt: RowFormat) -> None:
    user = next(m for m in reversed(messages) if m["role"] == "user")  # _messages checked there is one
    user["content"] = f"{user['content']}{fmt.suffix_separator}{fmt.instruction_suffix}"


def _answer(value: Any, key: str) -> str:
    if value is MISSING or value is None:
        raise _FieldError(f"field '{key}' missing")
    if isinstance(value, bool):
        raise _FieldError(f"field '{key}' must be a string or a number, got a bool")
    if isinstance(value, str):
        if not value.strip():
            raise _FieldError(f"field '{key}' is empty")
        return value
    if isinstance(value, (int, np.integer)):
        return str(int(value))
    if isinstance(value, (float, np.floating)):
        if not math.isfinite(value):
            raise _FieldError(f"field '{key}' is not finite: {value!r}")
        return str(int(value)) if float(value).is_integer() else repr(float(value))
    raise _FieldError(f"field '{key}' must be a string or a number, got {type(value).__name__}")


def _ability(row: dict, fmt: RowFormat) -> str:
    ability = row.get("ability")
    if ability is None:
        return fmt.ability
    if not isinstance(ability, str):
        raise _FieldError(f"field 'ability' must be a string, got {type(ability).__name__}")
    return ability


def _extra_info(row: dict) -> dict:
    info = row.get("extra_info")
    if info is None:
        return {}
    if not isinstance(info, dict):
        raise _FieldError(f"field 'extra_info' must be an object, got {type(info).__name__}")
    return {k: _json_safe(v, f"extra_info.{k}") for k, v in info.items()}


def _json_safe(value: Any, key: str) -> Any:
    """Plain JSON types (the pool checkpoints records as JSON-safe data); numpy scalars/arrays are converted."""
    if value is None or isinstance(value, (str, bool, int, float)):
        return value
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, dict):
        return {str(k): _json_safe(v, f"{key}.{k}") for k, v in value.items()}
    if isinstance(value, (list, tuple, np.ndarray)):
        return [_json_safe(v, f"{key}[{i}]") for i, v in enumerate(value)]
    raise _FieldError(f"field '{key}' has type {type(value).__name__}, which a checkpoint cannot store "
                      "(JSON types only)")
