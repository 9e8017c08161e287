"""One training step's state: created when the step begins, closed once at its end.

Every stage of the step reads and writes this object instead of fields of the trainer, in the order verl's
``_step_once`` calls the trainer's hooks:

========================  =============================================================================
``view``                  the sampled batch's trajectories, read once when verl balances the batch
``reuse``                 AR3PO: what reuse did to the batch (reused keys and records, per-record counts)
``rounds``                Reinforce-Ada: what the down-sampling kept, with each kept row's full-pool baseline
``allocated``             ``heapa.allocation``: each record's (correct, responses) at its allocated size
``update_plan``           AR3PO, allocation: the actor update for uneven groups (``update_plan.py``)
``signal_rows``           rows with a non-zero advantage (``heapa.update.sequence_mean_over``)
``outcomes``              what the step's rollouts told the pool: evicted groups as verl evicts them, the
                          trained ones at the step's end (``outcomes.py``)
``discarded``             responses and tokens generated this step and not trained (the rollout cost)
``children``              augmented problems that entered the pool this step
========================  =============================================================================

The rule for state that lasts one step: it lives here, and a new step starts from a new context, so nothing is
reset by hand. A long-lived helper that must count while verl runs its own code, where no context reaches (the
HIVE probe inside selection, the sampler's selection timer), hands over and resets its counters with one method,
``close_step()``, called once when the context closes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from recipe.heapa.step.batch_view import StepBatch
from recipe.heapa.step.outcomes import StepOutcomes
from recipe.heapa.step.update_plan import UpdatePlan


@dataclass
class StepContext:
    step: int
    outcomes: StepOutcomes
    view: StepBatch | None = None
    reuse: Any = None  # stages.ar3po.ReuseRecord when AR3PO is on
    rounds: Any = None  # stages.reinforce_ada.RoundsRecord when Reinforce-Ada is on
    allocated: dict[int, tuple[int, int]] | None = None  # heapa.allocation: {record id: (correct, responses)}
    update_plan: UpdatePlan | None = None
    signal_rows: int = 0
    discarded: list[int] = field(default_factory=lambda: [0, 0])  # responses, response tokens
    children: list[int] = field(default_factory=list)
    closed: bool = False

    def discard(self, responses: int, tokens: int) -> None:
        """Trajectories generated this step that will not be trained (evicted, surplus, replaced)."""
        self.discarded[0] += int(responses)
        self.discarded[1] += int(tokens)

    def take_view(self) -> StepBatch:
        """The step's trajectories, for the feedback at the step's end (verl sampled no batch: an error)."""
        if self.view is None:
            raise RuntimeError(f"step {self.step}: the trainer never saw the sampled batch (_balance_batch not called)")
        return self.view

    def close(self) -> None:
        if self.closed:
            raise RuntimeError(f"step {self.step} closed twice")
        self.closed = True
