"""AR3PO (arXiv 2509.25808): adaptive rollout in stages and reuse of earlier correct responses.

Pure core (no verl / ray / torch): ``StagePlanner`` decides how many responses each prompt gets, ``ResponseBank``
keeps correct responses for groups that stay all-wrong, ``group_stats``/``finish_step`` count what the step cost
and how much GRPO signal it carries; ``stage_account`` reads a finished step back and checks it against the plan.
In training, ``verl_ext.adapters.ar3po_agent_loop`` runs the planner per prompt inside verl's agent-loop workers and
the recipe (``recipe/heapa/stages/ar3po.py``) applies reuse to the step's batch.
"""

from verl_ext.ar3po.account import planned_size, stage_account, stage_metrics
from verl_ext.ar3po.bank import ResponseBank, ReusePlan
from verl_ext.ar3po.config import AR3POConfig, ReuseConfig
from verl_ext.ar3po.planner import PlannerError, StagePlanner
from verl_ext.ar3po.stats import GroupStats, group_stats, is_zero_advantage
from verl_ext.ar3po.step import StepOutcome, finish_step

__all__ = [
    "AR3POConfig", "GroupStats", "PlannerError", "ResponseBank", "ReuseConfig", "ReusePlan", "StagePlanner",
    "StepOutcome", "finish_step", "group_stats", "is_zero_advantage", "planned_size", "stage_account",
    "stage_metrics",
]
