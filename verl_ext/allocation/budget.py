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

import dataclasses
import heapq
from collections import deque
from collections.abc import Hashable, Mapping, Sequence
from typing import Any, Callable

import numpy as np

from verl_ext.config_model import Bool, NonNegInt, PositiveInt, config_dataclass, parse
from verl_ext.state_schema import check_schema

STATE_SCHEMA_VERSION = 1


@config_dataclass(name="allocation")
class AllocationConfig:
    """``heapa.allocation``: ``minimum`` / ``maximum`` responses a prompt gets at least / at most (``maximum`` 0 =
    ``4 * n``); ``history``: the groups whose pass rates make the belief about a never-measured prompt."""

    enabled: Bool = False
    minimum: PositiveInt = 2
    maximum: NonNegInt = 0
    history: PositiveInt = 1024

    def bounds(self, n: int) -> tuple[int, int]:
        maximum = self.maximum or 4 * n
        if not 1 <= self.minimum <= n <= maximum:
            raise ValueError(f"allocation needs 1 <= minimum ({self.minimum}) <= n ({n}) <= maximum ({maximum})")
        return self.minimum, maximum

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "AllocationConfig":
        return parse(cls, data)


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
        # the increment in closed form: the difference of two mixed probabilities cancels to rounding noise near
        # p = 0 or 1, which would break the ties that keep equal beliefs at equal counts
        p, m = support[i], counts[i]
        return float(np.mean(p**m * (1.0 - p) + (1.0 - p) ** m * p))

    # equal increments (a rate of exactly 0 or 1 never mixes) go to the prompt with fewer responses, then the earlier
    heap = [(-gain(i), minimum, i) for i in range(k) if maximum > minimum]
    heapq.heapify(heap)
    for _ in range(min(budget - k * minimum, k * (maximum - minimum))):
        _, _, i = heapq.heappop(heap)
        counts[i] += 1
        if counts[i] < maximum:
            heapq.heappush(heap, (-gain(i), counts[i], i))
    return counts


class Allocator:
    """The budget allocation of a training run: each selection's ``k`` prompts share ``k * n`` responses
    (``allocate``), a prompt believed at ``estimate(id)`` (the pool's ``ranking_value``; None when never measured)
    or, never measured, at the quantiles of the last ``history`` groups' pass rates (``observe``). Stateful only
    in that history, which ``state_dict`` carries so a resumed run allocates as the uninterrupted one."""

    def __init__(self, config: AllocationConfig, n: int) -> None:
        self.minimum, self.maximum = config.bounds(n)
        self.n = int(n)
        self.recent: deque[float] = deque(maxlen=config.history)
        self.last: dict[str, float] = {}

    def plan(self, ids: Sequence[Hashable], estimate: Callable[[Hashable], float | None]) -> dict[Hashable, int]:
        """Responses per id for one selection (``len(ids) * n`` in all)."""
        if not ids:
            return {}
        prior = prior_support(self.recent)
        estimates = [estimate(i) for i in ids]
        beliefs = [prior if v is None else float(v) for v in estimates]
        sizes = allocate(beliefs, len(ids) * self.n, self.minimum, self.maximum)
        measured = sum(v is not None for v in estimates)
        mixed = [float(np.mean(mixed_probability(np.atleast_1d(b), m))) for b, m in zip(beliefs, sizes)]
        mixed_at_n = [float(np.mean(mixed_probability(np.atleast_1d(b), self.n))) for b in beliefs]
        self.last = {"select/alloc_measured_frac": measured / len(ids), "select/alloc_min": float(min(sizes)),
                     "select/alloc_max": float(max(sizes)),
                     "select/alloc_at_n_frac": sum(m == self.n for m in sizes) / len(ids),
                     "select/alloc_expected_mixed": sum(mixed), "select/alloc_expected_mixed_at_n": sum(mixed_at_n)}
        return dict(zip(ids, sizes))

    def observe(self, results: Mapping[Any, tuple[int, int]]) -> None:
        """Groups measured: ``{id: (passes, responses)}`` (the pool's feedback)."""
        self.recent.extend(p / m for p, m in results.values() if m > 0)

    def metrics(self) -> dict[str, float]:
        """The last plan's ``select/alloc_*`` scalars: measured share, smallest and largest group, expected mixed groups
        against fixed ``n``."""
        return dict(self.last)

    def state_dict(self) -> dict[str, Any]:
        return {"schema_version": STATE_SCHEMA_VERSION, "recent": list(self.recent)}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        check_schema(state, "Allocator", STATE_SCHEMA_VERSION)
        self.recent.clear()
        self.recent.extend(float(v) for v in state["recent"])
