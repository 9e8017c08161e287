"""Math answer extraction and scoring with a hard per-trajectory time limit (pure Python; no verl/ray/torch).

Public API: ``compute_score`` (verl's signature), ``Scorer``/``ScorerConfig`` (batch and isolated scoring),
``extract_answer``, ``is_equivalent``, ``overlong_penalty``. See docs/reward.md.
"""

from verl_ext.reward.extract import ANSWER_LINE, BOXED, extract_answer, last_answer_line, last_boxed
from verl_ext.reward.math_score import compute_score, default_scorer, is_equivalent, overlong_penalty
from verl_ext.reward.metrics import reward_metrics
from verl_ext.reward.scorer import FORMATS, RESULT_KEYS, Scorer, ScorerConfig

__all__ = [
    "ANSWER_LINE",
    "BOXED",
    "FORMATS",
    "RESULT_KEYS",
    "Scorer",
    "ScorerConfig",
    "compute_score",
    "default_scorer",
    "extract_answer",
    "is_equivalent",
    "last_answer_line",
    "last_boxed",
    "overlong_penalty",
    "reward_metrics",
]
