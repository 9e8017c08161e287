"""Thin adapters between the pure core (pool, selection, reward) and verl 0.9.1.

- ``rows``: seed rows from parquet/json/jsonl (verl's RL format or benchmark ``problem``/``answer`` records).
- ``dataset.PoolDataset``: a record-id-indexed torch ``Dataset`` over a ``QueryPool`` (verl ``data.custom_cls``).
- ``sampler.PoolBatchSampler``: strategy-driven batches for verl's ``StatefulDataLoader``; checkpointed.
- ``feedback``: per-trajectory ``index``/``acc`` -> ``{record_id: (passes, n)}``.
- ``reward_manager``: the ``heapa`` reward-loop manager (``register()``).

Names are imported lazily so that reading rows or grouping feedback does not import torch or verl.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "RowError": "rows", "RowFormat": "rows", "SeedRows": "rows", "child_extra": "rows", "load_rows": "rows",
    "to_verl_row": "rows",
    "PoolDataset": "dataset",
    "PoolBatchSampler": "sampler", "PoolExhaustedError": "sampler", "make_train_dataloader": "sampler",
    "FeedbackError": "feedback", "group_outcomes": "feedback", "outcomes_from_fields": "feedback",
    "HeapaRewardConfig": "reward_manager", "HeapaRewardManager": "reward_manager",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'verl_ext.adapters' has no attribute {name!r}")
    return getattr(importlib.import_module(f"verl_ext.adapters.{module}"), name)
