"""Checks run in the driver before Ray starts, so bad input fails in seconds instead of minutes into a run.

- ``expand_paths``: ``~`` in data files, the model path, the checkpoint folder and the trace file (Hydra and
  verl pass them through verbatim: a quoted ``'[~/data/a.parquet]'`` would reach the trainer unexpanded).
- ``check_data``: every validation file exists; the training rows are read and validated exactly as the
  trainer's ``PoolDataset`` will read them (all row errors with file/row/field, repeated prompts per
  ``heapa.rows.duplicates``, an empty file, more seeds than ``heapa.pool.max_pool_size``). Without the tokenizer
  the seed count is taken before the over-long prompt filter.
- ``check_teacher``: with augmentation on and the OpenAI-compatible teacher, the server must answer.
"""

from __future__ import annotations

import logging
import os
import time
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf, open_dict

logger = logging.getLogger(__name__)
PATH_KEYS = ("data.train_files", "data.val_files", "actor_rollout_ref.model.path", "trainer.default_local_dir",
             "heapa.trace_file")


def expand_paths(config: DictConfig) -> None:
    """Expand a leading ``~`` in the path settings (strings or lists of strings), in place."""
    with open_dict(config):
        for key in PATH_KEYS:
            value = OmegaConf.select(config, key)
            if isinstance(value, str) and value.startswith("~"):
                OmegaConf.update(config, key, os.path.expanduser(value), merge=False)
            elif isinstance(value, (list, ListConfig)) and any(str(v).startswith("~") for v in value):
                OmegaConf.update(config, key, [os.path.expanduser(str(v)) for v in value], merge=False)


def _as_files(value: Any) -> list[str]:
    if value is None:
        return []
    return [str(value)] if isinstance(value, str) else [str(v) for v in value]


def check_data(config: DictConfig, settings: Any) -> int:
    """Validate the data files; returns the number of training seeds. Raises naming file, row, field or key."""
    from verl_ext.adapters.dataset import PoolDataset

    start = time.perf_counter()
    data = config.data
    for key in ("train_files", "val_files"):
        missing = [f for f in _as_files(data.get(key)) if not os.path.exists(f)]
        if missing:
            raise FileNotFoundError(f"data.{key}: {missing} not found (relative paths start at {os.getcwd()})")
    train = PoolDataset.from_config(_as_files(data.train_files), None, pool_config=settings.pool,
                                    row_format=settings.rows, seed=settings.seed,
                                    max_samples=data.get("train_max_samples", -1), data_config=data)
    seeds = train.num_pending
    logger.info("preflight: %d training seeds in %s valid (%.1f s)", seeds, _as_files(data.train_files),
                time.perf_counter() - start)
    return seeds


def check_teacher(settings: Any) -> None:
    """With augmentation on and the OpenAI-compatible teacher, fail now if the server does not answer."""
    teacher = settings.teacher
    if not settings.augmentation.enabled or teacher.backend != "openai" or teacher.probe_timeout_s <= 0:
        return
    from verl_ext.augment.teacher import probe_teacher

    logger.info("preflight: %s", probe_teacher(teacher))
