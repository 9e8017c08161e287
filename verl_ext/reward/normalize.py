"""Value-preserving clean-up of an extracted answer before it is compared.

Two levels, both linear-time on strings of any length:

- ``clean``: removes presentation that never changes the mathematical value and that math-verify's own
  normalisation either misses or handles too loosely: math delimiters, ``\\left``/``\\right``, LaTeX spacing,
  ``\\dfrac``/``\\tfrac``, degree signs, ``\\%``, currency, ``{,}``/``,\\!`` thousands separators, and a unit
  written as text after a number (``5.4 \\text{ cents}``, ``864 \\mbox{ inches}^2``, ``3 cm``). The result is
  still LaTeX and is what math-verify parses (with its own unit stripping off: its list removes bare letters
  such as ``t``, ``s`` or ``m``, so ``2t`` would read as ``2``).
- ``compact``: ``clean`` without any whitespace, for string equality and plain-number parsing.

``text_answer`` recognises answers that are words (``\\text{Evelyn}``, ``east``): they compare as words.
"""

from __future__ import annotations

import re

from verl_ext.reward.extract import closing_brace

# Spacing commands and \displaystyle: presentation only. A LaTeX line break \\ (matrix rows) is matched first so
# that its second backslash is never read as the start of the spacing command "\ ".
_SPACING_RE = re.compile(r"\\\\|\\[,!]|\\[;: ]|\\q?quad(?![a-zA-Z])|\\displaystyle(?![a-zA-Z])|~")
_LEFT_RIGHT_RE = re.compile(r"\\(?:left|right|bigl|bigr|Bigl|Bigr|big|Big)(?![a-zA-Z])")
_FRAC_RE = re.compile(r"\\[dt]frac(?![a-zA-Z])")
_DEGREE_RE = re.compile(r"\^\s*\{?\s*\\circ\s*\}?|°|\\degree\b")
_PERCENT_RE = re.compile(r"\\%|%")
_CURRENCY_RE = re.compile(r"\\\$|\$")
_BRACED_COMMA_RE = re.compile(r"\{,\}")
# A unit in text after a number, at the end: "5 \text{ cm}^2", "\mbox{ inches}", "\mathrm{kg}". The text must be
# words only (letters, spaces, dots, slashes), so \text{(C)} is left alone; \text{i}, \text{e} and \text{j} are
# constants, not units, and in \mathrm a unit needs two letters or more.
_UNIT_POWER = r"(?:\s*\^\s*\{?\s*[23]\s*\}?)?\s*$"
_TEXT_UNIT_RE = re.compile(
    r"(?<=[\d}.])\s*(?:\\(?:text|mbox)\s*\{\s*(?![iej]\s*\})[A-Za-z]|\\(?:mathrm|textrm|textnormal)\s*\{\s*[A-Za-z]{2})"
    r"[A-Za-z ./]*\}" + _UNIT_POWER
)
# Bare unit words after a number ("3 cm", "12 degrees"). Closed list of words of two or more letters: a single
# letter after a number is a variable ("2t", "5r").
_BARE_UNITS = (
    "cm", "mm", "km", "kg", "mg", "ml", "ft", "feet", "foot", "inch", "inches", "yard", "yards", "mile", "miles",
    "meter", "meters", "metre", "metres", "cents", "cent", "dollars", "dollar", "degrees", "degree", "hours",
    "hour", "minutes", "minute", "seconds", "second", "days", "day", "years", "year", "units", "unit", "sq",
    "square", "mph", "pounds", "pound", "grams", "gram", "liters", "litres", "liter", "litre",
)
_BARE_UNIT_RE = re.compile(r"(?<=\d)\s+(?:" + "|".join(_BARE_UNITS) + r")" + _UNIT_POWER)
_WRAPPERS = ("\\boxed", "\\fbox", "\\textbf", "\\mathbf", "\\text", "\\mbox", "\\mathrm", "\\textrm")
_WORDS_RE = re.compile(r"[A-Za-z][A-Za-z ']*")


def strip_delimiters(text: str) -> str:
    """Remove surrounding math delimiters ``$..$``, ``$$..$$``, ``\\(..\\)``, ``\\[..\\]`` and a final period."""
    s = text.strip()
    for _ in range(3):  # nested or combined forms, e.g. "$\(x\)$."
        before = s
        s = s.rstrip(".").strip()
        if len(s) >= 2 and s[0] == "$" and s[-1] == "$":
            s = s.strip("$").strip()
        elif s.startswith(("\\(", "\\[")) and s.endswith(("\\)", "\\]")):
            s = s[2:-2].strip()
        if s == before:
            break
    return s


def unwrap(text: str) -> str:
    """Remove wrappers around the whole answer: ``\\boxed{x}``, ``\\text{x}``, ``\\textbf{x}``, ... (repeatedly)."""
    s = text.strip()
    changed = True
    while changed:
        changed = False
        for cmd in _WRAPPERS:
            if s.startswith(cmd + "{") and s.endswith("}") and _matching_brace(s, len(cmd)) == len(s) - 1:
                s = s[len(cmd) + 1 : -1].strip()
                changed = True
    return s


def _matching_brace(s: str, open_idx: int) -> int:
    """Index of the brace closing ``s[open_idx]`` (no length limit: ``s`` is an already extracted answer)."""
    return closing_brace(s, open_idx, len(s))


def _space(m: re.Match[str]) -> str:
    tok = m.group(0)
    if tok == "\\\\":
        return tok
    return "" if tok in ("\\,", "\\!") else " "  # thin spaces: 10,\!080 and 3\,\text{cm}


def clean(answer: str) -> str:
    """Value-preserving clean-up (see module docstring); the result is LaTeX."""
    s = strip_delimiters(answer)
    s = _SPACING_RE.sub(_space, s)
    s = _LEFT_RIGHT_RE.sub("", s)
    s = _FRAC_RE.sub(r"\\frac", s)
    s = _BRACED_COMMA_RE.sub(",", s)
    s = _DEGREE_RE.sub("", s)
    s = _PERCENT_RE.sub("", s)
    s = _CURRENCY_RE.sub("", s)
    s = s.strip()
    for _ in range(2):  # "5 \text{ cm}^2" and then a leftover "\text{ }" or bare unit
        s = _TEXT_UNIT_RE.sub("", s).strip()
        s = _BARE_UNIT_RE.sub("", s).strip()
    return strip_delimiters(s)


def compact(answer: str) -> str:
    """``clean`` with outer wrappers removed and no whitespace: the form used for equality and number parsing."""
    return "".join(unwrap(clean(answer)).split())


def text_answer(answer: str) -> tuple[str, bool] | None:
    """(lower-cased words, wrapped) for an answer made of words only, e.g. ``\\text{Evelyn}`` -> ("evelyn", True).

    ``wrapped`` says the words sat in ``\\text{}``-like commands: only such ground truths are graded as words (a
    bare ``pq`` is a product).
    """
    s = strip_delimiters(answer)
    inner = unwrap(s)
    if not _WORDS_RE.fullmatch(inner):
        return None
    return " ".join(inner.split()).lower(), inner != s
