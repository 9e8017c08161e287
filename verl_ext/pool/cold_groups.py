"""Cold draws tilted towards the groups whose problems read near 0.5 (``PoolConfig.cold_draw: signal``, issue 29).

The frontier draw takes its cold seats from the never-measured queue in arrival order, so on a task whose
difficulty levels are separate skills a cold seat lands on a hopeless level as often as that level fills the pool
(on the CPU task 40 % of HeaPA-GRPO's groups were all wrong, 86-95 % of its batches drawn cold). What the pool
already measures says more: records of one group (a level, a topic, a source: ``cold_group_key``) tend to read
alike at their first measurement. So a cold seat picks a group first, with weight

    ``n_g * (v_g (1 - v_g) + COLD_GROUP_FLOOR)``

``n_g`` the group's cold records and ``v_g`` the discounted mean pass rate of its records' first groups (the
rollouts' own share, not a record's shrunk estimate: the group's mean is what is estimated; ``(sum + 0.5) /
(count + 1)``, so a group never measured reads 0.5 and is tried), then takes the group's
earliest arrival. Each seat is still a never-measured problem, the skill it trains is one with signal: the draw
keeps the variety of uniform cold draws (fresh problems, which is what teaches a held-out set when re-training one
problem teaches its level less each time) and drops most of the seats a hopeless level would take. The floor keeps
every group drawn now and then, so a level that becomes learnable is seen again.

``GroupedColdQueue`` is the cold queue with one sub-heap per group beside the pool-wide one, so arrival order,
``id_at`` and checkpoints stay those of ``ColdQueue``; ``ColdGroupSignal`` holds what each group measured and is
checkpointed with the pool. Per cold seat O(groups + log n): meant for few groups (levels, topics, sources).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from verl_ext.pool.cold_queue import ColdQueue

COLD_GROUP_DECAY = 0.9  # the weight a group's older first measurements keep per new one: it tracks a learning policy
COLD_GROUP_FLOOR = 0.01  # a group at 0 or 1 keeps 1/25 of a group at 0.5 per cold record
MISSING_GROUP = ""


def group_label(data_source: str, extra: dict | None, key: str) -> str:
    """The group of a record under ``cold_group_key``: ``data_source``, or a dotted path into the record's
    ``extra`` (``extra_info.level``); records without it share the group ``""``."""
    if key == "data_source":
        return str(data_source)
    node: Any = extra
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            return MISSING_GROUP
        node = node[part]
    return str(node)


class GroupedColdQueue(ColdQueue):
    """``ColdQueue`` plus one sub-heap per group, kept in step with it; ``label(id)`` names a record's group."""

    __slots__ = ("_label", "_groups", "_group_of")

    def __init__(self, label: Callable[[int], str]) -> None:
        super().__init__()
        self._label = label
        self._groups: dict[str, ColdQueue] = {}
        self._group_of: dict[int, str] = {}

    def push(self, item_id: int, arrival: int) -> None:
        super().push(item_id, arrival)
        group = self._label(item_id)
        self._group_of[item_id] = group
        self._groups.setdefault(group, ColdQueue()).push(item_id, arrival)

    def pop(self) -> tuple[int, int]:
        top = super().pop()
        self._leave_group(top[0])
        return top

    def remove(self, item_id: int) -> int:
        arrival = super().remove(item_id)
        self._leave_group(item_id)
        return arrival

    def load(self, ids: list[int], arrivals: list[int]) -> None:
        super().load(ids, arrivals)
        self._groups, self._group_of = {}, {}
        for rid, arrival in zip(ids, arrivals):
            group = self._label(rid)
            self._group_of[rid] = group
            self._groups.setdefault(group, ColdQueue()).push(rid, arrival)

    def sizes(self) -> dict[str, int]:
        """Cold records per group (groups emptied stay listed, at 0)."""
        return {group: len(queue) for group, queue in self._groups.items()}

    def pop_group(self, group: str) -> int:
        """Take the earliest arrival of ``group`` out of the queue."""
        rid, _ = self._groups[group].pop()
        super().remove(rid)  # ColdQueue's: the group's sub-heap has it out already
        del self._group_of[rid]
        return rid

    def _leave_group(self, item_id: int) -> None:
        self._groups[self._group_of.pop(item_id)].remove(item_id)


class ColdGroupSignal:
    """Per group, the discounted sum and count of the first pass rates of its records drawn cold."""

    def __init__(self) -> None:
        self._stats: dict[str, list[float]] = {}
        self._last_drawn = -1.0  # mean v(1-v) of the groups the last cold draw took (-1 before any)
        self._last_queue = -1.0  # the same for the queue as a whole: what arrival order would have drawn

    def observe(self, group: str, value: float) -> None:
        stat = self._stats.setdefault(group, [0.0, 0.0])
        stat[0] = COLD_GROUP_DECAY * stat[0] + float(value)
        stat[1] = COLD_GROUP_DECAY * stat[1] + 1.0

    def estimate(self, group: str) -> float:
        total, count = self._stats.get(group, (0.0, 0.0))
        return (total + 0.5) / (count + 1.0)

    def draw(self, queue: GroupedColdQueue, n: int, rng: np.random.Generator) -> list[int]:
        """Take ``n`` cold ids (at most what the queue holds), one group draw per seat. With one group holding cold
        records the draw is arrival order and uses no randomness, so a single-source dataset draws as ``arrival``."""
        sizes = queue.sizes()
        groups = sorted(sizes)  # not insertion order, which a restored queue does not keep
        count = np.array([sizes[g] for g in groups], dtype=np.float64)
        v = np.array([self.estimate(g) for g in groups])
        signal = v * (1.0 - v)
        self._last_queue = float(count @ signal / count.sum()) if count.sum() else -1.0
        out, took = [], []
        for _ in range(min(n, int(count.sum()))):
            weight = count * (signal + COLD_GROUP_FLOOR)
            held = np.flatnonzero(count)
            i = int(held[0]) if len(held) == 1 else int(rng.choice(len(groups), p=weight / weight.sum()))
            out.append(queue.pop_group(groups[i]))
            count[i] -= 1
            took.append(signal[i])
        if took:
            self._last_drawn = float(np.mean(took))
        return out

    def metrics(self) -> dict[str, float]:
        """``pool/cold_group_signal_drawn`` against ``pool/cold_group_signal_queue``: how far the last cold draw
        leaned towards groups with signal (``v(1-v)`` of the group estimates), and ``pool/cold_groups_measured``."""
        return {"pool/cold_group_signal_drawn": self._last_drawn, "pool/cold_group_signal_queue": self._last_queue,
                "pool/cold_groups_measured": float(len(self._stats))}

    def state_dict(self) -> dict[str, Any]:
        return {"stats": {g: list(s) for g, s in self._stats.items()},
                "last": [self._last_drawn, self._last_queue]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._stats = {str(g): [float(s[0]), float(s[1])] for g, s in state["stats"].items()}
        self._last_drawn, self._last_queue = (float(x) for x in state["last"])
