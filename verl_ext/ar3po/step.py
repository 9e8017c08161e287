"""One AR3PO step after the rollout: apply reuse to the final groups and gather the step's ``rollout/*`` scalars.

Why a function and not recipe code: the recipe (on verl batches) and the simulator (on synthetic rewards) must
count the same things the same way; both call ``finish_step`` with the planner's groups.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field

from verl_ext.ar3po.bank import ResponseBank, ReusePlan
from verl_ext.ar3po.stats import group_stats


@dataclass
class StepOutcome:
    """Groups after reuse, the plans that produced them (the adapter edits batch rows the same way), scalars."""

    groups: dict[Hashable, list[float]]
    plans: dict[Hashable, ReusePlan]
    metrics: dict[str, float] = field(default_factory=dict)


def finish_step(
    groups: Mapping[Hashable, Sequence[float]],
    bank: ResponseBank,
    step: int | None = None,
    prefix: str = "rollout/",
    record_of: Mapping[Hashable, Hashable] | None = None,
) -> StepOutcome:
    """Plan reuse for all-wrong groups and report signal before/after, cost per prompt and the bank's state.

    Storing this step's fresh correct responses (``bank.put_correct``) is the caller's job, since only it holds
    the payloads; doing it before or after this call is equivalent (a group with a fresh correct response is
    not all-wrong, so it is never a reuse target). ``groups`` may be keyed by group (``record_of`` then maps each
    to its prompt id): every group is counted, only a prompt's first group can get a reuse.
    """
    threshold = bank.config.success_threshold
    before = group_stats(groups, threshold)
    plans = bank.plan_reuse(groups, step, record_of)
    after_groups = {pid: (plans[pid].apply(accs) if pid in plans else list(accs)) for pid, accs in groups.items()}
    after = group_stats(after_groups, threshold)
    metrics = {
        f"{prefix}responses_per_prompt_mean": before.responses_per_prompt_mean,
        f"{prefix}responses_total": float(before.responses),
        f"{prefix}all_correct_frac": before.frac(before.all_correct),
        f"{prefix}all_wrong_frac": before.frac(before.all_wrong),
        f"{prefix}zero_adv_before": before.frac(before.zero_adv),
        f"{prefix}zero_adv_after": after.frac(after.zero_adv),
        f"{prefix}reused": float(len(plans)),
        f"{prefix}reused_frac": before.frac(len(plans)),
    }
    for size, n in before.hist.items():
        metrics[f"{prefix}responses_hist/{size}"] = float(n)
    metrics.update(bank.metrics(prefix))
    return StepOutcome(groups=after_groups, plans=plans, metrics=metrics)
