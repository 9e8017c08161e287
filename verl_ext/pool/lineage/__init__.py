"""Lineage of augmented prompts (spec §6): the forest of which record was written from which, its ChildAgg /
PathAgg re-estimation, its checkpoint, and the wiring to the pool.

- ``forest.py``: ``LineageForest``, structure, queries, edits, metrics (the public API);
- ``aggregate.py``: the refresh (incremental or full), ChildAgg / PathAgg;
- ``state.py``: ``state_dict`` / ``load_state_dict``;
- ``config.py``: ``LineageConfig``, ``LineageError``, ``RefreshResult`` and input checks;
- ``refresh.py``: ``LineageRefresher``, the only module that knows the pool's hooks.

Pure Python + numpy.
"""

from verl_ext.pool.lineage.config import LineageConfig, LineageError, RefreshResult
from verl_ext.pool.lineage.forest import SCHEMA_VERSION, LineageForest
from verl_ext.pool.lineage.refresh import LineageRefresher

__all__ = ["SCHEMA_VERSION", "LineageConfig", "LineageError", "LineageForest", "LineageRefresher", "RefreshResult"]
