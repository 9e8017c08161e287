"""The trainer config's ``heapa:`` block as a plain dict with its moved keys settled, for every reader of it.

The recipe parses the block once (``recipe/heapa/settings.py``), but Ray workers read their part of it from the
config they are handed (AR3PO's agent loop: ``heapa.ar3po``, ``heapa.feedback``); both go through
``apply_moved_keys`` so a key that moved means the same everywhere.
"""

from __future__ import annotations

import logging
from typing import Any, Mapping

from verl_ext.adapters.feedback import PASS_THRESHOLD
from verl_ext.pool.config import FRONTIER_FIELDS

logger = logging.getLogger(__name__)

# old key -> its home now. The frontier's knobs are the boundary strategy's options, like every other strategy's;
# AR3PO counts a response correct by the one pass threshold the pool uses.
MOVED_KEYS: dict[str, str] = {
    **{f"pool.{name}": f"selection.kwargs.{name}" for name in FRONTIER_FIELDS},
    "ar3po.success_threshold": "feedback.pass_threshold",
}


def apply_moved_keys(block: Mapping[str, Any], warn: bool = True) -> dict[str, Any]:
    """``block`` (a plain ``heapa`` dict) with the moved keys settled: an unset (null) one dropped, a set one kept
    where it applied before (with a warning when ``warn``); AR3PO's threshold taken from
    ``feedback.pass_threshold`` unless its old key is set."""
    out = {k: dict(v) if isinstance(v, Mapping) else v for k, v in block.items()}
    for old, new in MOVED_KEYS.items():
        section, key = old.split(".")
        if not isinstance(out.get(section), dict) or key not in out[section]:
            continue
        if out[section][key] is None:
            del out[section][key]
        elif warn:
            logger.warning("heapa.%s is deprecated and goes in the next release: set heapa.%s instead (it applies "
                           "as before meanwhile)", old, new)
    ar3po = out.get("ar3po") if isinstance(out.get("ar3po"), dict) else {}
    if "success_threshold" not in ar3po:
        feedback = out.get("feedback") if isinstance(out.get("feedback"), dict) else {}
        threshold = feedback.get("pass_threshold")
        ar3po["success_threshold"] = PASS_THRESHOLD if threshold is None else threshold
    out["ar3po"] = ar3po
    return out
