"""Final-answer extraction from a model response: ``\\boxed{...}`` / ``\\fbox{...}`` and DAPO's ``Answer: ...``.

Responses are untrusted and can be huge or adversarial, so extraction only looks at the tail of the response
(``max_chars``), scans braces linearly, and refuses answers longer than ``max_answer_chars``. Nothing here
raises on any string input.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

BOXED = "boxed"
ANSWER_LINE = "answer_line"
METHODS = (BOXED, ANSWER_LINE)

DEFAULT_MAX_CHARS = 32_768
DEFAULT_MAX_ANSWER_CHARS = 1_024
_BOX_COMMANDS = ("\\boxed", "\\fbox")
# How many earlier boxes to try when the last one is unbalanced (e.g. the response was truncated inside it).
_MAX_BOX_TRIES = 8
_ANSWER_LINE_RE = re.compile(r"(?i)answer\s*:[ \t]*([^\n]*)")


def _closing_brace(text: str, open_idx: int) -> int:
    """Index of the brace closing ``text[open_idx] == '{'``, or -1; ``\\{`` and ``\\}`` are literal braces."""
    depth = 0
    i = open_idx
    n = len(text)
    while i < n:
        ch = text[i]
        if ch == "\\":
            i += 2
            continue
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                return i
        i += 1
    return -1


def _box_content(text: str, cmd_idx: int, cmd: str) -> str | None:
    """Content of the box command at ``cmd_idx``: ``\\boxed{...}`` or the ``\\boxed 5`` short form."""
    i = cmd_idx + len(cmd)
    if i < len(text) and (text[i].isalpha()):
        return None  # another command that merely starts with the same letters, e.g. \boxedtext
    j = i
    while j < len(text) and text[j] in " \t":
        j += 1
    if j < len(text) and text[j] == "{":
        close = _closing_brace(text, j)
        return None if close == -1 else text[j + 1 : close]
    if j > i:  # "\boxed 5": one token up to whitespace or '$'
        m = re.match(r"[^\s$]+", text[j:])
        return m.group(0) if m else None
    return None


def last_boxed(text: str, max_chars: int = DEFAULT_MAX_CHARS) -> str | None:
    """Content of the last balanced ``\\boxed``/``\\fbox`` in the tail of ``text``, or None."""
    tail = text[-max_chars:] if max_chars > 0 else text
    end = len(tail)
    for _ in range(_MAX_BOX_TRIES):
        best, best_cmd = -1, ""
        for cmd in _BOX_COMMANDS:
            idx = tail.rfind(cmd, 0, end)
            if idx > best:
                best, best_cmd = idx, cmd
        if best == -1:
            return None
        content = _box_content(tail, best, best_cmd)
        if content is not None:
            return content
        end = best
    return None


def last_answer_line(text: str, max_chars: int = DEFAULT_MAX_CHARS) -> str | None:
    """The value of the last ``Answer: ...`` line (DAPO's format), unwrapped from ``$...$`` or a box."""
    tail = text[-max_chars:] if max_chars > 0 else text
    value = None
    for m in _ANSWER_LINE_RE.finditer(tail):
        value = m.group(1)
    if value is None:
        return None
    value = value.strip()
    boxed = last_boxed(value, max_chars=0)
    if boxed is not None:
        return boxed.strip()
    value = value.rstrip(".").strip()
    if len(value) >= 2 and value.startswith("$") and value.endswith("$"):
        value = value.strip("$").strip()
    return value


def extract_answer(
    text: str,
    order: Sequence[str] = (BOXED, ANSWER_LINE),
    *,
    max_chars: int = DEFAULT_MAX_CHARS,
    max_answer_chars: int = DEFAULT_MAX_ANSWER_CHARS,
) -> tuple[str | None, str | None]:
    """(answer, method) from the first method in ``order`` that finds one; (None, None) otherwise.

    An answer longer than ``max_answer_chars`` counts as not found: no grader should parse it.
    """
    if not isinstance(text, str):
        return None, None
    for method in order:
        if method == BOXED:
            found = last_boxed(text, max_chars)
        elif method == ANSWER_LINE:
            found = last_answer_line(text, max_chars)
        else:
            raise ValueError(f"extract_answer: unknown method {method!r} in order; known: {METHODS}")
        if found is not None:
            found = found.strip()
            if len(found) > max_answer_chars:
                return None, None
            return found, method
    return None, None
