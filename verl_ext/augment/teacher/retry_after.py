"""How long a server asked us to wait: ``Retry-After`` (seconds or an HTTP date) or OpenAI's ``retry-after-ms``."""

from __future__ import annotations

import email.utils
import math
import time
from collections.abc import Mapping


def retry_after_seconds(headers: Mapping[str, str], now: float | None = None) -> float | None:
    """Seconds to wait (>= 0), or None when the response names no usable delay; the caller caps it."""
    lowered = {str(k).lower(): str(v) for k, v in headers.items()}
    millis = _number(lowered.get("retry-after-ms"))
    if millis is not None:
        return millis / 1000.0
    value = lowered.get("retry-after")
    if value is None:
        return None
    seconds = _number(value)
    if seconds is not None:
        return seconds
    try:
        when = email.utils.parsedate_to_datetime(value.strip())
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


def _number(value: str | None) -> float | None:
    if value is None:
        return None
    try:
        number = float(value.strip())
    except ValueError:
        return None
    return number if math.isfinite(number) and number >= 0 else None
