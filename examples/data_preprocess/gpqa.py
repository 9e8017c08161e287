"""GPQA rows: four choices shuffled deterministically per question, ground truth = the correct choice's letter.

The order is a pure function of (seed, record key): the key is the row's ``Record ID`` when present, else its
source row, so re-running gives the same letters. Each row records the shuffled choices, the letter of the
correct one, the permutation (``choice_sources[j]`` = which original field became letter j) and the seed.
Used by ``eval_sets.py gpqa_diamond``; not a script on its own.
"""

from __future__ import annotations

import hashlib
import random
from typing import Any

import _common as c

LETTERS = ("A", "B", "C", "D")
CORRECT = "Correct Answer"
INCORRECT = ("Incorrect Answer 1", "Incorrect Answer 2", "Incorrect Answer 3")
QUESTION_FIELDS = ("Question", "question", "problem")
BOXED_LETTER = "Please reason step by step, and put the letter of the correct choice (A, B, C or D) within \\boxed{}."


def permutation(seed: int, key: str) -> list[int]:
    """A permutation of range(4) from (seed, key) only (sha256, so it does not depend on Python's hash seed)."""
    digest = hashlib.sha256(f"{seed}:{key}".encode()).digest()
    order = list(range(4))
    random.Random(int.from_bytes(digest[:8], "big")).shuffle(order)
    return order


def prompt_text(question: str, choices: list[str], template: str) -> str:
    body = question.strip() + "\n\n" + "\n".join(f"{L}) {text.strip()}" for L, text in zip(LETTERS, choices))
    if template == "boxed":
        return f"{body}\n\n{BOXED_LETTER}"
    return c.apply_template(body, template)  # dapo: the Answer: line carries the letter; raw: as is


def convert_row(row: Any, i: int, *, data_source: str, split: str, source: str, template: str, seed: int) -> dict:
    row = c.check_row(row)
    _, question = c.text_field(row, QUESTION_FIELDS, "question")
    originals = []
    for name in (CORRECT, *INCORRECT):
        _, text = c.text_field(row, (name,), f"{name!r}")
        originals.append(text)
    if len({t.strip() for t in originals}) < 4:
        raise c.BadRow("two choices have the same text; the letter would be ambiguous")
    record_id = row.get("Record ID")
    key = str(record_id) if record_id not in (None, "") else f"row{i}"
    order = permutation(seed, key)
    choices = [originals[j] for j in order]
    letter = LETTERS[order.index(0)]
    extra = {"index": i, "split": split, "source": source, "source_id": None if record_id is None else str(record_id),
             "problem": question, "choices": choices, "correct_choice": letter,
             "choice_sources": [("correct" if j == 0 else INCORRECT[j - 1]) for j in order],
             "correct_answer_text": originals[0], "shuffle_seed": seed}
    for field in ("Subdomain", "High-level domain"):
        if isinstance(row.get(field), str):
            extra[field.lower().replace(" ", "_").replace("-", "_")] = row[field]
    return c.verl_row(data_source=data_source, content=prompt_text(question, choices, template), answer=letter,
                      ability="science", extra_info=extra)
