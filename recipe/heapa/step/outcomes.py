"""What one step's rollouts told the pool, by record id.

Outcomes arrive by two routes: groups verl evicts before training (DAPO's filter, failed rollouts) are reported by
the replay buffer as they are evicted (``replay_buffer.py``) and fed back at once, so those records reach the
archive and can be reinserted within the step; the trained groups are fed back at the step's end from the step's
view (``batch_view.py``). ``StepOutcomes`` takes both, feeds the pool through the batch sampler's ``on_feedback``,
keeps the step's reward info (timeouts, errors) and the pass rates the next augmentation picks its parents from.
One per step (``context.py``).
"""

from __future__ import annotations

from typing import Any

from recipe.heapa.step.batch_view import Outcomes, StepBatch
from verl_ext.reward import reward_metrics


class StepOutcomes:
    def __init__(self, sampler: Any, step: int) -> None:
        self.sampler = sampler  # PoolBatchSampler: on_feedback(outcomes, step) updates the records' estimators
        self.step = step
        self.reward_infos: list = []  # reward_extra_info of the trained and the evicted trajectories
        self._evicted: set[int] = set()
        self._evicted_rates: dict[int, float] = {}
        self._evicted_feedbacks = 0
        self._trained: set[int] = set()
        self._summary = None

    def evicted(self, outcomes: Outcomes, selected_at: dict[int, int] | None = None) -> None:
        """The replay buffer's report of groups it is about to clear (``selected_at``: record -> the step that
        selected its group, ``in_flight.py``)."""
        summary = self.sampler.on_feedback(outcomes, self.step, selected_at)
        self._evicted_feedbacks += len(outcomes)  # a record can be evicted, reinserted and evicted again
        self._evicted.update(outcomes)
        self._evicted_rates.update({int(k): float(v) for k, v in summary.pass_rates.items()})

    def trained(self, view: StepBatch, threshold: float, selected_at: dict[int, int] | None = None) -> None:
        """The step's trained groups: the generated rows of the view, by record id."""
        outcomes = view.outcomes(threshold)
        self.reward_infos.extend(view.reward_infos())
        self._summary = self.sampler.on_feedback(outcomes, self.step, selected_at)
        self._trained = set(outcomes)

    def pass_rates(self) -> dict[int, float]:
        """Every measured record's pass rate this step (trained over evicted): the next augmentation's parents."""
        trained = self._summary.pass_rates.items() if self._summary is not None else ()
        return {**self._evicted_rates, **{int(k): float(v) for k, v in trained}}

    def records(self) -> list[int]:
        """Every record fed back this step (trained or evicted)."""
        return sorted(self._trained | self._evicted)

    def metrics(self) -> dict[str, float]:
        """The step's ``feedback/*`` and ``reward/*`` scalars."""
        metrics = dict(self._summary.metrics()) if self._summary is not None else {}
        metrics.update(reward_metrics(self.reward_infos))  # reward/timeouts, reward/errors (evicted groups too)
        metrics["feedback/evicted_groups_fed_back"] = float(self._evicted_feedbacks)
        return metrics
