"""``Strategy``: the one interface every prompt-selection method implements.

A strategy decides *which* records form the next training batch; the pool owns the records and their statistics.
Per step the trainer calls ``select(pool, k, step)`` (the returned ids are in flight in the pool), runs rollouts,
feeds the results to the pool (``pool.feedback``) and then to the strategy (``observe``), so strategies with their
own state (bandit posteriors, learned predictors) can update it. New methods are new files: subclass
``Strategy``, decorate with ``@register_strategy("name")``, and ``build_strategy("name", ...)`` finds them.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from verl_ext.state_schema import check_schema

if TYPE_CHECKING:  # typing only: strategies work with anything that offers the QueryPool API
    from verl_ext.pool import QueryPool

STATE_SCHEMA_VERSION = 1


class Strategy(ABC):
    """Base class. Subclasses set ``name`` (via ``register_strategy``) and implement ``select``."""

    name: ClassVar[str] = "base"
    # Options that configure the pool's own draw rather than the strategy object: names of ``PoolConfig`` fields,
    # validated with the other options (``heapa.selection.kwargs.*``) and set on the pool's config at start-up,
    # never passed to the constructor (the boundary strategy's rule draws from the pool's buckets).
    pool_fields: ClassVar[tuple[str, ...]] = ()

    @abstractmethod
    def select(self, pool: "QueryPool", k: int, step: int) -> list[int]:
        """Pick up to ``k`` available records, put them in flight in ``pool``, and return their ids."""

    def observe(self, results: Mapping[int, tuple[int, int]], step: int) -> None:
        """See the step's outcomes ``id -> (passes, n)`` (after ``pool.feedback``). Default: nothing to learn."""

    def metrics(self) -> dict[str, float]:
        """``select/*`` scalars for the tracker."""
        return {}

    def state_dict(self) -> dict[str, Any]:
        """JSON-safe state; subclasses extend the dict returned here (RNG state, learned parameters)."""
        return {"schema_version": STATE_SCHEMA_VERSION, "name": self.name}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Check that ``state`` belongs to this strategy; subclasses restore their fields after calling this."""
        check_schema(state, "strategy", STATE_SCHEMA_VERSION)
        if state.get("name") != self.name:
            raise ValueError(f"strategy state belongs to {state.get('name')!r}, not {self.name!r}")
