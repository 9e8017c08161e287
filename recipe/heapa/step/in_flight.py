"""The prompt groups handed to verl's rollout and not yet heard back, keyed by verl's group uid.

In verl's asynchronous trainers a group is selected at one step and trained (or evicted) at a later one: the
warm-up batches before the first step, the batch each step adds for the next, the refills of evicted groups.
``InFlight`` remembers, for every uid handed out, the pool record it rolls out and the step that selected it, so
that the step which hears the group back can say how late its feedback is (``feedback/delay_*``) and an evicted
group that carries no reward (a failed rollout) releases its record instead of holding it in flight for the rest
of the run. Checkpointed with the recipe's state: verl re-issues the in-flight groups under their uids on resume.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any


class InFlight:
    def __init__(self) -> None:
        self._groups: dict[str, tuple[int, int]] = {}  # uid -> (record id, step that selected it)
        self._delays: list[int] = []  # the open step's feedback delays, one per group heard back
        # since the last step closed, in order: [record, +1] handed out, [record, -1] heard back (the trace's ``flow``)
        self.flow: list[list[int]] = []

    def handed_out(self, uids: Iterable[str], records: Iterable[int], step: int) -> None:
        uids, records = list(uids), [int(r) for r in records]
        if len(uids) != len(records):
            raise ValueError(f"{len(uids)} uids for {len(records)} records")
        for uid, rid in zip(uids, records):
            if uid in self._groups:
                raise ValueError(f"group uid {uid!r} handed out twice (record {self._groups[uid][0]} and {rid})")
            self._groups[uid] = (rid, int(step))
            self.flow.append([rid, 1])

    def heard(self, uids: Iterable[str], step: int) -> dict[int, int]:
        """Groups trained or evicted at ``step``: they leave; returns record id -> the step that selected it, the
        policy version the pool's estimate will come from (unknown uids skipped, e.g. AR3PO's reused rows carry a
        group's uid that was heard already)."""
        records: dict[int, int] = {}
        for uid in dict.fromkeys(uids):
            held = self._groups.pop(uid, None)
            if held is not None:
                records[held[0]] = held[1]
                self.flow.append([held[0], -1])
                self._delays.append(int(step) - held[1])
        return records

    def clear(self) -> list[int]:
        """Forget every group (the synchronous trainer releases what it did not train at each step's end)."""
        records = [rid for rid, _ in self._groups.values()]
        self._groups.clear()
        return records

    def __len__(self) -> int:
        return len(self._groups)

    def metrics(self) -> dict[str, float]:
        """The open step's ``feedback/delay_*``: steps from a group's selection to its feedback (0 in the
        synchronous trainer); the count still in flight. Resets the step's delays and flow."""
        delays, self._delays, self.flow = self._delays, [], []
        out = {"feedback/in_flight_groups": float(len(self._groups))}
        if delays:
            out.update({"feedback/delay_mean": sum(delays) / len(delays), "feedback/delay_max": float(max(delays))})
        return out

    def state_dict(self) -> dict[str, Any]:
        return {"groups": [[uid, rid, step] for uid, (rid, step) in self._groups.items()]}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self._groups = {str(uid): (int(rid), int(step)) for uid, rid, step in state["groups"]}
        self._delays, self.flow = [], []
