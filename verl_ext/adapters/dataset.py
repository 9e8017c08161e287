"""``PoolDataset``: a map-style torch ``Dataset`` over a ``QueryPool``, indexed by record id.

Usable as verl's ``data.custom_cls`` (``create_rl_dataset`` calls ``cls(data_files=, tokenizer=, processor=,
config=, max_samples=)``) or built directly with ``from_config``. It reads the seed rows (``rows.load_rows``),
drops prompts longer than ``max_prompt_length`` tokens like ``RLHFDataset`` does, and puts them into its pool.
``dataset[record_id]`` returns the row dict ``RLHFDataset.__getitem__`` returns for the same file row, with
``extra_info.index`` = ``index`` = the record id, so verl's ``collate_fn`` and agent loop treat it as a normal row.

Checkpointing: ``StatefulDataLoader`` (num_workers=0) stores ``state_dict()`` with the batch sampler's state in
``data.pt`` and restores it when the next iterator is created. With ``checkpoint_dir`` set, the pool itself goes
to ``pool_state.pkl`` in that folder (``pool_file.py``: ~10x faster than inside ``data.pt`` at 10^6 records).

Pool settings come from (highest first) the keyword arguments, then ``config.heapa`` (a mapping with optional
``pool`` = ``PoolConfig`` fields, ``seed``, ``rows`` = ``RowFormat`` fields), then defaults. The pool is built on
first use, so ``attach_pool`` can hand in a pool built elsewhere (e.g. with a custom estimator) before that.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset

from verl_ext.adapters._config import as_dict
from verl_ext.adapters.pool_file import read_pool_file, write_pool_file
from verl_ext.adapters.rows import RowFormat, SeedRows, as_messages, load_rows, to_verl_row
from verl_ext.pool import PoolConfig, QueryPool
from verl_ext.state_schema import check_schema

logger = logging.getLogger(__name__)

STATE_SCHEMA_VERSION = 2  # 2: the pool may live in its own file (1 still loads)


class PoolDataset(Dataset):
    """Record-id-indexed dataset over a ``QueryPool`` (see the module docstring)."""

    def __init__(self, data_files: str | os.PathLike | Sequence[str | os.PathLike] | None, tokenizer: Any = None,
                 processor: Any = None, config: Mapping[str, Any] | None = None, max_samples: int = -1, *,
                 pool_config: PoolConfig | Mapping[str, Any] | None = None, row_format: RowFormat | Mapping | None
                 = None, pool_seed: int | None = None) -> None:
        config = config if config is not None else {}
        heapa = as_dict(config.get("heapa")) or {}
        unknown = set(heapa) - {"pool", "seed", "rows"}
        if unknown:
            raise ValueError(f"unknown keys {sorted(unknown)} in data config 'heapa'; known: pool, seed, rows")
        self.tokenizer = tokenizer
        if processor is not None:
            logger.warning("PoolDataset serves text prompts only; the multimodal processor is ignored")
        self.max_prompt_length = int(config.get("max_prompt_length", 1024))
        self.filter_overlong_prompts = bool(config.get("filter_overlong_prompts", True))
        self.apply_chat_template_kwargs = dict(as_dict(config.get("apply_chat_template_kwargs")) or {})
        self.pool_config = _pool_config(pool_config if pool_config is not None else heapa.get("pool"))
        seed = pool_seed if pool_seed is not None else heapa.get("seed", config.get("seed"))
        self.pool_seed = 0 if seed is None else int(seed)
        fmt = row_format if row_format is not None else heapa.get("rows")
        self.row_format = fmt if isinstance(fmt, RowFormat) else RowFormat.from_dict(as_dict(fmt))
        if self.row_format.prompt_key == "prompt" and config.get("prompt_key", "prompt") != "prompt":
            self.row_format = RowFormat.from_dict({**_fields(self.row_format), "prompt_key": config["prompt_key"]})
        self.num_filtered = 0
        self._pool: QueryPool | None = None
        self._pending: SeedRows | None = None
        self.checkpoint_dir: str | None = None  # set by the trainer around a save or load: the step folder
        if data_files is not None:
            files = _as_list(data_files)
            rows = load_rows(files, self.row_format)
            if not len(rows):
                raise ValueError(f"data.train_files {files}: no rows (the file is empty)")
            # verl leaves data.seed unset by default; the pool seed keeps the subset reproducible (and resumable).
            data_seed = config.get("seed")
            rows = _take_max_samples(rows, max_samples, bool(config.get("shuffle", False)),
                                     self.pool_seed if data_seed is None else data_seed)
            self._pending = self._filter_overlong(rows)
            check_seed_count(len(self._pending), self.pool_config, files, self.max_prompt_length)

    @classmethod
    def from_config(cls, data_files: str | os.PathLike | Sequence[str | os.PathLike] | None, tokenizer: Any = None,
                    *, pool_config: PoolConfig | Mapping[str, Any] | None = None,
                    row_format: RowFormat | Mapping | None = None, seed: int = 0, max_samples: int = -1,
                    data_config: Mapping[str, Any] | None = None) -> "PoolDataset":
        """Build without verl's data config; ``data_config`` may still supply ``max_prompt_length`` etc."""
        return cls(data_files, tokenizer, None, data_config, max_samples, pool_config=pool_config,
                   row_format=row_format, pool_seed=seed)

    # ----------------------------------------------------------------------------------------- the pool
    @property
    def pool(self) -> QueryPool:
        """The pool (built from the config and seeded on first access)."""
        if self._pool is None:
            self._pool = QueryPool(self.pool_config, seed=self.pool_seed)
            self._add_pending(self._pool)
        return self._pool

    @property
    def num_pending(self) -> int:
        """Seed rows loaded and checked but not yet put into a pool."""
        return len(self._pending) if self._pending is not None else 0

    def attach_pool(self, pool: QueryPool, add_seeds: bool = True) -> None:
        """Use ``pool`` from now on; with ``add_seeds`` the loaded seed rows go into it (once)."""
        if add_seeds and self._pending is None:
            raise RuntimeError("attach_pool(add_seeds=True): the seed rows already went into a pool (it was used "
                               "before attach_pool) or none were loaded; pass add_seeds=False")
        self._pool = pool
        if add_seeds:
            self._add_pending(pool)

    def _add_pending(self, pool: QueryPool) -> None:
        rows, self._pending = self._pending, None
        if rows is not None and len(rows):
            pool.add_seeds_bulk(**rows.pool_kwargs())
            logger.info("PoolDataset: %d seed rows in the pool (%d over-long prompts dropped)", len(rows),
                        self.num_filtered)

    # ----------------------------------------------------------------------------------------- Dataset API
    def __len__(self) -> int:
        """Records held by the pool in any status (cold, pooled, in flight, archived)."""
        return len(self.pool)

    def __getitem__(self, record_id: int) -> dict[str, Any]:
        """The row of record ``record_id``, keyed exactly like ``RLHFDataset.__getitem__``'s rows."""
        rid = int(record_id)
        rec = self.pool.get(rid)
        row = to_verl_row(rid, rec.prompt, rec.answer, rec.data_source, rec.extra)
        extra_info = row["extra_info"]
        row["raw_prompt"] = row["prompt"]
        # verl: "we still need a dummy tensor to make sure DataProto.batch is not empty"
        row["dummy_tensor"] = torch.tensor([0], dtype=torch.uint8)
        row["index"] = rid
        row["tools_kwargs"] = extra_info.get("tools_kwargs", {})
        row["interaction_kwargs"] = extra_info.get("interaction_kwargs", {})
        return row

    # ----------------------------------------------------------------------------------------- checkpoints
    def state_dict(self) -> dict[str, Any]:
        """The pool's state. With ``checkpoint_dir`` set (the trainer sets it to the step folder before verl saves
        ``data.pt``) the pool goes to its own file there and the state holds a reference; otherwise it is inline."""
        pool_state = self.pool.state_dict()
        if self.checkpoint_dir:
            return {"schema_version": STATE_SCHEMA_VERSION, "pool_file": write_pool_file(self.checkpoint_dir,
                                                                                         pool_state)}
        return {"schema_version": STATE_SCHEMA_VERSION, "pool": pool_state}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore the pool in place (objects holding the pool keep seeing the restored one)."""
        check_schema(state, "PoolDataset", 1, STATE_SCHEMA_VERSION)
        if self._pool is None:
            self._pending = None  # the checkpoint holds the seeds already
            self._pool = QueryPool(self.pool_config, seed=self.pool_seed)
        pool_state = state["pool"] if "pool" in state else read_pool_file(state["pool_file"], self.checkpoint_dir)
        self._pool.load_state_dict(pool_state)

    # ----------------------------------------------------------------------------------------- prompt length
    def prompt_length(self, prompt: Any) -> int:
        """Tokens of ``prompt`` after the chat template (as the agent loop renders it); needs a tokenizer."""
        if self.tokenizer is None:
            raise RuntimeError("PoolDataset.prompt_length needs a tokenizer")
        from verl.utils.tokenizer import normalize_token_ids

        kwargs = {k: v for k, v in self.apply_chat_template_kwargs.items()
                  if k not in ("tokenize", "return_dict", "return_tensors")}
        ids = self.tokenizer.apply_chat_template(as_messages(prompt), add_generation_prompt=True, tokenize=True,
                                                 **kwargs)
        return len(normalize_token_ids(ids))

    def fits(self, prompt: Any) -> bool:
        """Whether ``prompt`` is within ``max_prompt_length`` (always True without a tokenizer or filtering)."""
        if self.tokenizer is None or not self.filter_overlong_prompts:
            return True
        return self.prompt_length(prompt) <= self.max_prompt_length

    def _filter_overlong(self, rows: SeedRows) -> SeedRows:
        if self.tokenizer is None or not self.filter_overlong_prompts or not len(rows):
            return rows
        keep = [i for i, prompt in enumerate(rows.prompts) if self.fits(prompt)]
        self.num_filtered = len(rows) - len(keep)
        if self.num_filtered:
            logger.warning("PoolDataset: dropped %d of %d prompts longer than %d tokens", self.num_filtered,
                           len(rows), self.max_prompt_length)
            return rows.select(keep)
        return rows


def check_seed_count(n: int, pool_config: PoolConfig, files: Sequence[str], max_prompt_length: int) -> None:
    """Seeds must exist and fit the pool: every seed enters it unscored, and unscored records are never evicted."""
    if n == 0:
        raise ValueError(f"data.train_files {list(files)}: every prompt is longer than data.max_prompt_length="
                         f"{max_prompt_length} tokens; nothing to train on")
    if n > pool_config.max_pool_size:
        raise ValueError(f"heapa.pool.max_pool_size={pool_config.max_pool_size} is smaller than the {n} seed rows of "
                         f"data.train_files {list(files)}: raise heapa.pool.max_pool_size or cap the seeds with "
                         "data.train_max_samples")


def _pool_config(value: PoolConfig | Mapping[str, Any] | None) -> PoolConfig:
    if value is None:
        return PoolConfig()
    if isinstance(value, PoolConfig):
        return value
    return PoolConfig.from_dict(as_dict(value))


def _take_max_samples(rows: SeedRows, max_samples: int | None, shuffle: bool, seed: Any) -> SeedRows:
    """verl's ``max_samples``: the first N rows, or N random rows (seeded) when ``shuffle`` is on."""
    total = len(rows)
    if max_samples is None or max_samples <= 0 or max_samples >= total:
        return rows
    if shuffle:
        rng = np.random.default_rng(*(() if seed is None else (seed,)))
        return rows.select(rng.choice(total, size=max_samples, replace=False).tolist())
    return rows.select(range(max_samples))


def _as_list(files: Any) -> list:
    if isinstance(files, (str, os.PathLike)):
        return [files]
    return [os.fspath(f) if isinstance(f, os.PathLike) else str(f) for f in files]


def _fields(fmt: RowFormat) -> dict[str, Any]:
    return {name: getattr(fmt, name) for name in fmt.__dataclass_fields__}
