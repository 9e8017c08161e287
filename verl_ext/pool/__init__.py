"""The prompt pool: records, pass-rate estimators, value buckets and the bounded HeaPA ``QueryPool``.

Pure Python + numpy; no verl, ray or torch.
"""

from verl_ext.pool.config import PoolConfig, ReinsertionConfig
from verl_ext.pool.errors import (
    ConfigError,
    DuplicateRecordError,
    PoolFullError,
    RecordStateError,
    UnknownRecordError,
)
from verl_ext.pool.estimators import (
    ESTIMATORS,
    BetaEstimator,
    EmaEstimator,
    Estimator,
    LastEstimator,
    build_estimator,
    child_initial_estimate,
    scale_by_difficulty,
    to_pass,
    to_reward,
)
from verl_ext.pool.feedback import FeedbackSummary
from verl_ext.pool.buckets import ValueBuckets
from verl_ext.pool.cold_queue import ColdQueue
from verl_ext.pool.pool import QueryPool
from verl_ext.pool.record import ARCHIVED, AUGMENTED, COLD, IN_FLIGHT, POOLED, SEED, PromptRecord

__all__ = [
    "ARCHIVED", "AUGMENTED", "COLD", "ESTIMATORS", "IN_FLIGHT", "POOLED", "SEED",
    "BetaEstimator", "ConfigError", "DuplicateRecordError", "EmaEstimator", "Estimator",
    "ColdQueue", "FeedbackSummary", "LastEstimator", "PoolConfig", "PoolFullError", "PromptRecord",
    "QueryPool", "RecordStateError", "ReinsertionConfig", "UnknownRecordError", "ValueBuckets", "build_estimator",
    "child_initial_estimate", "scale_by_difficulty", "to_pass", "to_reward",
]
