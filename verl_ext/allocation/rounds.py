"""Reinforce-Ada's adaptive sampling (arXiv 2510.04996): rounds of responses until a prompt's exit rule holds, then
the group the update sees cut back to ``n``.

Each round gives every still-active prompt ``round_size`` more responses; a prompt leaves once its rule holds
(``positive``: at least one correct response; ``balanced``: at least ``n / 2`` correct and ``n / 2`` wrong, the
paper's default) or it has ``max_per_prompt``. The kept group is ``n`` responses, balanced where the prompt has
enough of both kinds (``n / 2`` each), otherwise every response of the scarcer kind and the rest from the other.
The paper's advantage baseline uses every generated response (``global_stat_est``); that is the recipe's part.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

EXITS = ("balanced", "positive")


@dataclass(frozen=True)
class RoundsConfig:
    """``round_size`` 0 = ``n``; ``max_per_prompt`` 0 = ``4 * n``."""

    exit: Literal["balanced", "positive"] = "balanced"
    round_size: int = 0
    max_per_prompt: int = 0

    def sizes(self, n: int) -> tuple[int, int]:
        """(responses per round, the per-prompt cap) for groups of ``n``."""
        if self.exit not in EXITS:
            raise ValueError(f"exit must be one of {EXITS}, got {self.exit!r}")
        step, cap = self.round_size or n, self.max_per_prompt or 4 * n
        if not 1 <= step <= cap or cap < n:
            raise ValueError(f"rounds need 1 <= round_size ({step}) <= max_per_prompt ({cap}) and n ({n}) <= it")
        return step, cap


def has_exited(passes: int, total: int, n: int, rule: str) -> bool:
    """Whether a prompt with ``passes`` correct of ``total`` stops sampling under ``rule``."""
    if rule == "positive":
        return passes >= 1
    half = n // 2  # odd n: the kept group has one more of whichever kind has more
    return total >= n and passes >= half and total - passes >= half


def kept_passes(passes: int, total: int, n: int) -> int:
    """Correct responses among the ``n`` kept of ``total`` (``total >= n``): ``n / 2`` of each kind where both have
    that many, else every response of the scarcer kind."""
    if total < n:
        raise ValueError(f"cannot keep {n} responses of {total}")
    return min(passes, max(n // 2, n - (total - passes)))
