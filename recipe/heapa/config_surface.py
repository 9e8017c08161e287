"""Which fields of the ``heapa:`` block a person reads first, which are plumbing, and which moved.

The config models (``settings.py`` and the components it nests) hold every field. ``config_defaults`` writes them
into three files that ``heapa_trainer.yaml`` pulls in, so every key stays a plain Hydra override:

- ``heapa_defaults.yaml``: the public block, the knobs a run is about (``PUBLIC_LEAF_LIMIT`` at most);
- ``heapa_internals.yaml``: plumbing (``INTERNAL_KEYS``: bounds, timeouts, retry back-off, the augmentation and
  teacher prompt texts, bucket resolution) at the same keys, out of the file a person reads;
- ``heapa_deprecated.yaml``: keys that moved (``MOVED_KEYS``, ``verl_ext/adapters/heapa_block.py``), null. Set,
  they still apply where they applied before, for one release, with a warning naming the new key.
"""

from __future__ import annotations

from typing import Any, Mapping

from verl_ext.adapters.heapa_block import MOVED_KEYS, apply_moved_keys  # noqa: F401  (the recipe's names for them)
from verl_ext.pool.config import FRONTIER_FIELDS

PUBLIC_LEAF_LIMIT = 75  # 75 today: one screen; a method that needs more moves plumbing to INTERNAL_KEYS first

INTERNAL_KEYS = (
    "pool.metrics_window", "pool.resolution", "pool.archive_capacity", "pool.history_length", "pool.track_changes",
    "pool.stale_discount",
    "poll_interval_s",
    "rows.suffix_separator",
    "lineage.cadence", "lineage.mode", "lineage.max_nodes",
    "augmentation.stop", "augmentation.max_candidate_chars", "augmentation.seen_capacity",
    "augmentation.instruction", "augmentation.answer_format", "augmentation.shots",
    "teacher.max_backoff_s", "teacher.max_retry_after_s", "teacher.queue_capacity", "teacher.json_mode",
    "teacher.temperature", "teacher.max_tokens", "teacher.extra_body", "teacher.max_clean_chars",
    "teacher.max_answer_chars", "teacher.latency_window", "teacher.probe_timeout_s", "teacher.prompt",
    "ar3po.reuse.capacity", "ar3po.reuse.max_age", "ar3po.reuse.mark_field",
    "allocation.minimum", "allocation.maximum", "allocation.history",
    "hive.probe_max_tokens",
    "run.requeue_exit_code", "run.watchdog.poll_s", "run.watchdog.first_step_s",
)

def legacy_pool_options(block: Mapping[str, Any]) -> dict[str, Any]:
    """The frontier knobs a (migrated) block sets at their old ``heapa.pool.*`` keys."""
    pool = block.get("pool") if isinstance(block.get("pool"), Mapping) else {}
    return {name: pool[name] for name in FRONTIER_FIELDS if name in pool}
