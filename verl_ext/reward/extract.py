"""Final-answer extraction from a model response: ``\\boxed{...}`` / ``\\fbox{...}`` and DAPO's ``Answer: ...``.

Responses are untrusted and can be huge or adversarial. The whole response is searched (a correct box at the start
of a 100k-character response is found), and the work is bounded differently: boxes are located with ``rfind``
(linear, in C), a box's closing brace is looked for only within ``max_answer_chars`` of its opening, and at most
``MAX_BOX_TRIES`` boxes are tried from the end. An answer longer than ``max_answer_chars`` counts as not found.
Nothing here raises on any string input.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

BOXED = "boxed"
ANSWER_LINE = "answer_line"
METHODS = (BOXED, ANSWER_LINE)

DEFAULT_MAX_ANSWER_CHARS = 1_024
_BOX_COMMANDS = ("\\boxed", "\\fbox")
# How many boxes to try from the end when the last ones are unbalanced (e.g. truncated inside) or too long.
MAX_BOX_TRIES = 8
_ANSWER_LINE_RE = re.compile(r"(?i)answer[ \t]*:[ \t]*([^\n]*)")
_SHORT_BOX_RE = re.compile(r"[^\s$]+")


def closing_brace(text: str, open_idx: int, limit: int) -> int:
    """Index of the brace closing ``text[open_idx] == '{'`` within ``limit`` characters, or -1.

    ``\\{`` and ``\\}`` are literal braces.
    """
    depth = 0
    i = open_idx
    end = min(len(text), open_idx + limit + 2)
    while i < end:
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


def _box_content(text: str, cmd_idx: int, cmd: str, limit: int) -> str | None | bool:
    """Content of the box command at ``cmd_idx`` (``\\boxed{...}`` or the ``\\boxed 5`` short form).

    None when it is not a box (``\\boxedtext``) or the text ends inside it (a truncated response); False when it
    is longer than ``limit``.
    """
    i = cmd_idx + len(cmd)
    if i < len(text) and text[i].isalpha():
        return None  # another command that merely starts with the same letters, e.g. \boxedtext
    j = i
    while j < len(text) and j - i < limit and text[j] in " \t":
        j += 1
    if j < len(text) and text[j] == "{":
        close = closing_brace(text, j, limit)
        if close == -1:
            return None if j + limit + 2 >= len(text) else False
        return text[j + 1 : close]
    if j > i:  # "\boxed 5": one token up to whitespace or '$'
        m = _SHORT_BOX_RE.match(text, j, min(len(text), j + limit + 1))
        return m.group(0) if m else None
    return None


def last_boxed(text: str, max_answer_chars: int = DEFAULT_MAX_ANSWER_CHARS) -> str | None:
    """Content of the last ``\\boxed``/``\\fbox``, or None.

    A last box cut off by the end of the response is skipped for the one before it; a last box longer than
    ``max_answer_chars`` means no answer (an earlier, intermediate box is not rewarded instead).
    """
    end = len(text)
    for _ in range(MAX_BOX_TRIES):
        best, best_cmd = -1, ""
        for cmd in _BOX_COMMANDS:
            idx = text.rfind(cmd, 0, end)
            if idx > best:
                best, best_cmd = idx, cmd
        if best == -1:
            return None
        content = _box_content(text, best, best_cmd, max_answer_chars)
        if content is False:
            return None
        if content is not None:
            return content
        end = best
    return None


def last_answer_line(text: str, max_answer_chars: int = DEFAULT_MAX_ANSWER_CHARS) -> str | None:
    """The value of the last ``Answer: ...`` line (DAPO's format), unwrapped from ``$...$`` or a box."""
    value = None
    for m in _ANSWER_LINE_RE.finditer(text):
        value = m.group(1)
    if value is None:
        return None
    value = value.strip()
    boxed = last_boxed(value, max_answer_chars)
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
    max_answer_chars: int = DEFAULT_MAX_ANSWER_CHARS,
) -> tuple[str | None, str | None]:
    """(answer, method) from the first method in ``order`` that finds one; (None, None) otherwise.

    An answer longer than ``max_answer_chars`` counts as not found: no grader should parse it.
    """
    if not isinstance(text, str):
        return None, None
    for method in order:
        if method == BOXED:
            found = last_boxed(text, max_answer_chars)
        elif method == ANSWER_LINE:
            found = last_answer_line(text, max_answer_chars)
        else:
            raise ValueError(f"extract_answer: unknown method {method!r} in order; known: {METHODS}")
        if found is not None:
            found = found.strip()
            if not found or len(found) > max_answer_chars:
                return None, None
            return found, method
    return None, None
