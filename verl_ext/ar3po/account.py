"""What a staged rollout actually did, read back from its recorded groups: stages per prompt, solves per stage.

Why apart from the planner: in training the planner runs per prompt inside verl's agent-loop workers (a prompt's
next stage starts as soon as its own results are in), and the trainer only sees the finished groups. This module
rebuilds the step's account from those groups, rewards in generation order, and checks each group against the
planner's rule by driving a real ``StagePlanner`` with the recorded rewards (``planned_size``): a group whose size
differs (a failed session, a worker that ignored the plan) is counted as a mismatch, never silently absorbed.

Complexity: O(total responses) per step.
"""

from __future__ import annotations

from collections.abc import Collection, Hashable, Mapping, Sequence

from verl_ext.ar3po.config import AR3POConfig
from verl_ext.ar3po.planner import StagePlanner
from verl_ext.ar3po.stats import check_accs


def planned_size(config: AR3POConfig, accs: Sequence[float], measured: bool = False) -> int:
    """Responses the planner asks for when a prompt's rewards come out as ``accs`` (in generation order);
    ``measured``: whether the prompt was named measured at ``begin`` (read under ``extend: measured``).

    Drives a one-prompt ``StagePlanner``: stage by stage it takes the granted number of rewards from ``accs``;
    if ``accs`` runs out mid-stage, the answer is what the planner had asked for by then.
    """
    accs = check_accs("planned_size", accs)
    planner = StagePlanner(config)
    grant = planner.begin(["p"], measured=["p"] if measured else [])
    asked, used = 0, 0
    while grant:
        n = grant["p"]
        asked += n
        if used + n > len(accs):
            return asked
        planner.record({"p": accs[used:used + n]})
        used += n
        grant = planner.next_stage()
    return asked


def stage_account(config: AR3POConfig, groups: Mapping[Hashable, Sequence[float]],
                  measured: Collection[Hashable] = ()) -> dict[str, object]:
    """The step's stage account from ``{prompt id: [acc, ...]}`` (each group in generation order; ``measured``:
    the ids the planner was told were measured).

    Returns ``stages_used`` (the most stages any prompt needed), ``stages_mean``, ``solved_per_stage`` (prompts
    whose first correct response came in stage s, index s-1), ``unsolved``, ``mismatched`` (ids whose group size
    is not what the planner grants for those rewards) and ``prompts``.
    """
    stages, solved_per_stage, mismatched, unsolved = [], [], [], 0
    for pid, raw in groups.items():
        accs = check_accs(pid, raw)
        if len(accs) != planned_size(config, accs, pid in measured):
            mismatched.append(pid)
        stages.append(config.stage_of(len(accs) - 1) if accs else 0)
        first = next((i for i, a in enumerate(accs) if config.is_correct(a)), None)
        if first is None:
            unsolved += 1
            continue
        stage = config.stage_of(first)
        solved_per_stage.extend([0] * (stage - len(solved_per_stage)))
        solved_per_stage[stage - 1] += 1
    used = max(stages, default=0)
    solved_per_stage.extend([0] * (used - len(solved_per_stage)))
    return {
        "prompts": len(stages),
        "stages_used": used,
        "stages_mean": sum(stages) / len(stages) if stages else 0.0,
        "solved_per_stage": solved_per_stage,
        "unsolved": unsolved,
        "mismatched": mismatched,
    }


def stage_metrics(account: Mapping[str, object], prefix: str = "rollout/") -> dict[str, float]:
    """``stage_account`` as flat tracker scalars."""
    out = {
        f"{prefix}stages_used": float(account["stages_used"]),
        f"{prefix}stages_mean": float(account["stages_mean"]),
        f"{prefix}unsolved": float(account["unsolved"]),
        f"{prefix}plan_mismatch": float(len(account["mismatched"])),
    }
    for stage, n in enumerate(account["solved_per_stage"], start=1):
        out[f"{prefix}solved_stage/{stage}"] = float(n)
    return out
