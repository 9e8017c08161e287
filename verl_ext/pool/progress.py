"""``DrawProgress``: what the ``progress`` frontier (``boundary: progress``) measures about its two draw rules.

Each frontier seat of a ``progress`` batch is drawn by one of two arms: ``target`` (the records nearest
``target_pass_rate``) or ``signal`` (weight ``v(1-v)`` over every scored record). When a record drawn by an arm
comes back (``QueryPool.feedback``), the tracker folds two numbers into that arm's decayed means:

- the group's reward spread ``2*sqrt(q(1-q))`` (``q`` = passes/n): how much GRPO signal the seat carried;
- the record's progress since its previous visit, ``logit(q) - logit(q_before)`` with both rates smoothed
  (``(passes + 0.5) / (n + 1)``); only for records measured before. Records the policy is still learning move up
  between visits (by their own training, by their topic's, by transfer); records it cannot learn do not.

An arm's value is ``spread * max(progress, 0)``: signal that moves pass rates. The signal share of the next batch
is ``1 - min_share`` while the signal arm's value is higher, else ``min_share`` (each arm keeps at least
``min_share`` of the seats, so both stay measured). Before both arms have ``min_count`` (decayed) re-visits the
share is ``min_share``: target-like. Why these measurements: where training near 0.5 lifts the whole topic, the
target arm's records carry more spread and move as much, so the share stays at its floor; where the easy skills
are learned only by training them (levels without transfer), the target arm's records stop moving once it is
left with problems it cannot learn, while the signal arm's easy records still move.

State (JSON-safe, checkpointed with the pool under ``boundary: progress``): the arm of every drawn record still
awaiting feedback, the decayed sums, and the share chosen last.
"""

from __future__ import annotations

import math
from typing import Any

ARMS = ("target", "signal")
TARGET, SIGNAL = 0, 1


def smoothed_logit(passes: float, n: float) -> float:
    """``logit((passes + 0.5) / (n + 1))``: finite for all-wrong and all-right groups."""
    p = (passes + 0.5) / (n + 1.0)
    return math.log(p / (1.0 - p))


class DrawProgress:
    """Decayed per-arm means of the spread and the between-visit progress of the records each arm drew."""

    def __init__(self, decay: float = 0.995, min_share: float = 0.1, min_count: float = 20.0) -> None:
        if not 0.0 <= decay < 1.0:
            raise ValueError(f"DrawProgress decay must lie in [0, 1), got {decay!r}")
        if not 0.0 <= min_share <= 0.5:
            raise ValueError(f"DrawProgress min_share must lie in [0, 0.5], got {min_share!r}")
        self.decay, self.min_share, self.min_count = decay, min_share, min_count
        self.pending: dict[int, int] = {}  # record id -> arm that drew it, until its feedback
        self.spread_sum = [0.0, 0.0]
        self.spread_weight = [0.0, 0.0]
        self.progress_sum = [0.0, 0.0]
        self.progress_weight = [0.0, 0.0]
        self.share = min_share  # the signal share chosen last

    def note(self, ids: list[int], arm: int) -> None:
        """``ids`` were drawn by ``arm`` (``TARGET`` or ``SIGNAL``)."""
        for rid in ids:
            self.pending[int(rid)] = arm

    def forget(self, ids: list[int]) -> None:
        """``ids`` left the batch before training (released, evicted): nothing to learn from them."""
        for rid in ids:
            self.pending.pop(int(rid), None)

    def observe(self, rid: int, last_pass: float | None, passes: int, n: int) -> None:
        """A fed-back record: its previous group pass rate (``None`` if never measured) and this group."""
        arm = self.pending.pop(rid, None)
        if arm is None or n <= 0:
            return
        d = self.decay
        q = passes / n
        self.spread_sum[arm] = d * self.spread_sum[arm] + 2.0 * math.sqrt(q * (1.0 - q))
        self.spread_weight[arm] = d * self.spread_weight[arm] + 1.0
        if last_pass is not None:
            moved = smoothed_logit(passes, n) - smoothed_logit(last_pass * n, n)
            self.progress_sum[arm] = d * self.progress_sum[arm] + moved
            self.progress_weight[arm] = d * self.progress_weight[arm] + 1.0

    def spread(self, arm: int) -> float | None:
        w = self.spread_weight[arm]
        return self.spread_sum[arm] / w if w > 0 else None

    def progress(self, arm: int) -> float | None:
        w = self.progress_weight[arm]
        return self.progress_sum[arm] / w if w > 0 else None

    def value(self, arm: int) -> float | None:
        """``spread * max(progress, 0)``; ``None`` before ``min_count`` (decayed) re-visits of the arm."""
        spread, progress = self.spread(arm), self.progress(arm)
        if spread is None or progress is None or self.progress_weight[arm] < self.min_count:
            return None
        return spread * max(progress, 0.0)

    def choose(self) -> float:
        """The signal share of the next batch's frontier seats (also kept as ``share``)."""
        v_target, v_signal = self.value(TARGET), self.value(SIGNAL)
        if v_target is None or v_signal is None or v_signal <= v_target:
            self.share = self.min_share
        else:
            self.share = 1.0 - self.min_share
        return self.share

    def metrics(self) -> dict[str, float]:
        """``pool/progress_*``: the share chosen last and each arm's measurements (-1 before any)."""
        out = {"pool/progress_share": self.share, "pool/progress_pending": float(len(self.pending))}
        for arm, name in enumerate(ARMS):
            for what, get in (("spread", self.spread), ("gain", self.progress), ("value", self.value)):
                got = get(arm)
                out[f"pool/progress_{what}_{name}"] = -1.0 if got is None else got
        return out

    def state_dict(self) -> dict[str, Any]:
        return {"decay": self.decay, "min_share": self.min_share, "min_count": self.min_count,
                "pending": [[rid, arm] for rid, arm in self.pending.items()],
                "spread_sum": list(self.spread_sum), "spread_weight": list(self.spread_weight),
                "progress_sum": list(self.progress_sum), "progress_weight": list(self.progress_weight),
                "share": self.share}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.pending = {int(rid): int(arm) for rid, arm in state["pending"]}
        for name in ("spread_sum", "spread_weight", "progress_sum", "progress_weight"):
            values = [float(v) for v in state[name]]
            if len(values) != len(ARMS):
                raise ValueError(f"DrawProgress state {name} has {len(values)} values, expected {len(ARMS)}")
            setattr(self, name, values)
        self.share = float(state["share"])
