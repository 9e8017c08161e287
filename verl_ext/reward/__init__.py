"""Math answer extraction and math-verify scoring (pure Python; math-verify is imported lazily)."""

from verl_ext.reward.extract import ANSWER_LINE, BOXED, extract_answer, last_answer_line, last_boxed
from verl_ext.reward.math_score import compute_score, is_equivalent, overlong_penalty

__all__ = [
    "ANSWER_LINE",
    "BOXED",
    "compute_score",
    "extract_answer",
    "is_equivalent",
    "last_answer_line",
    "last_boxed",
    "overlong_penalty",
]
