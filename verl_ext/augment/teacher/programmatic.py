"""A programmatic teacher for the synthetic arithmetic task: exact answers without any model.

It plays the teacher's role in offline runs and tests: extract the single ``What is <expr>?`` problem from the
candidate, parse it with the task's safe parser (never ``eval``), compute the exact answer, and estimate the
difficulty relative to the parent from ``arithmetic.difficulty``.
"""

from __future__ import annotations

import re

from verl_ext.augment.parser import Candidate, clamp_difficulty
from verl_ext.augment.teacher.base import Verdict
from verl_ext.tasks import arithmetic

REASON_MALFORMED = "malformed"
REASON_COPY = "copy_of_parent"
REASON_AMBIGUOUS = "multiple_problems"

# A question-shaped span; the task's own parser then decides whether it is well formed.
_SPAN_RE = re.compile(r"What is[^?]{0,200}\?")


class ProgrammaticTeacher:
    """Validates arithmetic candidates exactly; stateless and thread-safe."""

    def validate(self, candidate: Candidate) -> Verdict:
        spans = _SPAN_RE.findall(candidate.text)
        if not spans:
            return Verdict.reject(REASON_MALFORMED)
        if len(spans) > 1:
            # The teacher must extract ONE problem; two questions make the intended answer ambiguous.
            return Verdict.reject(REASON_AMBIGUOUS)
        tokens = arithmetic.parse_problem(spans[0])
        if tokens is None:
            return Verdict.reject(REASON_MALFORMED)
        parent_tokens = arithmetic.parse_problem(candidate.parent_text) if candidate.parent_text else None
        if parent_tokens is not None and parent_tokens == tokens:
            return Verdict.reject(REASON_COPY, solvable=True)
        difficulty = None
        if parent_tokens is not None:
            difficulty = clamp_difficulty(arithmetic.difficulty(tokens) / arithmetic.difficulty(parent_tokens))
        clean = arithmetic.format_problem(tokens)
        return Verdict.accept(clean, str(arithmetic.evaluate(tokens)), difficulty)

    def close(self) -> None:
        """Nothing to release."""
