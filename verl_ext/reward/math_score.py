"""Math answer scoring: extract the final answer, compare it with the ground truth, return verl's reward dict.

Comparison is layered so the common case is cheap and the rare case is safe:
1. a fast path: normalised string equality, then plain-number comparison (decides most integer answers without
   sympy at all; two plain numbers that differ are wrong without asking math-verify);
2. a guard that refuses inputs sympy could stall on (power towers, huge exponents, huge factorials/binomials,
   over-long strings) — those score 0;
3. math-verify (``parse``/``verify``) for everything else.

Time limits: math-verify's own timeouts use ``signal.alarm`` and raise in any thread but the main one. verl calls
``compute_score`` from an executor thread, so in other threads we pass ``parsing_timeout=None`` /
``timeout_seconds=None`` and rely on the guard (step 2); in the main thread math-verify's alarm is a second line of
defence. The guard is best effort against a crafted string; for a hard limit in any thread use
``verl_ext.reward.sandbox.MathVerifySandbox`` (``compute_score(..., sandbox=...)``).
"""

from __future__ import annotations

import functools
import logging
import math
import re
import threading
from typing import Any, Protocol

from verl_ext.reward.extract import ANSWER_LINE, BOXED, DEFAULT_MAX_CHARS, extract_answer

logger = logging.getLogger(__name__)

FORMATS = ("boxed", "dapo", "auto")
ORDERS = {"boxed": (BOXED,), "dapo": (ANSWER_LINE, BOXED), "auto": (BOXED, ANSWER_LINE)}
# Longest answer math-verify is asked to parse (MATH-500's longest ground truth has ~160 characters).
MAX_VERIFY_CHARS = 512
DEFAULT_TIMEOUT_S = 2

_THOUSANDS_RE = re.compile(r"^[-+]?\d{1,3}(,\d{3})+(\.\d*)?$")
_NUMBER_RE = re.compile(r"^[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$")
_TEXT_WRAP_RE = re.compile(r"\\(?:text|textbf|mathrm|mbox)\{([^{}]*)\}")
_SPACING_RE = re.compile(r"\\[,!;: ]|\\q?quad|~")
_DEGREE_RE = re.compile(r"\^\s*\{?\\circ\}?|°")
# Risky for sympy: an exponent that is itself a power or a number of >= 6 digits; factorial of a big number or of
# an expression with a power; binomials/products of huge numbers.
_POWER_RE = re.compile(r"\^|\*\*")
_CHAINED_POWER_RE = re.compile(r"(\^|\*\*)\s*\d+\s*(\^|\*\*)")
# A variable letter (not part of a LaTeX command name such as \frac).
_LETTER_RE = re.compile(r"(?<![\\a-zA-Z])[a-zA-Z]")
_OPEN_TO_CLOSE = {"(": ")", "{": "}", "[": "]"}
_BIG_EXPONENT_RE = re.compile(r"(\^|\*\*)\s*\{?\s*[-+]?\d{6,}")
_FACTORIAL_HEAVY_RE = re.compile(r"\^|\*\*|\d{5,}|!")
_CLOSE_TO_OPEN = {")": "(", "}": "{", "]": "["}
_BIG_INT_RE = re.compile(r"\d{7,}")
_HEAVY_OPS_RE = re.compile(r"\\binom|\\choose|\\prod|\\sum|\\operatorname|\\lcm|\\gcd|\\mathrm\{C\}")


class Verifier(Protocol):
    """Anything that decides ``pred`` == ``gold`` for the slow path (math-verify here, or a sandbox)."""

    def __call__(self, pred: str, gold: str) -> bool: ...


def normalise_answer(text: str) -> str:
    """A light canonical form for exact comparison; cosmetic LaTeX only, never changes the value."""
    s = text.strip()
    s = s.strip("$").strip()
    s = _TEXT_WRAP_RE.sub(r"\1", s)
    s = _SPACING_RE.sub("", s)
    s = _DEGREE_RE.sub("", s)
    s = s.replace("\\left", "").replace("\\right", "").replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac")
    s = s.replace("\\%", "").replace("%", "").replace("\\$", "")
    s = "".join(s.split())
    return s.rstrip(".")


def as_number(text: str) -> float | None:
    """The value of a plain decimal number (``1,000`` thousands separators allowed), else None."""
    s = text
    if _THOUSANDS_RE.match(s):
        s = s.replace(",", "")
    if not _NUMBER_RE.match(s):
        return None
    try:
        value = float(s)
    except (ValueError, OverflowError):
        return None
    return value if math.isfinite(value) else None


def fast_compare(pred: str, gold: str) -> bool | None:
    """True/False when cheap checks decide, None when math-verify must."""
    p, g = normalise_answer(pred), normalise_answer(gold)
    if not p:
        return False
    if p == g:
        return True
    pv, gv = as_number(p), as_number(g)
    if pv is not None and gv is not None:
        return math.isclose(pv, gv, rel_tol=1e-9, abs_tol=1e-12)
    return None


def is_risky(text: str) -> bool:
    """True when sympy might stall evaluating ``text`` (see module docstring); such answers score 0."""
    if len(text) > MAX_VERIFY_CHARS:
        return True
    if _has_power_tower(text):
        return True
    if _BIG_EXPONENT_RE.search(text) or _has_big_factorial(text):
        return True
    return bool(_BIG_INT_RE.search(text) and _HEAVY_OPS_RE.search(text))


def _has_power_tower(text: str) -> bool:
    """A numeric exponent that is itself a power (``2^{2^{100}}``, ``2**2**100``); ``e^{-x^2}`` is fine."""
    if _CHAINED_POWER_RE.search(text):
        return True
    for m in _POWER_RE.finditer(text):
        i = m.end()
        while i < len(text) and text[i].isspace():
            i += 1
        if i >= len(text) or text[i] not in _OPEN_TO_CLOSE:
            continue
        depth, j = 0, i
        for j in range(i, len(text)):
            if text[j] == text[i]:
                depth += 1
            elif text[j] == _OPEN_TO_CLOSE[text[i]]:
                depth -= 1
                if depth == 0:
                    break
        group = text[i + 1 : j]
        if _POWER_RE.search(group) and not _LETTER_RE.search(group):
            return True
    return False


def _factorial_operand(text: str, bang: int) -> str:
    """The operand of the ``!`` at ``bang``: the digit run or bracketed group just before it."""
    j = bang - 1
    while j >= 0 and text[j].isspace():
        j -= 1
    if j < 0:
        return ""
    close = text[j]
    if close in _CLOSE_TO_OPEN:
        depth = 0
        for k in range(j, -1, -1):
            if text[k] == close:
                depth += 1
            elif text[k] == _CLOSE_TO_OPEN[close]:
                depth -= 1
                if depth == 0:
                    return text[k : j + 1]
        return text[: j + 1]
    k = j
    while k >= 0 and text[k].isdigit():
        k -= 1
    return text[k + 1 : j + 1]


def _has_big_factorial(text: str) -> bool:
    """A factorial of a >= 5-digit number or of a group holding a power, a big number or another factorial."""
    start = 0
    while (bang := text.find("!", start)) != -1:
        start = bang + 1
        if bang > 0 and text[bang - 1] == "\\":
            continue  # "\!" is LaTeX spacing, not a factorial
        if _FACTORIAL_HEAVY_RE.search(_factorial_operand(text, bang)):
            return True
    return False


def _in_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


@functools.lru_cache(maxsize=8192)
def _parse_gold(gold: str, timeout: int | None) -> tuple[Any, ...]:
    # Gold answers repeat n times per prompt (n rollouts): cache their parse. sympy objects are immutable.
    from math_verify import parse

    return tuple(parse("\\boxed{" + gold + "}", parsing_timeout=timeout))


def math_verify_equal(pred: str, gold: str, timeout_s: int = DEFAULT_TIMEOUT_S) -> bool:
    """math-verify's judgement; signal timeouts only in the main thread (they raise elsewhere)."""
    from math_verify import parse, verify

    timeout = max(1, int(timeout_s)) if _in_main_thread() else None
    gold_parsed = _parse_gold(gold, timeout)
    if not gold_parsed:
        return False
    pred_parsed = parse("\\boxed{" + pred + "}", parsing_timeout=timeout)
    if not pred_parsed:
        return False
    return bool(verify(list(gold_parsed), pred_parsed, timeout_seconds=timeout))


def is_equivalent(pred: str, gold: str, *, verifier: Verifier | None = None) -> bool:
    """Whether ``pred`` matches ``gold``: fast path, guard, then ``verifier`` (math-verify by default)."""
    decided = fast_compare(pred, gold)
    if decided is not None:
        return decided
    if is_risky(pred) or is_risky(gold):
        logger.debug("answer refused by the sympy guard (len %d)", len(pred))
        return False
    if verifier is not None:
        return bool(verifier(pred, gold))
    return math_verify_equal(pred, gold)


def compute_score(
    data_source: str,
    solution_str: str,
    ground_truth: Any,
    extra_info: dict[str, Any] | None = None,
    *,
    format: str = "boxed",  # noqa: A002 - the name verl users set in reward_kwargs
    order: tuple[str, ...] | None = None,
    max_response_chars: int = DEFAULT_MAX_CHARS,
    sandbox: Verifier | None = None,
    **_verl_kwargs: Any,
) -> dict[str, Any]:
    """verl's ``compute_score``: ``{"score", "acc", "pred"}`` for one response.

    ``format='boxed'``: last ``\\boxed``/``\\fbox``, score 1/0. ``'dapo'``: ``Answer:`` line then box, score +1/-1
    (DAPO's reward). ``'auto'``: box then ``Answer:`` line, score 1/0. ``order`` overrides the extraction order.
    Extra keyword arguments verl passes (reward router address, tokenizer) are accepted and ignored.
    """
    if format not in FORMATS:
        raise ValueError(f"compute_score: format={format!r}, expected one of {FORMATS}")
    pred, _ = extract_answer(solution_str, order or ORDERS[format], max_chars=max_response_chars)
    gold = "" if ground_truth is None else str(ground_truth).strip()
    correct = bool(pred) and bool(gold) and is_equivalent(pred, gold, verifier=sandbox)
    wrong = -1.0 if format == "dapo" else 0.0  # DAPO's reward is +1/-1
    score = 1.0 if correct else wrong
    return {"score": score, "acc": float(correct), "pred": pred or ""}


def overlong_penalty(response_len: int, max_len: int, buffer_len: int, penalty_factor: float = 1.0) -> float:
    """DAPO's soft overlong punishment: 0 up to ``max_len - buffer_len``, then linear down to ``-penalty_factor``.

    Responses longer than ``max_len`` (should not happen when generation is capped) get the full penalty.
    """
    if buffer_len < 0 or max_len <= 0 or buffer_len > max_len:
        raise ValueError(f"overlong_penalty: need 0 <= buffer_len <= max_len, got buffer_len={buffer_len}, "
                         f"max_len={max_len}")
    expected = max_len - buffer_len
    exceed = response_len - expected
    if exceed <= 0 or buffer_len == 0:
        return 0.0 if exceed <= 0 else -float(penalty_factor)
    return -min(exceed / buffer_len, 1.0) * float(penalty_factor)
