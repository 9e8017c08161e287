"""Which fields of the ``heapa:`` block a person reads first, which are plumbing, and which moved.

The config models (``settings.py`` and the components it nests) hold every field. ``config_defaults`` writes them
into three files that ``heapa_trainer.yaml`` pulls in, so every key stays a plain Hydra override:

- ``heapa_defaults.yaml``: the public block, the knobs a run is about (``PUBLIC_LEAF_LIMIT`` at most);
- ``heapa_internals.yaml``: plumbing (``INTERNAL_KEYS``: bounds, timeouts, retry back-off, the augmentation and
  teacher prompt texts, bucket resolution) at the same keys, out of the file a person reads;
- ``heapa_deprecated.yaml``: keys that moved (``MOVED_KEYS``), null. Set, they still apply where they applied
  before, for one release, with a warning naming the new key.
"""

from __future__ import annotations

import logging
from typing import Any, Mapping

from verl_ext.adapters.feedback import PASS_THRESHOLD
from verl_ext.pool.config import FRONTIER_FIELDS

logger = logging.getLogger(__name__)

PUBLIC_LEAF_LIMIT = 70

INTERNAL_KEYS = (
    "pool.metrics_window", "pool.resolution", "pool.archive_capacity", "pool.history_length", "pool.track_changes",
    "poll_interval_s",
    "rows.suffix_separator",
    "lineage.cadence", "lineage.mode", "lineage.max_nodes",
    "augmentation.stop", "augmentation.max_candidate_chars", "augmentation.seen_capacity",
    "augmentation.instruction", "augmentation.answer_format", "augmentation.shots",
    "teacher.max_backoff_s", "teacher.max_retry_after_s", "teacher.queue_capacity", "teacher.json_mode",
    "teacher.temperature", "teacher.max_tokens", "teacher.extra_body", "teacher.max_clean_chars",
    "teacher.max_answer_chars", "teacher.latency_window", "teacher.probe_timeout_s", "teacher.prompt",
    "ar3po.reuse.capacity", "ar3po.reuse.max_age", "ar3po.reuse.mark_field",
    "hive.probe_max_tokens",
    "run.requeue_exit_code", "run.watchdog.poll_s",
)

# old key -> its home now. The frontier's knobs are the boundary strategy's options, like every other strategy's;
# AR3PO counts a response correct by the one pass threshold the pool uses.
MOVED_KEYS: dict[str, str] = {
    **{f"pool.{name}": f"selection.kwargs.{name}" for name in FRONTIER_FIELDS},
    "ar3po.success_threshold": "feedback.pass_threshold",
}


def apply_moved_keys(block: Mapping[str, Any]) -> dict[str, Any]:
    """``block`` (a plain ``heapa`` dict) with the moved keys settled: an unset (null) one dropped, a set one kept
    where it applied before, with a warning; AR3PO's threshold taken from ``feedback.pass_threshold`` unless its
    old key is set."""
    out = {k: dict(v) if isinstance(v, Mapping) else v for k, v in block.items()}
    for old, new in MOVED_KEYS.items():
        section, key = old.split(".")
        if not isinstance(out.get(section), dict) or key not in out[section]:
            continue
        if out[section][key] is None:
            del out[section][key]
            continue
        logger.warning("heapa.%s is deprecated and goes in the next release: set heapa.%s instead (it applies "
                       "as before meanwhile)", old, new)
    ar3po = out.get("ar3po") if isinstance(out.get("ar3po"), dict) else {}
    if "success_threshold" not in ar3po:
        feedback = out.get("feedback") if isinstance(out.get("feedback"), dict) else {}
        threshold = feedback.get("pass_threshold")
        ar3po["success_threshold"] = PASS_THRESHOLD if threshold is None else threshold
    out["ar3po"] = ar3po
    return out


def legacy_pool_options(block: Mapping[str, Any]) -> dict[str, Any]:
    """The frontier knobs a (migrated) block sets at their old ``heapa.pool.*`` keys."""
    pool = block.get("pool") if isinstance(block.get("pool"), Mapping) else {}
    return {name: pool[name] for name in FRONTIER_FIELDS if name in pool}
