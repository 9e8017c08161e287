"""The actor worker group as the trainer holds it: verl's, with the step's update settings applied.

verl's ``_update_actor`` writes ``mini_batch_size`` and ``global_batch_size`` into the batch's ``extra_info`` from
the config and calls ``actor_rollout_wg.update_actor``. AR3PO's uneven groups and
``heapa.update.sequence_mean_over`` need other values there (``update_plan.py``). ``ActorWorkers`` is installed
once, when verl builds the worker group (``HeapaTrainer.actor_rollout_wg``), and never swapped: every call goes to
verl's group unchanged, except ``update_actor`` inside ``applying(overrides)``, which first applies the overrides
and keeps what the worker reports (one ``grad_norm`` per optimizer step) for ``update/*`` metrics.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


class UpdateReport:
    """What the worker reported for one ``update_actor`` call."""

    def __init__(self) -> None:
        self.grad_norms: list[float] = []

    def read(self, output: Any) -> None:
        norms = output["metrics"].get("grad_norm") if output is not None else None
        if norms is not None:
            self.grad_norms = [float(x) for x in (norms if isinstance(norms, list) else [norms])]

    def metrics(self) -> dict[str, float]:
        """``update/optimizer_steps``: optimizer steps the worker ran (one ``grad_norm`` each)."""
        if not self.grad_norms:
            return {}
        return {"update/optimizer_steps": float(len(self.grad_norms)),
                "update/grad_norm_first": self.grad_norms[0]}


class ActorWorkers:
    """verl's actor worker group; every attribute but ``update_actor`` and ``applying`` is the group's."""

    # Its own attributes carry a prefix the worker group's never has: a plain name (``workers``, the group's list
    # of Ray actors) would hide the group's attribute from verl.
    def __init__(self, workers: Any) -> None:
        self.heapa_group = workers
        self._heapa_overrides: dict[str, Any] | None = None
        self._heapa_report: UpdateReport | None = None

    @contextmanager
    def applying(self, overrides: dict[str, Any]) -> Iterator[UpdateReport]:
        """``update_actor`` calls inside the block get ``overrides`` in their ``extra_info``; yields their report."""
        report = UpdateReport()
        self._heapa_overrides, self._heapa_report = dict(overrides), report
        try:
            yield report
        finally:
            self._heapa_overrides = self._heapa_report = None

    def update_actor(self, batch: Any) -> Any:
        if self._heapa_overrides:
            batch.extra_info.update(self._heapa_overrides)
        output = self.heapa_group.update_actor(batch)
        if self._heapa_report is not None:
            self._heapa_report.read(output)
        return output

    def __getattr__(self, name: str) -> Any:
        if name == "heapa_group":  # not set yet (a copy being built): no recursion through __getattr__
            raise AttributeError(name)
        return getattr(self.heapa_group, name)
