"""Curves of one run aligned by step and by rollouts generated (pure Python).

Validation accuracy: verl logs ``val-core/<data_source>/<acc|reward>/mean@N`` at validation steps (step 0 is the
model before training when ``val_before_train``). A run's accuracy at a step is the mean over its data sources
(``acc`` where logged, else ``reward``), or one data source when asked.

Rollouts generated (responses sampled for training prompts), in order of preference per step:

1. ``rollout/gen_responses_cum`` — the recipe's own cumulative count (checkpointed, so exact after a resume);
2. ``rollout/gen_responses`` — its per-step count, summed;
3. from the feedback metrics every recipe run logs::

       n_groups = feedback/n_records + feedback/evicted_groups_fed_back
                  + training/filter_groups/discarded_surplus_samples
       rollouts = n_groups * feedback/n_rollouts / feedback/n_records

   i.e. trained groups, groups DAPO's filter evicted (fed back to the pool as they were evicted) and surplus
   groups verl drained but did not train on, times the group size; absent optional terms count 0 (GRPO);
4. a constant ``rollouts_per_step`` given by the user (plain verl runs: train_batch_size x rollout.n).

Validation and the policy's augmentation generations are not counted. Steps missing from the log (a restart:
verl's file logger rewrites its file) are filled with the run's mean rate and the run is flagged
``rollouts_estimated``.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from verl_ext.compare.runs import Run

VAL_RE = re.compile(r"^val-core/(?P<ds>.+)/(?P<var>acc|reward)/mean@(?P<n>\d+)$")
ZERO_SIGNAL_KEYS = ("feedback/frac_all_correct", "feedback/frac_all_wrong")


class AlignError(ValueError):
    """A run lacks what an alignment needs; the message names the run and the metric."""


def val_keys(run: Run) -> dict[str, str]:
    """data_source -> its ``val-core`` accuracy key (``acc`` preferred over ``reward``; largest N)."""
    best: dict[str, tuple[int, int, str]] = {}
    for key in run.keys():
        m = VAL_RE.match(key)
        if m:
            rank = (1 if m["var"] == "acc" else 0, int(m["n"]), key)
            if m["ds"] not in best or rank > best[m["ds"]]:
                best[m["ds"]] = rank
    return {ds: rank[2] for ds, rank in sorted(best.items())}


def val_series(run: Run, data_source: str | None = None) -> list[tuple[int, float]]:
    """(step, accuracy) at the steps where every selected data source was validated."""
    keys = val_keys(run)
    if data_source is not None:
        if data_source not in keys:
            raise AlignError(f"run {run.name}: no val-core metric for data source {data_source!r} "
                             f"(has {sorted(keys) or 'none'})")
        keys = {data_source: keys[data_source]}
    if not keys:
        raise AlignError(f"run {run.name} ({run.source}): no val-core/<data_source>/acc/mean@N metric; was "
                         "validation on (trainer.test_freq, trainer.val_before_train)?")
    out = []
    for step in run.sorted_steps():
        metrics = run.steps[step]
        if all(k in metrics for k in keys.values()):
            out.append((step, sum(metrics[k] for k in keys.values()) / len(keys)))
    return out


CUM_KEY = "rollout/gen_responses_cum"
STEP_KEY = "rollout/gen_responses"


def step_rollouts(metrics: dict[str, float], fallback: float | None) -> float | None:
    """Rollouts generated in one training step (module docstring, 2-4), or None."""
    if STEP_KEY in metrics:
        return metrics[STEP_KEY]
    records = metrics.get("feedback/n_records")
    rollouts = metrics.get("feedback/n_rollouts")
    if records and rollouts is not None:
        groups = (records + metrics.get("feedback/evicted_groups_fed_back", 0.0)
                  + metrics.get("training/filter_groups/discarded_surplus_samples", 0.0))
        return groups * rollouts / records
    return fallback


@dataclass
class RolloutAxis:
    """Cumulative rollouts after each step (step 0 = before training = 0)."""

    cumulative: dict[int, float] = field(default_factory=dict)
    estimated_steps: list[int] = field(default_factory=list)

    def at(self, step: int) -> float:
        return self.cumulative[step]


def rollout_axis(run: Run, rollouts_per_step: float | None = None) -> RolloutAxis:
    """Cumulative rollouts for every step from 0 to the run's last step."""
    measured = {s: r for s in run.sorted_steps() if s > 0
                and (r := step_rollouts(run.steps[s], rollouts_per_step)) is not None}
    if not measured:
        raise AlignError(f"run {run.name}: no per-step rollout count (feedback/n_records + feedback/n_rollouts are "
                         "missing); pass --rollouts-per-step (train_batch_size x rollout.n) for plain verl runs")
    mean_rate = sum(measured.values()) / len(measured)
    last = max(run.sorted_steps())
    axis, total = RolloutAxis(), 0.0
    axis.cumulative[0] = 0.0
    for step in range(1, last + 1):
        cumulative = run.steps.get(step, {}).get(CUM_KEY)
        if cumulative is not None:
            total = cumulative
        elif step in measured:
            total += measured[step]
        else:
            total += mean_rate
            axis.estimated_steps.append(step)
        axis.cumulative[step] = total
    return axis


def interpolate(points: Sequence[tuple[float, float]], x: float) -> float | None:
    """Linear interpolation over sorted (x, y) points; None outside their range."""
    if not points or x < points[0][0] or x > points[-1][0]:
        return None
    xs = [p[0] for p in points]
    i = bisect.bisect_left(xs, x)
    if xs[i] == x:
        return points[i][1]
    (x0, y0), (x1, y1) = points[i - 1], points[i]
    return y0 + (y1 - y0) * (x - x0) / (x1 - x0)


def first_reaching(points: Sequence[tuple[float, float]], target: float, window: int = 1,
                   interpolated: bool = False) -> float | None:
    """The x of the first point at which the mean y of it and the ``window - 1`` points before it is >= target,
    else None. ``window`` 1: the first validation that reached it. One validation of 512 problems carries ~1.5-1.9
    points of noise, and the first crossing picks the luckiest one; a mean of ``window`` validations divides that
    noise's variance by ``window`` (at the cost of counting the rollouts up to the last of them).

    ``interpolated``: the x where the straight line between that point and the one before crosses the target, so
    a run that crosses just after a validation is not counted a whole validation interval late (runs validated
    every 1,280 rollouts otherwise read in steps of 1,280); a first point already at the target stays its own x."""
    if window < 1:
        raise ValueError(f"window must be at least 1, got {window}")
    means = [(points[i][0], sum(y for _, y in points[i - window + 1: i + 1]) / window)
             for i in range(window - 1, len(points))]
    for j, (x, y) in enumerate(means):
        if y >= target:
            if not interpolated or j == 0:
                return x
            x0, y0 = means[j - 1]
            return x0 + (target - y0) / (y - y0) * (x - x0)  # y0 < target <= y, so y > y0
    return None


def zero_signal_series(run: Run) -> list[tuple[int, float]]:
    """(step, share of trained groups with all responses right or all wrong): groups that carry no signal."""
    a, b = ZERO_SIGNAL_KEYS
    return [(s, run.steps[s][a] + run.steps[s][b]) for s in run.sorted_steps()
            if a in run.steps[s] and b in run.steps[s]]
