"""``DrawProgress``: what the ``progress`` frontier (``boundary: progress``) measures about its two draw rules.

Each frontier seat of a ``progress`` batch is drawn by one of two arms: ``target`` (the records nearest
``target_pass_rate``) or ``signal`` (weight ``v(1-v)`` over every scored record). When a record drawn by an arm
comes back (``QueryPool.feedback``), the tracker folds two numbers into that arm's decayed means:

- the group's reward spread ``2*sqrt(q(1-q))`` (``q`` = passes/n): how much GRPO signal the seat carried;
- the record's gain since its previous visit, ``q - shrunk(q_before)``; only for records measured before. Records
  the policy is still learning move up between visits (by their own training, by their topic's, by transfer);
  records it cannot learn do not.

``shrunk`` is the previous group's pass rate pulled toward the pool's prior (a Beta fitted by moments to the
records' first measurements, which the draws do not choose): an arm draws records *because* of that previous
group, so a record drawn at a rate far above the pool's mean was more often measured high by luck and reads lower
the next time without having lost anything (regression to the mean). Unshrunk, that made the arm that draws near
0.5 from a hard pool look as if its records did not move (the simulator's ``mostly_too_hard``: measured +0.02
against a true +0.06 per re-visit, the signal draw +0.07 against +0.07), and the split gave its seats to the
draw that teaches less. The shrunk baseline's expectation is the record's pass rate at its previous visit when
the prior fits and the draw chose by that group alone (the pool's estimate also keeps older groups at a decayed
weight, so the correction is close, not exact).

An arm's value is ``spread * max(gain, 0)``: signal that moves pass rates. The signal share of the next batch
is ``1 - min_share`` while the signal arm's value is higher, else ``min_share`` (each arm keeps at least
``min_share`` of the seats, so both stay measured). Before both arms have ``min_count`` (decayed) re-visits the
share is ``min_share``: target-like. Why these measurements: where training near 0.5 lifts the whole topic, the
target arm's records carry more spread and move as much, so the share stays at its floor; where the easy skills
are learned only by training them (levels without transfer), the target arm's records stop moving once it is
left with problems it cannot learn, while the signal arm's easy records still move.

State (JSON-safe, checkpointed with the pool under ``boundary: progress``): the arm of every drawn record still
awaiting feedback, the decayed sums, the prior's decayed moments, and the share chosen last.
"""

from __future__ import annotations

import math
from typing import Any

ARMS = ("target", "signal")
TARGET, SIGNAL = 0, 1
MAX_PRIOR_STRENGTH = 100.0  # pseudo-counts; reached when first measurements vary no more than binomial noise


class DrawProgress:
    """Decayed per-arm means of the spread and the between-visit gain of the records each arm drew."""

    def __init__(self, decay: float = 0.995, min_share: float = 0.1, min_count: float = 20.0) -> None:
        if not 0.0 <= decay < 1.0:
            raise ValueError(f"DrawProgress decay must lie in [0, 1), got {decay!r}")
        if not 0.0 <= min_share <= 0.5:
            raise ValueError(f"DrawProgress min_share must lie in [0, 0.5], got {min_share!r}")
        self.decay, self.min_share, self.min_count = decay, min_share, min_count
        self.pending: dict[int, int] = {}  # record id -> arm that drew it, until its feedback
        self.share = min_share  # the signal share chosen last
        self._reset_sums()

    def _reset_sums(self) -> None:
        """The arms' decayed sums and the prior's moments, empty."""
        self.spread_sum, self.spread_weight = [0.0, 0.0], [0.0, 0.0]
        self.progress_sum, self.progress_weight = [0.0, 0.0], [0.0, 0.0]
        self.first = [0.0, 0.0, 0.0]  # first measurements: decayed weight, sum of q, sum of q^2 (the prior)

    def note(self, ids: list[int], arm: int) -> None:
        """``ids`` were drawn by ``arm`` (``TARGET`` or ``SIGNAL``)."""
        for rid in ids:
            self.pending[int(rid)] = arm

    def forget(self, ids: list[int]) -> None:
        """``ids`` left the batch before training (released, evicted): nothing to learn from them."""
        for rid in ids:
            self.pending.pop(int(rid), None)

    def observe(self, rid: int, last_pass: float | None, passes: int, n: int) -> None:
        """A fed-back record: its previous group pass rate (``None`` if never measured) and this group. Every
        record's first measurement feeds the prior, whichever drew it (cold draws, children); only records an
        arm drew feed that arm."""
        if n <= 0:
            self.pending.pop(rid, None)
            return
        d = self.decay
        q = passes / n
        if last_pass is None:
            w, s1, s2 = self.first
            self.first = [d * w + 1.0, d * s1 + q, d * s2 + q * q]
        arm = self.pending.pop(rid, None)
        if arm is None:
            return
        self.spread_sum[arm] = d * self.spread_sum[arm] + 2.0 * math.sqrt(q * (1.0 - q))
        self.spread_weight[arm] = d * self.spread_weight[arm] + 1.0
        if last_pass is not None:
            moved = q - self.shrunk(last_pass, n)
            self.progress_sum[arm] = d * self.progress_sum[arm] + moved
            self.progress_weight[arm] = d * self.progress_weight[arm] + 1.0

    def prior(self, n: int) -> tuple[float, float]:
        """Mean ``m`` and strength ``c`` (pseudo-counts) of the Beta prior over pass rates, by moments from the
        first measurements: their variance less the binomial noise of ``n``-response groups is the rates'
        variance ``var``, and ``c = m(1-m)/var - 1``. No first measurement yet: no shrinkage (``c`` = 0)."""
        w, s1, s2 = self.first
        if w <= 0:
            return 0.5, 0.0
        m = s1 / w
        var_q = max(s2 / w - m * m, 0.0)
        var = (var_q - m * (1.0 - m) / n) / (1.0 - 1.0 / n) if n > 1 else var_q
        if var * (MAX_PRIOR_STRENGTH + 1.0) <= m * (1.0 - m):
            return m, MAX_PRIOR_STRENGTH
        return m, max(m * (1.0 - m) / var - 1.0, 0.0)

    def shrunk(self, rate: float, n: int) -> float:
        """The expected pass rate of a record whose last ``n``-response group read ``rate``, under the prior (the
        group size of this visit stands for the last one's: the pool keeps only the rate)."""
        m, c = self.prior(n)
        return (rate * n + c * m) / (n + c)

    def spread(self, arm: int) -> float | None:
        w = self.spread_weight[arm]
        return self.spread_sum[arm] / w if w > 0 else None

    def gain(self, arm: int) -> float | None:
        w = self.progress_weight[arm]
        return self.progress_sum[arm] / w if w > 0 else None

    def value(self, arm: int) -> float | None:
        """``spread * max(gain, 0)``; ``None`` before ``min_count`` (decayed) re-visits of the arm."""
        spread, gain = self.spread(arm), self.gain(arm)
        if spread is None or gain is None or self.progress_weight[arm] < self.min_count:
            return None
        return spread * max(gain, 0.0)

    def choose(self) -> float:
        """The signal share of the next batch's frontier seats (also kept as ``share``)."""
        v_target, v_signal = self.value(TARGET), self.value(SIGNAL)
        if v_target is None or v_signal is None or v_signal <= v_target:
            self.share = self.min_share
        else:
            self.share = 1.0 - self.min_share
        return self.share

    def metrics(self) -> dict[str, float]:
        """``pool/progress_*``: the share chosen last, each arm's measurements (-1 before any) and the prior's
        mean and strength for 8-response groups."""
        m, c = self.prior(8)
        out = {"pool/progress_share": self.share, "pool/progress_pending": float(len(self.pending)),
               "pool/progress_prior_mean": m, "pool/progress_prior_strength": c}
        for arm, name in enumerate(ARMS):
            for what, get in (("spread", self.spread), ("gain", self.gain), ("value", self.value)):
                got = get(arm)
                out[f"pool/progress_{what}_{name}"] = -1.0 if got is None else got
        return out

    def state_dict(self) -> dict[str, Any]:
        return {"decay": self.decay, "min_share": self.min_share, "min_count": self.min_count,
                "pending": [[rid, arm] for rid, arm in self.pending.items()],
                "spread_sum": list(self.spread_sum), "spread_weight": list(self.spread_weight),
                "progress_sum": list(self.progress_sum), "progress_weight": list(self.progress_weight),
                "share": self.share, "first": list(self.first)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.pending = {int(rid): int(arm) for rid, arm in state["pending"]}
        self.share = float(state["share"])
        if "first" not in state:
            # written when the gain was a logit difference, unshrunk: those sums do not mean the same thing, so
            # the measurement starts afresh (the share chosen last and the pending draws carry over)
            self._reset_sums()
            return
        self.first = [float(v) for v in state["first"]]
        if len(self.first) != 3:
            raise ValueError(f"DrawProgress state first has {len(self.first)} values, expected 3")
        for name in ("spread_sum", "spread_weight", "progress_sum", "progress_weight"):
            values = [float(v) for v in state[name]]
            if len(values) != len(ARMS):
                raise ValueError(f"DrawProgress state {name} has {len(values)} values, expected {len(ARMS)}")
            setattr(self, name, values)
