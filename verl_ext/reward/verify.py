"""math-verify's judgement of two extracted answers; runs in a worker process's main thread (see ``worker``).

Both answers are parsed with math-verify's ``LatexExtractionConfig`` only: the answer has already been extracted,
so math-verify is asked to read it as LaTeX and nothing else (its ``ExprExtractionConfig`` would pick a stray
number out of words, e.g. the 2 of ``\\text{2-methylpropane}``). Its own unit stripping is off
(``normalize.clean`` removes units deliberately).

math-verify reads the whole answer or nothing: only its match of the whole (boxed) answer is tried
(``extraction_mode="first_match"``, no anchor-free patterns). With its default ``any_match`` an answer its LaTeX
parser rejects falls through to lower-priority patterns, which pick a fragment out of it: the last ``\\frac{2}{3}``
of ``-(\\frac{1}{3}E_{1}+\\frac{2}{3}E_{2})``, read as 2/3 and compared in place of the answer (issue 22).

Letters the parser reads as constants, ``E``/``e`` (Euler's number; with a subscript the parser fails) and ``I``
(the imaginary unit; it drops the subscript, so ``I_{1}`` = ``I_{2}`` = i), are names when they carry a
subscript: ``E_{1}`` is passed as ``\\mathrm{E}_{1}``, which the parser reads as the symbol ``e_1``, like
``A_{1}`` (``subscripted_names``).

math-verify's own timeouts (``parsing_timeout``, ``timeout_seconds``, i.e. ``signal.alarm``) are on: they work here
because this is a process's main thread, and they end most slow comparisons without losing the worker; the
parent's kill is the hard bound for the rest.

When both sides are single real numbers, the project's rule (``numbers.numbers_agree``) decides instead of
math-verify's float comparison, which rounds to a fixed number of decimal places (so ``0`` would equal
``2.88e-19``).
"""

from __future__ import annotations

import functools
import logging
import re
from fractions import Fraction
from typing import Any

from verl_ext.reward.normalize import clean, compact
from verl_ext.reward.numbers import DEFAULT_MIN_DIGITS, EXACT, IRRATIONAL, Number, numbers_agree, read_number

logger = logging.getLogger(__name__)

# math-verify rounds floats inside structured answers (tuples, sets, intervals) to this many decimal places.
FLOAT_ROUNDING = 10
IRRATIONAL_DIGITS = 50


# A command name (skipped whole, so the E of \\mathbbE or \\Theta is never touched) or a lone E, e or I followed by a
# subscript, possibly after a superscript (E^{2}_{1}).
_CONSTANT_LETTER_RE = re.compile(r"\\[A-Za-z]+|(?P<letter>[EeI])(?=\s*(?:\^\s*(?:\{[^{}]*\}|[^\s{}\\])\s*)?_)")


def _name_letter(m: re.Match[str]) -> str:
    letter = m.group("letter")
    return m.group(0) if letter is None else "\\mathrm{" + letter + "}"


def subscripted_names(answer: str) -> str:
    """``answer`` with each subscripted ``E``, ``e``, ``I`` written as ``\\mathrm{E}``: a name, not a constant."""
    return _CONSTANT_LETTER_RE.sub(_name_letter, answer)


class ComparisonTimeout(Exception):
    """math-verify's own time limit ended the comparison (the worker survives)."""


@functools.lru_cache(maxsize=1)
def _extraction_config() -> tuple[Any, ...]:
    from math_verify import LatexExtractionConfig
    from math_verify import LatexNormalizationConfig as NormalizationConfig

    normalization = NormalizationConfig(basic_latex=True, units=False, malformed_operators=True, nits=True,
                                        boxed="all", equations=False)
    return (LatexExtractionConfig(try_extract_without_anchor=False, boxed_match_priority=0,
                                  normalization_config=normalization),)


@functools.lru_cache(maxsize=4096)
def parse_answer(answer: str, timeout_s: int) -> Any:
    """What math-verify reads from the whole of ``answer`` as LaTeX: a sympy object, the string when its parser
    rejects the answer (never a fragment of it), or None. Cached: a ground truth repeats once per rollout of its
    prompt."""
    from math_verify import parse
    from math_verify.errors import TimeoutException

    try:
        found = parse("\\boxed{" + subscripted_names(answer) + "}", extraction_config=_extraction_config(),
                      fallback_mode="first_match", extraction_mode="first_match", parsing_timeout=timeout_s,
                      raise_on_error=True)
    except TimeoutException as exc:
        raise ComparisonTimeout(f"parsing took over {timeout_s} s") from exc
    return found[0] if found else None


def as_number(expr: Any, text: str, timeout_s: int) -> Number | None:
    """``expr`` as a ``Number`` when it is one real number: a literal keeps its written precision, an exact rational
    stays exact, a provably irrational value is carried to 50 digits; None otherwise (symbols, sets, floats mixed
    into expressions, complex values)."""
    literal = read_number(compact(text))
    if literal is not None:
        return literal
    from math_verify.utils import timeout

    return timeout(timeout_seconds=timeout_s)(_sympy_number)(expr)


def _sympy_number(expr: Any) -> Number | None:
    import sympy

    if not isinstance(expr, sympy.Expr) or expr.free_symbols or expr.has(sympy.Float):
        return None
    value = expr.doit()
    if not isinstance(value, sympy.Expr) or not value.is_number or value.is_real is not True:
        return None
    if value.is_Rational:
        return Number(Fraction(int(value.p), int(value.q)), EXACT)
    if value.is_rational is False:
        approx = value.evalf(IRRATIONAL_DIGITS)
        return Number(Fraction(str(approx)), IRRATIONAL)
    return None


def answers_equal(pred: str, gold: str, timeout_s: int = 1, min_digits: int = DEFAULT_MIN_DIGITS) -> tuple[bool, str]:
    """(equal, how) for two extracted answers; raises ``ComparisonTimeout`` when math-verify's timer fires.

    ``how`` is ``numeric`` (the project's number rule), ``math-verify``, ``unparsed`` or ``incomparable``
    (math-verify raised while comparing, which it treats as "not equal").
    """
    from math_verify import verify
    from math_verify.errors import TimeoutException

    pred_c, gold_c = clean(pred), clean(gold)
    gold_expr = parse_answer(gold_c, timeout_s)
    pred_expr = parse_answer(pred_c, timeout_s)
    if gold_expr is None or pred_expr is None:
        return False, "unparsed"
    try:  # the ground truth first: a symbolic one never needs the answer evaluated as a number
        gold_n = as_number(gold_expr, gold_c, timeout_s)
        pred_n = None if gold_n is None else as_number(pred_expr, pred_c, timeout_s)
    except TimeoutException as exc:
        raise ComparisonTimeout(f"numeric evaluation took over {timeout_s} s") from exc
    if gold_n is not None and pred_n is not None and not (gold_n.kind == pred_n.kind == IRRATIONAL):
        return numbers_agree(pred_n, gold_n, min_digits), "numeric"
    try:
        return bool(verify(gold_expr, pred_expr, float_rounding=FLOAT_ROUNDING, timeout_seconds=timeout_s,
                           raise_on_error=True)), "math-verify"
    except TimeoutException as exc:
        raise ComparisonTimeout(f"math-verify took over {timeout_s} s") from exc
    except Exception as exc:  # noqa: BLE001 - math-verify's own contract: a comparison that raises is "not equal"
        logger.debug("math-verify raised while comparing %r with %r: %r", pred[:80], gold[:80], exc)
        return False, "incomparable"
