"""A step's response budget spread over its prompts so that as many groups as possible are mixed.

GRPO gives every prompt ``n`` responses. A group teaches only when it is mixed (some right, some wrong); with
pass rate ``p`` that happens with probability ``1 - p**m - (1 - p)**m`` for ``m`` responses. A prompt near 0.5 is
mixed at small ``m`` already; one at 0.05 needs many. The allocation maximises the expected number of mixed groups
under the same total as fixed ``n`` (``k * n``), each prompt between ``minimum`` and ``maximum`` responses.

Why greedy is exact: each prompt's expected value is concave in ``m`` (its increment, ``p**m (1 - p) + (1 - p)**m
p``, falls as ``m`` grows), and so is a mixture over a belief about ``p``; handing out one response at a time to the
largest increment then maximises the sum (``tests/unit/allocation/`` checks it against exhaustive search).

A prompt's belief is a few pass rates with equal weight: its estimate when the pool measured it, else
``prior_support`` of the rates measured so far (a never-measured prompt is as uncertain as the population).
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class AllocationConfig:
    """``minimum`` / ``maximum``: responses a prompt gets at least / at most (``maximum`` 0 = ``4 * n``)."""

    minimum: int = 2
    maximum: int = 0

    def bounds(self, n: int) -> tuple[int, int]:
        maximum = self.maximum or 4 * n
        if not 1 <= self.minimum <= n <= maximum:
            raise ValueError(f"allocation needs 1 <= minimum ({self.minimum}) <= n ({n}) <= maximum ({maximum})")
        return self.minimum, maximum


def mixed_probability(p: np.ndarray | float, m: int) -> np.ndarray:
    """P(a group of ``m`` responses is neither all right nor all wrong) for pass rate(s) ``p``."""
    p = np.asarray(p, dtype=np.float64)
    return 1.0 - p**m - (1.0 - p) ** m if m > 0 else np.zeros_like(p)


def prior_support(rates: Sequence[float], points: int = 16) -> np.ndarray:
    """``points`` quantiles of the measured ``rates`` (0.5 when none was measured): the belief about a prompt
    never measured."""
    rates = np.asarray(rates, dtype=np.float64)
    if rates.size == 0:
        return np.array([0.5])
    return np.quantile(rates, (np.arange(points) + 0.5) / points)


def allocate(beliefs: Sequence[np.ndarray | float], budget: int, minimum: int, maximum: int) -> list[int]:
    """Responses per prompt, in order: each in ``[minimum, maximum]``, ``budget`` in all where the bounds allow
    (``len * minimum <= budget``; beyond ``len * maximum`` the rest stays unspent), maximising the expected number
    of mixed groups. Ties go to the prompt with fewer responses, then the earlier one, so the result is a function
    of the inputs."""
    k = len(beliefs)
    if k == 0:
        return []
    if minimum < 1 or maximum < minimum:
        raise ValueError(f"need 1 <= minimum ({minimum}) <= maximum ({maximum})")
    if budget < k * minimum:
        raise ValueError(f"budget {budget} cannot give {k} prompts {minimum} responses each")
    support = [np.atleast_1d(np.asarray(b, dtype=np.float64)) for b in beliefs]
    counts = [minimum] * k

    def gain(i: int) -> float:
        p, m = support[i], counts[i]
        return float(np.mean(mixed_probability(p, m + 1) - mixed_probability(p, m)))

    # equal increments (a rate of exactly 0 or 1 never mixes) go to the prompt with fewer responses, then the earlier
    heap = [(-gain(i), minimum, i) for i in range(k) if maximum > minimum]
    heapq.heapify(heap)
    for _ in range(min(budget - k * minimum, k * (maximum - minimum))):
        _, _, i = heapq.heappop(heap)
        counts[i] += 1
        if counts[i] < maximum:
            heapq.heappush(heap, (-gain(i), counts[i], i))
    return counts
