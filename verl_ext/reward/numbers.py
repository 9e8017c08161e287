"""Plain numbers written in an answer, read exactly, and the rule that decides whether two numbers agree.

``read_number`` understands integers (``1,234`` separators too), decimals, fractions (``\\frac{a}{b}``, ``\\frac34``,
``a/b``), mixed numbers (``1\\frac{4}{5}`` = 9/5) and scientific notation (``1.24e-8``, ``1.24\\times10^{-8}``,
``1.24\\cdot10^{-8}``, ``10^{-8}``), all as exact ``Fraction`` values. Inputs are compact strings (see
``normalize.compact``); digit runs and exponents are bounded, so reading costs microseconds whatever the input
and never builds a huge integer (``1e999999999`` is simply not a plain number here).

The rule (``numbers_agree``) is relative, never absolute, and respects how precisely each side was written:

- equal values always agree (``0.5`` = ``\\frac12``; ``11111111101`` != ``11111111100``);
- a ground truth in scientific notation with a decimal mantissa (``2.88e-19``) is a measurement stated to its
  significant figures: the answer must round to it at that precision and be at least as precise (``2.876e-19``
  agrees, ``2.9e-19``, ``0``, ``-2.88e-19`` and ``5.76e-19`` do not);
- a value no decimal can equal exactly (``1/3``, an irrational such as ``\\sqrt{2}``) agrees with a decimal answer
  that states at least ``min_digits`` significant digits and is that value correctly rounded
  (``0.333333`` for ``1/3``; ``0.333`` does not);
- a plain decimal ground truth (``0.33``) compared with such a value is a rounding of it: it agrees when the value
  rounds to the ground truth at the ground truth's precision.
Anything else must be equal.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fractions import Fraction

EXACT = "exact"  # integers, fractions, integer-mantissa powers of ten: no stated precision
DECIMAL = "decimal"  # a decimal with a fractional part, e.g. 0.15: exact value, but possibly a rounding
MEASURED = "measured"  # scientific notation with a decimal mantissa, e.g. 2.88e-19
IRRATIONAL = "irrational"  # an exact non-rational value (from math-verify), carried as a 50-digit Fraction

MAX_DIGITS = 400
MAX_EXPONENT = 400
DEFAULT_MIN_DIGITS = 6

_INT = r"(?:\d{1,3}(?:,\d{3})+|\d{1,400})"
_DEC = rf"(?:{_INT}\.\d{{0,400}}|\.\d{{1,400}})"
_MANT = rf"(?P<mant>{_DEC}|{_INT})"
_EXP = r"(?:[eE](?P<e1>[+-]?\d{1,4})|(?:\\times|\\cdot|\*|×)10\^(?:\{(?P<e2>[+-]?\d{1,4})\}|(?P<e3>\d)))"
_SCI_RE = re.compile(rf"{_MANT}{_EXP}?")
_POW10_RE = re.compile(r"10\^(?:\{(?P<e1>[+-]?\d{1,4})\}|(?P<e2>\d))")


def _frac_arg(name: str) -> str:
    """One argument of ``\\frac``: a braced signed literal or a single digit (``\\frac34``)."""
    return rf"(?:\{{(?P<{name}>[+-]?(?:{_DEC}|{_INT}))\}}|(?P<{name}s>\d))"


_FRAC_RE = re.compile(r"\\frac" + _frac_arg("num") + _frac_arg("den"))
_SLASH_RE = re.compile(rf"(?P<num>{_DEC}|{_INT})/(?P<den>{_DEC}|{_INT})")
_MIXED_RE = re.compile(r"(?P<whole>\d{1,400})(?P<frac>\\frac.*)")


@dataclass(frozen=True)
class Number:
    """An exactly read number and how precisely it was written."""

    value: Fraction
    kind: str = EXACT
    half_ulp: Fraction = Fraction(0)  # half a unit in the last written digit; 0 when exact
    sig_digits: int = 0  # significant digits written (decimals and measurements)

    @property
    def terminating(self) -> bool:
        """Whether a finite decimal can equal this value."""
        if self.kind == IRRATIONAL:
            return False
        den = self.value.denominator
        for p in (2, 5):
            while den % p == 0:
                den //= p
        return den == 1


def _unsigned(text: str) -> Number | None:
    m = _SCI_RE.fullmatch(text)
    if m is not None:
        return _scientific(m)
    m = _POW10_RE.fullmatch(text)
    if m is not None:
        exp = int(m.group("e1") or m.group("e2"))
        return Number(Fraction(10) ** exp) if abs(exp) <= MAX_EXPONENT else None
    m = _MIXED_RE.fullmatch(text)
    if m is not None and not m.group("frac").startswith("\\frac{-"):
        frac = _fraction(m.group("frac"))
        if frac is not None and frac.value.denominator != 1 and 0 < frac.value < 1:
            return Number(int(m.group("whole")) + frac.value)
        return None
    return _fraction(text)


def _scientific(m: re.Match[str]) -> Number | None:
    mant = m.group("mant").replace(",", "")
    exp_s = m.group("e1") or m.group("e2") or m.group("e3")
    exp = int(exp_s) if exp_s else 0
    if abs(exp) > MAX_EXPONENT:
        return None
    int_part, _, frac_part = mant.partition(".")
    value = Fraction(int(int_part or "0") * 10 ** len(frac_part) + int(frac_part or "0"), 10 ** len(frac_part))
    value *= Fraction(10) ** exp
    if "." not in mant or (not frac_part and exp_s is None):
        return Number(value)  # "12", "12." and "3e5" carry no stated precision
    digits = (int_part + frac_part).lstrip("0") or "0"
    half_ulp = Fraction(1, 2) * Fraction(10) ** (exp - len(frac_part))
    return Number(value, MEASURED if exp_s else DECIMAL, half_ulp, len(digits))


def _fraction(text: str) -> Number | None:
    m = _FRAC_RE.fullmatch(text)
    if m is not None:
        num_s, den_s = m.group("num") or m.group("nums"), m.group("den") or m.group("dens")
    else:
        m = _SLASH_RE.fullmatch(text)
        if m is None:
            return None
        num_s, den_s = m.group("num"), m.group("den")
    num, den = _plain(num_s), _plain(den_s)
    if num is None or den is None or den == 0:
        return None
    return Number(num / den)


def _plain(text: str) -> Fraction | None:
    sign = -1 if text.startswith("-") else 1
    m = _SCI_RE.fullmatch(text.lstrip("+-"))
    if m is None or m.group("e1") or m.group("e2") or m.group("e3"):
        return None
    n = _scientific(m)
    return None if n is None else sign * n.value


def read_number(text: str) -> Number | None:
    """The number a compact answer string states, or None when it is not a plain number (see module docstring)."""
    if not text or len(text) > 2 * MAX_DIGITS:
        return None
    sign = 1
    s = text
    if s[0] in "+-":
        sign = -1 if s[0] == "-" else 1
        s = s[1:]
    n = _unsigned(s)
    if n is None:
        return None
    return Number(sign * n.value, n.kind, n.half_ulp, n.sig_digits)


def numbers_agree(pred: Number, gold: Number, min_digits: int = DEFAULT_MIN_DIGITS) -> bool:
    """Whether ``pred`` states ``gold`` (the rule in the module docstring)."""
    if pred.kind != IRRATIONAL and gold.kind != IRRATIONAL and pred.value == gold.value:
        return True
    diff = abs(pred.value - gold.value)
    if gold.kind == MEASURED:
        return diff <= gold.half_ulp and pred.half_ulp <= gold.half_ulp
    if gold.kind == DECIMAL:
        return not pred.terminating and diff <= gold.half_ulp
    if not gold.terminating and pred.kind in (DECIMAL, MEASURED):
        return pred.sig_digits >= min_digits and diff <= pred.half_ulp
    return False
