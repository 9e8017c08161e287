"""Mechanically generated answer variants for measuring the scorer (``python -m verl_ext.bench.reward``).

From a ground truth: ``renderings`` (the same value written differently: ``\\dfrac``, ``a/b``, an exact decimal,
swapped ``a+b``, spacing, ``\\left``/``\\right``, degree signs, units, thousands separators, e-notation),
``wrong_answers`` (+1, sign flip, x2, a changed digit, one more in the last place of a large integer, a tiny
value's zero), and ``ADVERSARIAL`` responses built to stall or exhaust a naive scorer. Every variant is
deterministic. Renderings are only produced where the equivalence is certain; wrong answers only where the
change certainly alters the value.
"""

from __future__ import annotations

import re
from fractions import Fraction

from verl_ext.reward.choice import LETTERS, gold_letter
from verl_ext.reward.normalize import compact, strip_delimiters, text_answer, unwrap
from verl_ext.reward.numbers import MEASURED, read_number

_FRAC_INT_RE = re.compile(r"^(-?)\\[dt]?frac\{(\d+)\}\{(\d+)\}$")
_DEGREE_RE = re.compile(r"^(.*?)\s*\^\s*\{?\\circ\}?$")
_TEXT_UNIT_RE = re.compile(r"^(.*?\d)\s*\\(?:text|mbox)\{\s*([A-Za-z ]+)\}(\^\d)?$")
_SPACE_OPS_RE = re.compile(r"\s*([+=,]|(?<![\\{(^_eE])-)\s*")


def _top_level_split(s: str, sep: str) -> list[str]:
    """Split at ``sep`` outside any braces/brackets/parentheses."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(s):
        if ch in "{([":
            depth += 1
        elif ch in "})]":
            depth -= 1
        elif ch == sep and depth == 0 and i > 0:
            parts.append(s[start:i])
            start = i + 1
    parts.append(s[start:])
    return parts


def _decimal(value: Fraction, max_digits: int = 12) -> str | None:
    """The exact terminating decimal of ``value`` with at most ``max_digits`` fractional digits, else None."""
    for digits in range(max_digits + 1):
        scaled = value * 10**digits
        if scaled.denominator == 1:
            sign = "-" if scaled < 0 else ""
            n = str(abs(scaled.numerator)).rjust(digits + 1, "0")
            return sign + (n[:-digits] + "." + n[-digits:] if digits else n)
    return None


def _mantissa(value: Fraction) -> tuple[Fraction, int]:
    """(m, k) with value = m * 10**k and 1 <= |m| < 10 (value != 0)."""
    exp, mant = 0, abs(value)
    while mant >= 10:
        mant /= 10
        exp += 1
    while mant < 1:
        mant *= 10
        exp -= 1
    return (mant if value > 0 else -mant), exp


def _sci(value: Fraction, digits: int) -> str:
    """``value`` rounded to ``digits`` significant digits, in e-notation (e.g. ``5.76e-19``)."""
    if value == 0:
        return "0"
    mant, exp = _mantissa(value)
    scaled = round(mant * 10 ** (digits - 1))
    if abs(scaled) >= 10**digits:  # rounding carried into a new digit
        scaled, exp = scaled // 10, exp + 1
    text = str(abs(scaled))
    text = text[0] + ("." + text[1:] if len(text) > 1 else "")
    return f"{'-' if scaled < 0 else ''}{text}e{exp}"


def _scientific(value: Fraction) -> list[str]:
    """``m e k`` renderings of a terminating decimal with at most 12 significant digits."""
    if value == 0:
        return []
    mant, exp = _mantissa(value)
    m = _decimal(mant)
    if m is None or exp == 0:
        return []
    return [f"{m}e{exp}", f"{m} \\times 10^{{{exp}}}", f"{m}\\cdot10^{{{exp}}}"]


def _number_renderings(gold: str) -> list[str]:
    num = read_number(compact(gold))
    if num is None:
        return []
    value, out = num.value, []
    if value.denominator == 1:
        n = value.numerator
        out.append(f"{n}.0")
        if abs(n) >= 1000:
            out.append(f"{n:,}")
            out.append(f"{n:,}".replace(",", "{,}"))
    else:
        dec = _decimal(value)
        if dec is not None and compact(dec) != compact(gold):
            out.append(dec)
        sign = "-" if value < 0 else ""
        out.append(f"{sign}\\dfrac{{{abs(value.numerator)}}}{{{value.denominator}}}")
        out.append(f"{sign}{abs(value.numerator)}/{value.denominator}")
    out.extend(_scientific(value))
    return out


def renderings(gold: str) -> list[str]:
    """Equivalent ways to write ``gold`` (never ``gold`` itself, no duplicates)."""
    g = strip_delimiters(gold)
    out: list[str] = list(_number_renderings(g))
    if "\\frac" in g:
        out.append(g.replace("\\frac", "\\dfrac"))
    if "\\dfrac" in g:
        out.append(g.replace("\\dfrac", "\\frac"))
    terms = _top_level_split(g, "+")
    if len(terms) == 2 and all(t.strip() for t in terms) and "=" not in g and "," not in g:
        out.append(f"{terms[1].strip()} + {terms[0].strip()}")
    out.append(_SPACE_OPS_RE.sub(r" \1 ", g).strip())
    out.append("".join(g.split()))
    if "\\left" in g or "\\right" in g:
        out.append(g.replace("\\left", "").replace("\\right", ""))
    elif g[:1] in "([" and g[-1:] in ")]":
        out.append(f"\\left{g[0]}{g[1:-1]}\\right{g[-1]}")
    m = _DEGREE_RE.match(g)
    if m:
        out += [m.group(1), f"{m.group(1)}°", f"{m.group(1)}^{{\\circ}}", f"{m.group(1)} degrees"]
    words = text_answer(g)
    if words is not None and words[1]:
        out += [unwrap(g), f"\\text{{{words[0].upper()}}}"]
    m = _TEXT_UNIT_RE.match(g)
    if m:
        out += [m.group(1), f"{m.group(1)} \\text{{ {m.group(2).strip()}}}{m.group(3) or ''}"]
    seen, result = {g}, []
    for r in out:
        if r and r not in seen:
            seen.add(r)
            result.append(r)
    return result


def _bump_digit(s: str) -> str | None:
    """Change the last digit of ``s`` (9 -> 8, else +1); None if it has no digit."""
    for i in range(len(s) - 1, -1, -1):
        if s[i].isdigit():
            return s[:i] + ("8" if s[i] == "9" else str(int(s[i]) + 1)) + s[i + 1 :]
    return None


def wrong_answers(gold: str) -> list[str]:
    """Answers that certainly differ from ``gold`` in value (see module docstring)."""
    g = strip_delimiters(gold)
    letter = gold_letter(g)
    if letter is not None:
        return [x for x in LETTERS[:4] if x != letter][:2]
    num = read_number(compact(g))
    out: list[str] = []
    if num is not None and num.kind == MEASURED:  # 2.88e-19: stay in e-notation at the stated precision
        v, d = num.value, num.sig_digits
        out += [_sci(-v, d), _sci(2 * v, d), _sci(v * (1 + Fraction(1, 10)), d), "0"]
    elif num is not None:
        v = num.value
        out += [_render(v + 1), _render(2 * v) if v else "1", _render(-v) if v else "-1"]
        if v.denominator == 1 and abs(v) >= 10**6:
            out.append(str(v.numerator + 1))  # one more in the last place of a large integer
        if 0 < abs(v) < Fraction(1, 10**6):
            out.append("0")
    bumped = _bump_digit(g)
    if bumped is not None and compact(bumped) != compact(g):
        out.append(bumped)
    seen, result = {compact(g)}, []
    for w in out:
        if compact(w) not in seen:
            seen.add(compact(w))
            result.append(w)
    return result


def _render(v: Fraction) -> str:
    dec = _decimal(v)
    if dec is not None:
        return dec
    sign = "-" if v < 0 else ""
    return f"{sign}\\frac{{{abs(v.numerator)}}}{{{v.denominator}}}"


ADVERSARIAL_ANSWERS = (
    "9!!!",
    "10^{9}!",
    "\\binom{999999}{499999}",
    "\\Gamma(10^{9})",
    "\\sum_{k=1}^{300} k^k",
    "{" * 20 + "1" + "}" * 20,
    "{" * 40 + "1" + "}" * 40,
    "9^{9^{9}}",
    "2^{2^{2^{2^{100}}}}",
    "10^{10^{10}}",
    "99999999!",
    "\\prod_{k=1}^{10^{6}} k",
    "(((((((((((((((((((((((((1)))))))))))))))))))))))))",
    "\\sqrt{\\sqrt{\\sqrt{\\sqrt{\\sqrt{\\sqrt{\\sqrt{\\sqrt{2}}}}}}}}^{10^{8}}",
)


def adversarial_responses() -> list[tuple[str, str]]:
    """(name, response) pairs: each adversarial answer boxed after some reasoning, plus raw garbage."""
    lead = "We compute the quantity step by step and simplify. "
    out = [(a[:40], f"{lead}Therefore the answer is $\\boxed{{{a}}}$.") for a in ADVERSARIAL_ANSWERS]
    garbage = "".join(chr(33 + (i * 7919) % 90) for i in range(100_000))
    out.append(("100k-char garbage", garbage))
    out.append(("100k-char garbage in a box", "\\boxed{" + garbage.replace("}", ")") + "}"))
    out.append(("200k braces", "\\boxed{" + "{" * 100_000 + "}" * 100_000 + "}"))
    out.append(("50k \\boxed{ openings", "\\boxed{" * 50_000))
    out.append(("box at start of 200k chars", "\\boxed{9^{9^{9}}} " + "lorem ipsum " * 16_000))
    return out
