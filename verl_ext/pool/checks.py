"""Argument checks shared by the pool's public methods.

They run before any state changes, so a rejected call leaves the pool untouched; messages name the offending
value (and the row, for bulk loads). Checks stay shallow: deep JSON validation of 10^6 prompts would cost more
than loading them.
"""

from __future__ import annotations

import operator
from collections.abc import Iterable
from typing import Any

import numpy as np


def check_payload(prompt: Any, answer: Any, data_source: Any, extra: Any, where: str = "") -> None:
    """Shallow JSON-safety checks on what a record stores (deep checks would cost too much at 10^6 rows)."""
    at = f" ({where})" if where else ""
    if not isinstance(prompt, str) and not (isinstance(prompt, list) and all(isinstance(m, dict) for m in prompt)):
        raise ValueError(f"prompt must be a string or a list of chat-message dicts{at}, got {type(prompt).__name__}")
    if not isinstance(answer, str):
        raise ValueError(f"answer must be a string{at}, got {type(answer).__name__}")
    if not isinstance(data_source, str):
        raise ValueError(f"data_source must be a string{at}, got {type(data_source).__name__}")
    if extra is not None and not isinstance(extra, dict):
        raise ValueError(f"extra must be a dict or None{at}, got {type(extra).__name__}")


def check_count(k: Any, name: str) -> int:
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 0:
        raise ValueError(f"{name} must be a non-negative int, got {k!r}")
    return int(k)


def check_outcome(rid: int, outcome: Any) -> tuple[int, int]:
    try:
        passes, n = (operator.index(x) for x in outcome)
    except (TypeError, ValueError):
        raise ValueError(f"feedback for record {rid}: expected (passes, n) ints, got {outcome!r}") from None
    if not (n >= 1 and 0 <= passes <= n):
        raise ValueError(f"feedback for record {rid}: need n >= 1 and 0 <= passes <= n, got ({passes}, {n})")
    return passes, n


def as_id(x: Any) -> int:
    """A record id as a plain int (numpy ints would leak into checkpoints and break JSON)."""
    if isinstance(x, bool):
        raise ValueError(f"record ids are ints, got {x!r}")
    try:
        return operator.index(x)
    except TypeError:
        raise ValueError(f"record ids are ints, got {x!r}") from None


def unique_ids(ids: Iterable[int], what: str) -> list[int]:
    out = [as_id(x) for x in ids]
    if len(set(out)) != len(out):
        raise ValueError(f"{what}: duplicate ids in {out if len(out) < 20 else '(long list)'}")
    return out
