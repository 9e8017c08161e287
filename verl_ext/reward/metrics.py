"""Step metrics from per-trajectory reward info: ``reward/timeouts``, ``reward/errors`` and their rates.

verl 0.9.1 stores each trajectory's ``reward_extra_info`` (``timeout`` and ``error`` are 0/1 there) but logs it
only for validation (``val-aux/<data_source>/timeout/mean@N``); a trainer turns a step's infos into counts with
``reward_metrics``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any


def reward_metrics(infos: Iterable[Mapping[str, Any] | None]) -> dict[str, float]:
    """``reward/timeouts`` and ``reward/errors`` (counts), ``reward/timeout_rate``, ``reward/error_rate``."""
    n = timeouts = errors = 0
    for info in infos:
        if not info:
            continue
        n += 1
        timeouts += bool(info.get("timeout") or 0)
        errors += bool(info.get("error") or 0)
    return {"reward/timeouts": float(timeouts), "reward/errors": float(errors),
            "reward/timeout_rate": timeouts / n if n else 0.0, "reward/error_rate": errors / n if n else 0.0}
