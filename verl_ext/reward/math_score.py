"""The project's public scoring functions (stable API; also used by evaluation).

``compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs)`` has verl's
``compute_score`` signature and returns ``{"score", "acc", "pred", "timeout", "error"}`` (see ``scorer``). It is
safe to call from any thread: comparisons that need math-verify run in a shared pool of worker processes and are
killed at ``timeout_s``. Keyword arguments: ``format`` (boxed | dapo | auto), ``timeout_s``, and any other
``ScorerConfig`` field; ``scorer=`` uses a given ``Scorer`` instead. Unknown keyword arguments (verl passes a
reward-router address and tokenizer to some scorers) are ignored.

For many responses, build one ``Scorer`` and call ``Scorer.score`` / ``Scorer.score_many`` directly.
"""

from __future__ import annotations

import dataclasses
import os
import threading
import time
from collections.abc import Mapping
from typing import Any

from verl_ext.reward.scorer import FORMATS, Scorer, ScorerConfig

__all__ = ["FORMATS", "compute_score", "default_scorer", "is_equivalent", "overlong_penalty"]

_CONFIG_FIELDS = frozenset(f.name for f in dataclasses.fields(ScorerConfig))
_SCORERS: dict[ScorerConfig, Scorer] = {}
_SCORERS_LOCK = threading.Lock()


def default_scorer(config: ScorerConfig | None = None) -> Scorer:
    """The process-wide ``Scorer`` for ``config`` (scorers with the same settings share one worker pool)."""
    config = config or ScorerConfig()
    with _SCORERS_LOCK:
        scorer = _SCORERS.get(config)
        if scorer is None or scorer.pool._closed:
            scorer = _SCORERS[config] = Scorer(config)
        return scorer


def _forget_parent_scorers() -> None:
    global _SCORERS_LOCK
    _SCORERS.clear()  # their pools belong to the parent process (see workers._forget_parent_pools)
    _SCORERS_LOCK = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_parent_scorers)


def _scorer_for(kwargs: Mapping[str, Any]) -> Scorer:
    scorer = kwargs.get("scorer")
    if scorer is not None:
        return scorer
    return default_scorer(ScorerConfig(**{k: v for k, v in kwargs.items() if k in _CONFIG_FIELDS}))


def compute_score(data_source: str, solution_str: str, ground_truth: Any, extra_info: dict[str, Any] | None = None,
                  **kwargs: Any) -> dict[str, Any]:
    """verl's ``compute_score``: ``{"score", "acc", "pred", "timeout", "error"}`` for one response."""
    return _scorer_for(kwargs).score(data_source, solution_str, ground_truth, extra_info)


def is_equivalent(pred: str, gold: str, **kwargs: Any) -> bool:
    """Whether an already extracted answer ``pred`` matches ``gold`` (same rules and limits as ``compute_score``)."""
    scorer = _scorer_for(kwargs)
    return scorer.judge(pred, gold, time.monotonic() + scorer.config.timeout_s).correct


def overlong_penalty(response_len: int, max_len: int, buffer_len: int, penalty_factor: float = 1.0) -> float:
    """DAPO's soft overlong punishment: 0 up to ``max_len - buffer_len``, then linear down to ``-penalty_factor``.

    Responses longer than ``max_len`` (should not happen when generation is capped) get the full penalty.
    """
    if buffer_len < 0 or max_len <= 0 or buffer_len > max_len:
        raise ValueError(f"overlong_penalty: need 0 <= buffer_len <= max_len, got buffer_len={buffer_len}, "
                         f"max_len={max_len}")
    expected = max_len - buffer_len
    exceed = response_len - expected
    if exceed <= 0 or buffer_len == 0:
        return 0.0 if exceed <= 0 else -float(penalty_factor)
    return -min(exceed / buffer_len, 1.0) * float(penalty_factor)
