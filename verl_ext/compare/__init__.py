"""Comparing training runs: read verl file-logger / wandb runs, align them by step and by rollouts generated,
group by method over seeds, write a markdown table, a JSON summary and PNG curves.

Pure Python apart from the optional readers (wandb's protobuf classes for offline runs, the wandb API) and the
plots (matplotlib), which are imported only when used. CLI: ``python -m verl_ext.compare`` (``cli``).
"""

from verl_ext.compare.align import rollout_axis, step_rollouts, val_series
from verl_ext.compare.runs import Run, load_runs

__all__ = ["Run", "load_runs", "rollout_axis", "step_rollouts", "val_series"]
