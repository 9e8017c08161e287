"""Multiple-choice answers: a ground truth that is one option letter A-J grades the answer as a letter.

Accepted spellings of a letter answer (after extraction from ``\\boxed{}`` or ``Answer:``): ``B``, ``(B)``, ``B)``,
``B.``, ``\\text{B}``, ``\\textbf{(B)}``, and a letter followed by its option text (``B) 4.5``, ``(B) 4.5``).
Anything else (the option's value alone, two letters, a lowercase variable) is not a letter answer and scores 0.
Letters are never picked out of prose: only the extracted final answer is read.
"""

from __future__ import annotations

import re

from verl_ext.reward.normalize import strip_delimiters, unwrap

LETTERS = "ABCDEFGHIJ"
_ALONE_RE = re.compile(r"\(?([A-J])\)?[.:]?")
_WITH_TEXT_RE = re.compile(r"\(?([A-J])[).:]\s+\S.*", re.DOTALL)


def _letter_form(answer: str) -> str:
    s = unwrap(strip_delimiters(answer))
    if s.startswith("(") and s.endswith(")"):  # "(\text{B})"
        inner = unwrap(s[1:-1])
        if len(inner) == 1:
            s = inner
    return s


def gold_letter(ground_truth: str) -> str | None:
    """The option letter a ground truth names (``B``, ``(B)``, ``\\text{(C)}``), else None."""
    m = _ALONE_RE.fullmatch(_letter_form(ground_truth))
    return m.group(1) if m else None


def answer_letter(answer: str) -> str | None:
    """The option letter an extracted answer names, else None (see module docstring)."""
    s = _letter_form(answer)
    m = _ALONE_RE.fullmatch(s) or _WITH_TEXT_RE.fullmatch(s)
    return m.group(1) if m else None
