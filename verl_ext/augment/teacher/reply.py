"""Turning a teacher model's free-form reply into a ``Verdict``.

Chat models wrap JSON in code fences, prepend reasoning (``<think>`` blocks) or add prose, even in JSON mode.
We take the first JSON object found; anything unusable is a counted rejection ('malformed_json'), never an
exception, because a bad reply is the teacher's content problem, not a transport fault.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from verl_ext.augment.parser import clamp_difficulty
from verl_ext.augment.teacher.base import Verdict

REASON_MALFORMED_JSON = "malformed_json"
REASON_UNSOLVABLE = "unsolvable"
REASON_NO_ANSWER = "no_answer"
REASON_EMPTY_CLEAN = "empty_clean"
REASON_TOO_LONG = "too_long"
REASON_ANSWER_TOO_LONG = "answer_too_long"

MAX_REPLY_CHARS = 65_536
# raw_decode is tried at each '{' in turn; capping the attempts keeps a reply full of braces linear-ish.
_MAX_DECODE_ATTEMPTS = 64
_THINK_RE = re.compile(r"<think>.*?</think>", re.DOTALL)
_TRUE = {"true", "yes", "1"}
_FALSE = {"false", "no", "0"}


# A verdict is a flat object. Deeper nesting is refused before decoding: json's decoder recurses per level, and
# a RecursionError deep in the stack also breaks whatever finaliser the garbage collector runs at that moment.
MAX_JSON_DEPTH = 32


def _nesting_depth(text: str) -> int:
    """Deepest ``{``/``[`` nesting outside JSON strings (one linear pass)."""
    depth = deepest = 0
    in_string = escaped = False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "{[":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in "}]" and depth:
            depth -= 1
    return deepest


def extract_json_object(text: str) -> dict[str, Any] | None:
    """The first JSON object in ``text`` (fences, prose and think blocks tolerated), or None."""
    text = _THINK_RE.sub("", text[:MAX_REPLY_CHARS])
    if _nesting_depth(text) > MAX_JSON_DEPTH:
        return None
    decoder = json.JSONDecoder()
    start = text.find("{")
    attempts = 0
    while start != -1 and attempts < _MAX_DECODE_ATTEMPTS:
        attempts += 1
        try:
            obj, _ = decoder.raw_decode(text, start)
        except (json.JSONDecodeError, RecursionError):
            obj = None
        if isinstance(obj, dict):
            return obj
        start = text.find("{", start + 1)
    return None


def _as_bool(value: Any) -> bool | None:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE:
        return value.strip().lower() in _TRUE
    return None


def _as_answer(value: Any) -> str | None:
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float, str)):
        text = str(value).strip()
        return text or None
    return None


def _as_difficulty(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    try:
        f = float(value)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(f) else clamp_difficulty(f)


def verdict_from_reply(content: str, max_clean_chars: int, max_answer_chars: int | None = None) -> Verdict:
    """Map a reply ``{"clean", "solvable", "answer", "difficulty"}`` to a verdict.

    Accepted only when solvable, with a non-empty clean problem within ``max_clean_chars`` and a non-empty
    answer within ``max_answer_chars``: a "solvable" item without an answer is rejected ('no_answer') and an
    over-long answer ('answer_too_long': a rambling teacher must not bloat the pool and its checkpoints).
    """
    obj = extract_json_object(content) if isinstance(content, str) else None
    if obj is None:
        return Verdict.reject(REASON_MALFORMED_JSON)
    solvable = _as_bool(obj.get("solvable"))
    clean = obj.get("clean")
    if solvable is None or not isinstance(clean, (str, type(None))):
        return Verdict.reject(REASON_MALFORMED_JSON)
    if not solvable:
        return Verdict.reject(REASON_UNSOLVABLE)
    clean = (clean or "").strip()
    if not clean:
        return Verdict.reject(REASON_EMPTY_CLEAN, solvable=True)
    if len(clean) > max_clean_chars:
        return Verdict.reject(REASON_TOO_LONG, solvable=True)
    answer = _as_answer(obj.get("answer"))
    if answer is None:
        return Verdict.reject(REASON_NO_ANSWER, solvable=True)
    if max_answer_chars is not None and len(answer) > max_answer_chars:
        return Verdict.reject(REASON_ANSWER_TOO_LONG, solvable=True)
    return Verdict.accept(clean, answer, _as_difficulty(obj.get("difficulty")))
