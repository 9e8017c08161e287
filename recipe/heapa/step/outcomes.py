"""One owner of what a step's rollouts told the pool.

Outcomes arrive by two routes: groups verl evicts before training (DAPO's filter, failed rollouts) are reported by
the replay buffer as they are evicted (``step/replay_buffer.py``) and fed back at once, so those records reach the
archive and can be reinserted within the step; the trained groups are fed back at the step's end from the step's
view (``step/batch_view.py``). ``StepOutcomes`` takes both, feeds the pool through ``feed`` (the batch sampler's
``on_feedback``), keeps the step's reward info (timeouts, errors) and the pass rates the next augmentation picks
its parents from, and hands the step's scalars over once in ``close``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from verl_ext.reward import reward_metrics

from recipe.heapa.step.batch_view import Outcomes, StepBatch


class StepOutcomes:
    def __init__(self, feed: Callable[[Outcomes], Any]) -> None:
        self.feed = feed
        self.reward_infos: list = []  # this step's reward_extra_info, trained and evicted trajectories
        self.last_pass_rates: dict[int, float] = {}  # the last step's measured records (augmentation parents)
        self._evicted: set[int] = set()
        self._evicted_rates: dict[int, float] = {}
        self._evicted_feedbacks = 0
        self._trained: set[int] = set()
        self._summary = None

    def evicted(self, outcomes: Outcomes) -> None:
        """The replay buffer's report of groups it is about to clear."""
        summary = self.feed(outcomes)
        self._evicted_feedbacks += len(outcomes)  # a record can be evicted, reinserted and evicted again
        self._evicted.update(outcomes)
        self._evicted_rates.update({int(k): float(v) for k, v in summary.pass_rates.items()})

    def trained(self, view: StepBatch, threshold: float) -> None:
        """The step's trained groups: the generated rows of the view, by record id."""
        outcomes = view.outcomes(threshold)
        self.reward_infos.extend(view.reward_infos())
        self._summary = self.feed(outcomes)
        self._trained = set(outcomes)
        self.last_pass_rates = {**self._evicted_rates,
                                **{int(k): float(v) for k, v in self._summary.pass_rates.items()}}

    def records(self) -> list[int]:
        """Every record fed back this step (trained or evicted)."""
        return sorted(self._trained | self._evicted)

    def close(self) -> dict[str, float]:
        """The step's ``feedback/*`` and ``reward/*`` scalars; starts the next step."""
        metrics = dict(self._summary.metrics()) if self._summary is not None else {}
        metrics.update(reward_metrics(self.reward_infos))  # reward/timeouts, reward/errors (evicted groups too)
        metrics["feedback/evicted_groups_fed_back"] = float(self._evicted_feedbacks)
        self.reward_infos.clear()
        self._evicted, self._evicted_rates, self._evicted_feedbacks = set(), {}, 0
        self._trained, self._summary = set(), None
        return metrics
