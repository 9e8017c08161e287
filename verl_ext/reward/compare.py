"""In-process comparisons that are provably cheap: they decide most answers without a worker process.

``fast_equal(pred, gold)`` returns True/False when it can decide and None when math-verify must (in a worker).
It only uses linear-time regular expressions and exact ``Fraction`` arithmetic on bounded digit strings, on
answers already capped at ``max_answer_chars``, so no input can make it slow:

1. identical after value-preserving clean-up (``normalize.compact``): equal;
2. a ground truth written as words in ``\\text{}`` (``\\text{Evelyn}``): equal iff the answer is the same words;
3. a number written with a base subscript (``52_8``, ``1011_{2}``; digits valid in that base, so ``x_{2}`` is a
   name): the same digits in the same base, or the same digits with the subscript left out, are equal; a plain
   integer is equal when the values are; anything else is not (math-verify reads ``52_9`` and ``52_8`` alike);
4. both plain numbers (``numbers.read_number``): ``numbers.numbers_agree`` decides;
5. both a tuple or interval of plain numbers with the same brackets (``(2,4)``, ``[-2,7)``): equal iff they have
   as many elements and each pair agrees by rule 4 (sets, ``\\infty`` and symbols are left to math-verify).
"""

from __future__ import annotations

import re

from verl_ext.reward.normalize import compact, text_answer
from verl_ext.reward.numbers import DEFAULT_MIN_DIGITS, numbers_agree, read_number


_BASED_RE = re.compile(r"(?:\\text\{)?([0-9A-Za-z]{1,64})\}?_\{?(\d{1,2})\}?")
_DIGITS_RE = re.compile(r"[0-9A-Za-z]{1,64}")
_PLAIN_INT_RE = re.compile(r"[+-]?[0-9]{1,400}")


def read_based(text: str) -> tuple[str, int] | None:
    """(digits, base) of a compact ``52_8`` / ``52_{8}`` / ``\\text{A3}_{16}``, else None: also when the digits are
    not digits of that base, as in a subscripted name (``x_{2}``, ``I_{2}``, ``E_2``; "the subscript left out"
    would otherwise accept ``x`` for ``x_{2}``)."""
    m = _BASED_RE.fullmatch(text)
    if m is None or not 2 <= int(m.group(2)) <= 36:
        return None
    try:
        int(m.group(1), int(m.group(2)))
    except ValueError:
        return None
    return m.group(1), int(m.group(2))


def _int_value(based: tuple[str, int] | None, plain: str) -> int | None:
    if based is not None:
        return int(based[0], based[1])
    # int() alone would also read "4_2" (as 42: underscores group digits in Python) and non-ASCII digits
    return int(plain) if _PLAIN_INT_RE.fullmatch(plain) else None


def _based_equal(p: str, g: str) -> bool | None:
    pb, gb = read_based(p), read_based(g)
    if pb is None and gb is None:
        return None
    if pb == gb:
        return True
    if gb is not None and pb is None and _DIGITS_RE.fullmatch(p):
        return p == gb[0]  # the subscript left out: "52" for 52_8
    pv, gv = _int_value(pb, p), _int_value(gb, g)
    if pv is None or gv is None:
        return None
    return pv == gv


def fast_equal(pred: str, gold: str, min_digits: int = DEFAULT_MIN_DIGITS) -> bool | None:
    """True/False when the cheap rules decide (see module docstring), None otherwise."""
    p, g = compact(pred), compact(gold)
    if not p:
        return False
    if p == g:
        return True
    gold_words = text_answer(gold)
    if gold_words is not None and gold_words[1]:
        pred_words = text_answer(pred)
        return pred_words is not None and pred_words[0] == gold_words[0]
    based = _based_equal(p, g)
    if based is not None:
        return based
    pn, gn = read_number(p), read_number(g)
    if pn is not None and gn is not None:
        return numbers_agree(pn, gn, min_digits)
    return _tuple_equal(p, g, min_digits)


def _numbers_in_brackets(s: str) -> tuple[str, list] | None:
    """(bracket pair, numbers) of a compact ``(a,b,...)`` / ``[a,b)`` of plain numbers, else None."""
    if len(s) < 3 or s[0] not in "([" or s[-1] not in ")]":
        return None
    parts = s[1:-1].split(",")
    if len(parts) < 2 or any(c in s[1:-1] for c in "()[]") or any(x.count("{") != x.count("}") for x in parts):
        return None
    numbers = [read_number(x) for x in parts]
    return (s[0] + s[-1], numbers) if all(n is not None for n in numbers) else None


def _tuple_equal(p: str, g: str, min_digits: int) -> bool | None:
    pt, gt = _numbers_in_brackets(p), _numbers_in_brackets(g)
    if pt is None or gt is None or pt[0] != gt[0]:
        return None
    return len(pt[1]) == len(gt[1]) and all(numbers_agree(a, b, min_digits) for a, b in zip(pt[1], gt[1]))
