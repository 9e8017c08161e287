"""The synthetic arithmetic task: generation, safe parsing and exact answers.

Used by the offline tiny assets (training/validation rows), by the programmatic teacher (it parses a
policy-written problem and computes its answer) and by tests. Problems look like ``What is 12 + 7 * 3?``; the
expected response is ``\\boxed{33}``. Difficulty grows with the operand count and operand size, so a small
warm-started model has pass rates spread over [0, 1].

Parsing never calls ``eval``: a tokenizer plus a two-level precedence evaluator over ``+ - *`` and integers.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass

DATA_SOURCE = "arith"
_QUESTION_RE = re.compile(r"^\s*What is\s+(?P<expr>[0-9+\-*\s]+?)\s*\?\s*$")
_TOKEN_RE = re.compile(r"\s*(\d+|[+\-*])")
MAX_OPERANDS = 6
MAX_OPERAND_DIGITS = 3


@dataclass(frozen=True)
class Level:
    """A difficulty level: how many operands, how large, which operators."""

    operands: int
    max_value: int
    ops: str

    @property
    def name(self) -> str:
        return f"n{self.operands}_v{self.max_value}_{'m' if '*' in self.ops else 'a'}"


# Graded from trivially easy to out of reach for a tiny model.
LEVELS: tuple[Level, ...] = (
    Level(2, 5, "+"),
    Level(2, 9, "+"),
    Level(2, 9, "+-"),
    Level(2, 20, "+-"),
    Level(3, 9, "+-"),
    Level(2, 9, "*"),
    Level(3, 20, "+-"),
    Level(3, 9, "+-*"),
    Level(4, 20, "+-*"),
    Level(4, 99, "+-*"),
)


def tokenize(expr: str) -> list[str] | None:
    """Split an expression into integer and operator tokens; None if anything else is present."""
    pos, out = 0, []
    expr = expr.strip()
    while pos < len(expr):
        m = _TOKEN_RE.match(expr, pos)
        if m is None:
            return None
        out.append(m.group(1))
        pos = m.end()
    return out


def _valid_shape(tokens: list[str]) -> bool:
    if not tokens or len(tokens) % 2 == 0 or len(tokens) > 2 * MAX_OPERANDS - 1:
        return False
    for i, tok in enumerate(tokens):
        is_num = tok.isdigit()
        if (i % 2 == 0) != is_num:
            return False
        if is_num and len(tok) > MAX_OPERAND_DIGITS:
            return False
    return True


def evaluate(tokens: list[str]) -> int:
    """Evaluate ``a op b op c ...`` with ``*`` binding tighter than ``+``/``-``."""
    terms: list[int] = [int(tokens[0])]
    signs: list[int] = [1]
    for op, num in zip(tokens[1::2], tokens[2::2]):
        value = int(num)
        if op == "*":
            terms[-1] *= value
        else:
            terms.append(value)
            signs.append(1 if op == "+" else -1)
    return sum(s * t for s, t in zip(signs, terms))


def parse_problem(text: str) -> list[str] | None:
    """Tokens of a well-formed ``What is <expr>?`` problem, or None when the text is not one."""
    m = _QUESTION_RE.match(text)
    if m is None:
        return None
    tokens = tokenize(m.group("expr"))
    if tokens is None or not _valid_shape(tokens):
        return None
    return tokens


def solve(text: str) -> int | None:
    """The exact answer of a problem text, or None if it is not a well-formed problem."""
    tokens = parse_problem(text)
    return None if tokens is None else evaluate(tokens)


def difficulty(tokens: list[str]) -> float:
    """A scalar difficulty in (0, 1]: more operands, more digits and multiplication make it harder."""
    operands = [t for t in tokens[::2]]
    digits = sum(len(t) for t in operands)
    mult = sum(1 for t in tokens[1::2] if t == "*")
    raw = 0.25 * (len(operands) - 1) + 0.12 * digits + 0.2 * mult
    return min(1.0, raw / 3.0)


def format_problem(tokens: list[str]) -> str:
    return "What is " + " ".join(tokens) + "?"


def make_problem(rng: random.Random, level: Level) -> tuple[str, int]:
    """Draw one problem of ``level``; returns (text, answer)."""
    tokens = [str(rng.randint(0, level.max_value))]
    for _ in range(level.operands - 1):
        tokens.append(rng.choice(level.ops))
        tokens.append(str(rng.randint(0, level.max_value)))
    return format_problem(tokens), evaluate(tokens)


def make_rows(n: int, seed: int, split: str, start_index: int = 0) -> list[dict]:
    """``n`` rows in verl's RL parquet format, levels cycling so every difficulty is present."""
    rng = random.Random(f"{seed}-{split}")
    rows = []
    for i in range(n):
        level = LEVELS[i % len(LEVELS)]
        text, answer = make_problem(rng, level)
        rows.append(
            {
                "data_source": DATA_SOURCE,
                "prompt": [{"role": "user", "content": text}],
                "ability": "math",
                "reward_model": {"style": "rule", "ground_truth": str(answer)},
                "extra_info": {"index": start_index + i, "split": split, "level": level.name},
            }
        )
    return rows


def format_response(answer: int | str) -> str:
    """The response the warm start teaches: the answer in a box, nothing else."""
    return f"\\boxed{{{answer}}}"


_BOXED_RE = re.compile(r"\\boxed\{([^{}]*)\}")


def answer_from_response(text: str) -> str | None:
    """The content of the last ``\\boxed{...}`` in a response (flat braces only: enough for this task)."""
    found = _BOXED_RE.findall(text)
    return found[-1].strip() if found else None
