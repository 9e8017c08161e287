"""Group statistics of one step's rollout: how many groups carry no GRPO signal and what responses cost.

Shared by the recipe (logging), the planner's summary and the simulator, so every place counts a
"zero-advantage group" the same way: a group whose rewards are all equal (all right or all wrong for 0/1 rewards)
gives every response the same advantage, zero after GRPO's mean subtraction. A group of one response is counted
as zero-advantage too: it has nothing to be relative to.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

# Rewards closer than this are "equal" (float noise from reward functions must not create fake signal).
EQUAL_TOL = 1e-9


def check_accs(pid: Hashable, accs: Sequence[float]) -> list[float]:
    """The group's rewards as floats; a non-number or non-finite value is a caller bug and names the prompt."""
    out = []
    for i, a in enumerate(accs):
        if isinstance(a, bool):
            a = float(a)
        if not isinstance(a, (int, float)) or not math.isfinite(a):
            raise ValueError(f"prompt {pid!r}: acc[{i}]={a!r} is not a finite number")
        out.append(float(a))
    return out


def is_zero_advantage(accs: Sequence[float]) -> bool:
    """True when GRPO gives this group no signal (all rewards equal, or fewer than two responses)."""
    return len(accs) < 2 or max(accs) - min(accs) <= EQUAL_TOL


def histogram(counts: Sequence[int]) -> dict[str, int]:
    """Exact-value histogram with string keys (JSON-safe; staged sizes take few distinct values)."""
    hist: dict[int, int] = {}
    for c in counts:
        hist[int(c)] = hist.get(int(c), 0) + 1
    return {str(k): hist[k] for k in sorted(hist)}


@dataclass(frozen=True)
class GroupStats:
    """Counts over a step's groups. Fractions are of ``groups`` (0.0 when there are none)."""

    groups: int
    responses: int
    all_correct: int
    all_wrong: int
    zero_adv: int
    hist: dict[str, int]

    @property
    def responses_per_prompt_mean(self) -> float:
        return self.responses / self.groups if self.groups else 0.0

    def frac(self, count: int) -> float:
        return count / self.groups if self.groups else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "groups": self.groups, "responses": self.responses, "all_correct": self.all_correct,
            "all_wrong": self.all_wrong, "zero_adv": self.zero_adv, "hist": dict(self.hist),
            "responses_per_prompt_mean": self.responses_per_prompt_mean,
        }


def group_stats(groups: Mapping[Hashable, Sequence[float]], success_threshold: float = 0.5) -> GroupStats:
    """Stats of ``{prompt id: [acc, ...]}``; a response is correct when ``acc > success_threshold``.

    O(total responses). Empty groups count as groups with no responses (all-wrong: nothing was solved).
    """
    all_correct = all_wrong = zero_adv = responses = 0
    sizes = []
    for pid, raw in groups.items():
        accs = check_accs(pid, raw)
        sizes.append(len(accs))
        responses += len(accs)
        n_ok = sum(1 for a in accs if a > success_threshold)
        all_correct += bool(accs) and n_ok == len(accs)
        all_wrong += n_ok == 0
        zero_adv += is_zero_advantage(accs)
    return GroupStats(
        groups=len(sizes), responses=responses, all_correct=all_correct, all_wrong=all_wrong,
        zero_adv=zero_adv, hist=histogram(sizes),
    )
