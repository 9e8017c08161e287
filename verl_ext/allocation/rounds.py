"""Reinforce-Ada's adaptive sampling (arXiv 2510.04996): rounds of responses until a prompt's exit rule holds, then
the group the update sees cut back to ``n``, its advantage baseline taken from every response generated.

Each round gives every still-active prompt ``round_size`` more responses; a prompt leaves once it has at least
``n`` and its rule holds (``positive``: at least one correct response; ``balanced``: at least ``n / 2`` correct and
``n / 2`` wrong, the paper's default) or it has ``max_per_prompt``. The kept group is ``n`` responses, balanced where
the prompt has enough of both kinds (``n / 2`` each), otherwise every response of the scarcer kind and the rest
from the other (``keep_indices``: the earliest of each kind, so a rerun keeps the same rows). With
``global_baseline`` the kept responses' advantages are centred (and, where the GRPO estimator divides by the
standard deviation, scaled) by the statistics of *every* response of the prompt (``baseline``), the paper's
``global_stat_est``: a 1-of-32 success is a rarer event than a 1-of-4 one, and its advantage says so.

``RoundsPlanner`` drives the rounds of a step for a set of prompts with the interface of AR3PO's ``StagePlanner``
(``begin`` / ``record`` / ``next_stage``), so one staged agent loop runs either rule.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from typing import Any, Literal

from verl_ext.config_model import Bool, NonNegInt, config_dataclass, parse

EXITS = ("balanced", "positive")


@config_dataclass(name="reinforce_ada")
class RoundsConfig:
    """``heapa.reinforce_ada``: ``round_size`` 0 = ``n``; ``max_per_prompt`` 0 = ``4 * n`` (the paper runs up to 4
    rounds of ``n``); ``global_baseline`` the paper's ``global_stat_est`` (off: GRPO's statistics of the kept
    ``n``)."""

    enabled: Bool = False
    exit: Literal[EXITS] = "balanced"
    round_size: NonNegInt = 0
    max_per_prompt: NonNegInt = 0
    global_baseline: Bool = True

    def sizes(self, n: int) -> tuple[int, int]:
        """(responses per round, the per-prompt cap) for groups of ``n``."""
        if self.exit not in EXITS:
            raise ValueError(f"exit must be one of {EXITS}, got {self.exit!r}")
        step, cap = self.round_size or n, self.max_per_prompt or 4 * n
        if not 1 <= step <= cap or cap < n:
            raise ValueError(f"rounds need 1 <= round_size ({step}) <= max_per_prompt ({cap}) and n ({n}) <= it")
        return step, cap

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "RoundsConfig":
        return parse(cls, data)


def has_exited(passes: int, total: int, n: int, rule: str) -> bool:
    """Whether a prompt with ``passes`` correct of ``total`` stops sampling under ``rule`` (never below ``n``: the
    kept group needs ``n`` responses)."""
    if total < n:
        return False
    if rule == "positive":
        return passes >= 1
    half = n // 2  # odd n: the kept group has one more of whichever kind has more
    return passes >= half and total - passes >= half


def kept_passes(passes: int, total: int, n: int) -> int:
    """Correct responses among the ``n`` kept of ``total`` (``total >= n``): ``n / 2`` of each kind where both have
    that many, else every response of the scarcer kind."""
    if total < n:
        raise ValueError(f"cannot keep {n} responses of {total}")
    return min(passes, max(n // 2, n - (total - passes)))


def keep_indices(correct: Sequence[bool], n: int) -> list[int]:
    """Which of a group's responses (in generation order) the update keeps: ``kept_passes`` of the correct ones and
    the rest of the wrong ones, the earliest of each kind; ascending. A group of at most ``n`` is kept whole."""
    if len(correct) <= n:
        return list(range(len(correct)))
    take = kept_passes(sum(correct), len(correct), n)
    right = [i for i, c in enumerate(correct) if c][:take]
    wrong = [i for i, c in enumerate(correct) if not c][:n - take]
    return sorted(right + wrong)


def baseline(scores: Sequence[float]) -> tuple[float, float]:
    """(mean, standard deviation) of a group's scores as verl's GRPO estimator takes them: the sample (n - 1)
    deviation, and (0, 1) for a group of one."""
    if not scores:
        raise ValueError("a baseline needs at least one score")
    if len(scores) == 1:
        return 0.0, 1.0
    mean = math.fsum(scores) / len(scores)
    return mean, math.sqrt(math.fsum((s - mean) ** 2 for s in scores) / (len(scores) - 1))


class RoundsPlanner:
    """Rounds for a step's prompts: ``begin(ids)`` -> ``{id: round_size}``; ``record({id: [acc, ...]})`` as results
    arrive; ``next_stage()`` -> the next round for prompts that have not exited (trimmed to the cap), ``{}`` when
    every prompt is done. ``is_correct`` reads one response's ``acc``."""

    def __init__(self, config: RoundsConfig, n: int, is_correct: Callable[[float], bool]) -> None:
        self.round_size, self.cap = config.sizes(n)
        self.rule, self.n, self.is_correct = config.exit, n, is_correct
        self._accs: dict[Hashable, list[float]] = {}
        self._pending: dict[Hashable, int] = {}
        self.rounds = 0

    def begin(self, ids: Iterable[Hashable]) -> dict[Hashable, int]:
        order = list(ids)
        if len(set(order)) != len(order):
            raise ValueError(f"RoundsPlanner.begin: duplicate prompt ids in {order[:10]}")
        self._accs = {pid: [] for pid in order}
        self._pending = {pid: self.round_size for pid in order}
        self.rounds = 1 if order else 0
        return dict(self._pending)

    def record(self, results: Mapping[Hashable, Sequence[float]]) -> None:
        for pid, accs in results.items():
            owed = self._pending.get(pid, 0)
            if len(accs) > owed:
                raise ValueError(f"RoundsPlanner.record: prompt {pid!r} got {len(accs)} results, {owed} owed")
            self._accs[pid].extend(float(a) for a in accs)
            self._pending[pid] = owed - len(accs)
            if not self._pending[pid]:
                del self._pending[pid]

    def exited(self, pid: Hashable) -> bool:
        accs = self._accs[pid]
        return has_exited(sum(map(self.is_correct, accs)), len(accs), self.n, self.rule)

    def next_stage(self) -> dict[Hashable, int]:
        if self._pending:
            raise RuntimeError(f"round {self.rounds} still owes results (id, n): {list(self._pending.items())[:5]}")
        grants = {pid: min(self.round_size, self.cap - len(accs)) for pid, accs in self._accs.items()
                  if len(accs) < self.cap and not self.exited(pid)}
        if grants:
            self.rounds += 1
            self._pending = dict(grants)
        return grants

    def groups(self) -> dict[Hashable, list[float]]:
        return {pid: list(a) for pid, a in self._accs.items()}


def planned_total(correct: Sequence[bool], config: RoundsConfig, n: int) -> int:
    """How many responses the rule generates for a group whose responses, in generation order, are ``correct``
    (more than ``len(correct)`` when the rule would have asked for more): the trainer checks each finished group
    against it, so a rollout that did not follow the rule shows as a mismatch."""
    planner = RoundsPlanner(config, n, bool)
    grant, seen = planner.begin(["g"]), 0
    while grant:
        size = grant["g"]
        if seen + size > len(correct):
            return seen + size
        planner.record({"g": [float(c) for c in correct[seen:seen + size]]})
        seen += size
        grant = planner.next_stage()
    return seen
