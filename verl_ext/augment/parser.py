"""Candidate parsing: turn the policy's tagged generation into a ``Candidate`` or a ``Rejection``.

The policy answers an augmentation request (see ``protocol``) with ``<NEW> problem <DIFFICULTY> factor <END>``.
Generations are untrusted: they may be empty, truncated, repeat tags or contain none. The parser never raises;
every failure is a ``Rejection`` with a reason so the caller can count it (spec §5).
"""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass
from typing import Any

from verl_ext.augment.protocol import ALL_TAGS, DIFFICULTY_MAX, DIFFICULTY_MIN, TAG_DIFFICULTY, TAG_NEW

# Record ids are the pool's stable keys (spec §8: ids, never positions); JSON-safe scalars.
RecordId = int | str
DEFAULT_DIFFICULTY = 1.0
# Reasons a generation is rejected before any teacher call (shared with ``filters``).
REASON_UNPARSABLE = "unparsable"
REASON_EMPTY = "empty"

_FLOAT_RE = re.compile(r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?")
# Only this many characters after <DIFFICULTY> are searched for the factor: the number belongs right there.
_DIFFICULTY_WINDOW = 64


@dataclass(frozen=True)
class Candidate:
    """A parsed, not yet validated child problem.

    ``parent_text`` travels with the candidate because the teacher judges difficulty relative to the parent and
    the validator's queue must survive a checkpoint without access to the pool.
    """

    parent_id: RecordId
    text: str
    difficulty: float
    raw: str = ""
    parent_text: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Candidate:
        for name in ("parent_id", "text", "difficulty"):
            if name not in data:
                raise KeyError(f"Candidate state is missing field '{name}'")
        return cls(
            parent_id=data["parent_id"],
            text=str(data["text"]),
            difficulty=float(data["difficulty"]),
            raw=str(data.get("raw", "")),
            parent_text=str(data.get("parent_text", "")),
        )


@dataclass(frozen=True)
class Rejection:
    """Why a generation did not become a candidate."""

    parent_id: RecordId
    reason: str


def clamp_difficulty(value: float) -> float:
    """Clamp a factor to the protocol range; non-finite values fall back to the neutral 1.0."""
    if math.isnan(value):
        return DEFAULT_DIFFICULTY
    return min(DIFFICULTY_MAX, max(DIFFICULTY_MIN, value))


def _next_tag(text: str, start: int) -> int:
    """Index of the earliest protocol tag at or after ``start`` (len(text) if none)."""
    best = len(text)
    for tag in ALL_TAGS:
        idx = text.find(tag, start, best + len(tag))
        if idx != -1 and idx < best:
            best = idx
    return best


def parse_difficulty(text: str, start: int = 0, stop: int | None = None) -> float:
    """The first float after the first ``<DIFFICULTY>`` in ``text[start:stop]``, clamped; 1.0 when absent."""
    idx = text.find(TAG_DIFFICULTY, start, len(text) if stop is None else stop)
    if idx == -1:
        return DEFAULT_DIFFICULTY
    begin = idx + len(TAG_DIFFICULTY)
    window = text[begin : min(_next_tag(text, begin), begin + _DIFFICULTY_WINDOW)]
    m = _FLOAT_RE.search(window)
    if m is None:
        return DEFAULT_DIFFICULTY
    try:
        value = float(m.group(0))
    except (ValueError, OverflowError):
        return DEFAULT_DIFFICULTY
    return clamp_difficulty(value)


def _stop_at_next_new(raw: str, start: int) -> int:
    idx = raw.find(TAG_NEW, start)
    return len(raw) if idx == -1 else idx


def parse_candidate(raw: str, parent_id: RecordId, parent_text: str = "") -> Candidate | Rejection:
    """Parse one generation. The text is what follows the first ``<NEW>`` up to the next tag (or the end)."""
    if not isinstance(raw, str):
        return Rejection(parent_id, REASON_UNPARSABLE)
    idx = raw.find(TAG_NEW)
    if idx == -1:
        return Rejection(parent_id, REASON_UNPARSABLE)
    begin = idx + len(TAG_NEW)
    end = _next_tag(raw, begin)
    text = raw[begin:end].strip()
    if not text:
        return Rejection(parent_id, REASON_EMPTY)
    return Candidate(
        parent_id=parent_id,
        text=text,
        # The factor must belong to this problem: it is looked for before any later <NEW>.
        difficulty=parse_difficulty(raw, end, _stop_at_next_new(raw, end)),
        raw=raw,
        parent_text=parent_text,
    )
