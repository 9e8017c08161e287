"""One step's trajectories, read once from TransferQueue: the single place that knows a trajectory key's parts
and which rows were generated this step.

verl's sampled batch (a ``KVBatchMeta``: keys and tags) holds three kinds of rows:

- **generated**: ``{uid}_{session}_{output}`` trajectories rolled out this step (a multi-output agent loop writes
  several outputs per session; the last one carries the session's reward);
- **reused**: AR3PO's banked responses, written as new sessions of their group (tag ``ar3po_reused``): an old
  success, no news about the policy;
- **padding**: verl's synthetic rows (tag ``is_padding``), which copy a real row's fields, ``acc`` included.

``StepBatch.read`` fetches ``index`` (the pool record id) and ``extra_fields`` (the reward's
``reward_extra_info``) of the real rows in one TransferQueue call; the pool's feedback, AR3PO's accounting, HIVE's
response entropy and the evicted-group report all read this view instead of fetching and parsing again. AR3PO
edits it as it edits the batch (``add`` reused rows, ``drop`` replaced ones: a replaced response was still
generated, so it stays in the feedback).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import transfer_queue as tq

from verl_ext.adapters.feedback import group_outcomes
from verl_ext.reward.extra_info import acc_of, reward_info

REUSED_TAG = "ar3po_reused"  # TransferQueue tag of a response AR3PO reused from its bank (not generated this step)
Outcomes = dict[int, tuple[int, int]]


def parse_key(key: str) -> tuple[str, int, int] | None:
    """``{uid}_{session}_{output}`` -> (uid, session, output); None for a bare prompt uid or verl's other keys."""
    parts = key.rsplit("_", 2)
    if len(parts) != 3 or not parts[1].isdigit() or not parts[2].isdigit():
        return None
    return parts[0], int(parts[1]), int(parts[2])


@dataclass
class Trajectory:
    """One real row of the step's batch."""

    key: str
    uid: str
    session: int
    output: int
    record_id: int
    acc: Any  # reward_extra_info[acc_field]; None when the reward did not provide it
    tag: dict[str, Any]
    reward_info: dict[str, Any] = field(default_factory=dict)
    trained: bool = True  # False: generated, then replaced by an AR3PO reuse (not in the update)

    @property
    def reused(self) -> bool:
        return bool(self.tag.get(REUSED_TAG, False))


def is_real(key: str, tag: Mapping[str, Any]) -> bool:
    return not tag.get("is_padding", False) and parse_key(key) is not None


@dataclass
class StepBatch:
    """The real trajectories of a step (see the module docstring)."""

    partition_id: str
    rows: list[Trajectory]
    acc_field: str = "acc"

    @classmethod
    def read(cls, keys: Sequence[str], tags: Sequence[Mapping[str, Any]], partition_id: str,
             acc_field: str = "acc") -> "StepBatch":
        real = [(k, dict(t)) for k, t in zip(keys, tags) if is_real(k, t)]
        if not real:
            return cls(partition_id, [], acc_field)
        data = tq.kv_batch_get(keys=[k for k, _ in real], partition_id=partition_id,
                               select_fields=["index", "extra_fields"])
        rows = []
        for i, (key, tag) in enumerate(real):
            uid, session, output = parse_key(key)
            extra = data["extra_fields"][i]
            rows.append(Trajectory(key, uid, session, output, int(data["index"][i]), acc_of(extra, acc_field), tag,
                                   reward_info(extra)))
        return cls(partition_id, rows, acc_field)

    # ---- views ------------------------------------------------------------------------------------------------
    def generated(self) -> list[Trajectory]:
        """Rows rolled out this step (replaced ones included), not reused ones."""
        return [t for t in self.rows if not t.reused]

    def groups(self) -> dict[str, list[Trajectory]]:
        """uid -> the final output of each session, in session order (what GRPO's group is made of)."""
        final: dict[tuple[str, int], Trajectory] = {}
        for t in self.rows:
            if t.trained:
                held = final.get((t.uid, t.session))
                if held is None or t.output > held.output:
                    final[(t.uid, t.session)] = t
        out: dict[str, list[Trajectory]] = defaultdict(list)
        for (uid, _), t in sorted(final.items(), key=lambda item: item[0][1]):
            out[uid].append(t)
        return dict(out)

    def outputs_per_session(self) -> dict[tuple[str, int], int]:
        counts: dict[tuple[str, int], int] = defaultdict(int)
        for t in self.rows:
            counts[(t.uid, t.session)] += 1
        return dict(counts)

    def outcomes(self, threshold: float) -> Outcomes:
        """{record id: (passes, n)} over the generated rows (a pass: ``acc > threshold``, ``heapa.feedback.pass_threshold``);
        a row without ``acc`` is an error naming the field."""
        rows = self.generated()
        missing = sum(t.acc is None for t in rows)
        if missing:
            raise KeyError(f"{missing} of {len(rows)} trajectories have no reward_extra_info[{self.acc_field!r}]: use "
                           "the 'heapa' reward manager (reward.reward_manager.name=heapa) or a reward function that "
                           "returns it")
        return group_outcomes([t.record_id for t in rows], [t.acc for t in rows], threshold=threshold)

    def reward_infos(self) -> list[dict[str, Any]]:
        return [t.reward_info for t in self.generated()]

    def stable_order(self, keys: Sequence[str]) -> list[int]:
        """Indices that sort ``keys`` by (record id, session, output): the replay buffer hands groups over in the
        order their rollouts finished, which changes from run to run; verl's balancing keeps the input order for
        ties, so the update (its float sums) would too. Rows not in the view go last, in their order."""
        rank = {t.key: (t.record_id, t.session, t.output) for t in self.rows}
        last = (float("inf"), 0, 0)
        return sorted(range(len(keys)), key=lambda i: (rank.get(keys[i], last), i))

    # ---- AR3PO's edits ----------------------------------------------------------------------------------------
    def add(self, rows: Iterable[Trajectory]) -> None:
        self.rows.extend(rows)

    def drop(self, keys: Iterable[str]) -> None:
        """Rows taken out of the update (a ``replace`` reuse); they stay as generated rows."""
        gone = set(keys)
        for t in self.rows:
            if t.key in gone:
                t.trained = False
