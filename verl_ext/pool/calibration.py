"""``ChildCalibration``: how often accepted children turn out unsolvable, learned from their first measurement.

A teacher lets some unsolvable problems through (how many depends on the teacher and cannot be known in
advance). An unsolvable child scores 0/n however good its parent-derived estimate looks, so a batch slot given to
it is wasted. The pool cannot tell which child is bad before measuring it, but it can learn the *rate*: when a
child is measured for the first time, an all-wrong group is expected with probability ``(1 - p)^n`` from its
estimate ``p``; all-wrong groups beyond that expectation are the unsolvable share. Counts decay (``decay`` per
observation), so the estimate follows a teacher whose quality drifts.

``frontier_penalty`` turns the rate into a distance: a child is expected to carry the GRPO signal (reward spread
``2*sqrt(p(1-p))``) of its estimate times the share ``q`` of valid children, i.e. as much as a measured seed at
distance ``0.5*sqrt(1 - q^2)`` from 0.5. With 2% unsolvable that is 0.1, with 37% it is 0.39: children fill the
batch only when measured seeds that close to the frontier run out.
"""

from __future__ import annotations

import math
from typing import Any


class ChildCalibration:
    """Decayed counts of first-measured children: groups, all-wrong groups, and all-wrong groups expected."""

    __slots__ = ("decay", "prior_count", "count", "observed", "expected")

    def __init__(self, decay: float = 0.995, prior_count: float = 10.0) -> None:
        self.decay = decay
        self.prior_count = prior_count  # pseudo-children with no excess failures: no penalty before evidence
        self.count = 0.0
        self.observed = 0.0
        self.expected = 0.0

    def observe(self, estimate: float, passes: int, n: int) -> None:
        """A child measured for the first time: its estimate before the measurement, and the outcome."""
        d = self.decay
        self.count = d * self.count + 1.0
        self.observed = d * self.observed + (1.0 if passes == 0 else 0.0)
        self.expected = d * self.expected + (1.0 - estimate) ** n

    @property
    def invalid_rate(self) -> float:
        """Estimated share of accepted children that cannot be solved, in [0, 1]."""
        excess = self.observed - self.expected
        room = self.count + self.prior_count - self.expected
        return min(1.0, max(0.0, excess / room)) if room > 0 else 0.0

    def frontier_penalty(self) -> float:
        """Distance (in pass rate) a child's estimate is moved away from the target when ranking it."""
        q = 1.0 - self.invalid_rate
        return 0.5 * math.sqrt(max(0.0, 1.0 - q * q))

    def metrics(self) -> dict[str, float]:
        return {"pool/child_invalid_rate": self.invalid_rate, "pool/child_penalty": self.frontier_penalty(),
                "pool/child_first_measured": self.count}

    def state_dict(self) -> dict[str, Any]:
        return {"count": self.count, "observed": self.observed, "expected": self.expected}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.count, self.observed, self.expected = (float(state[k]) for k in ("count", "observed", "expected"))
