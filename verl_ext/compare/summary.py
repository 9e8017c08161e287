"""Per-run numbers, grouped by method with mean ± standard deviation over seeds, and the markdown table.

Per run: validation accuracy before training (the first validation, normally step 0), at the end (the last
validation), at each rollout budget (linear interpolation between the validations on either side, so runs that
validated at different rollout counts are compared at the same count; a budget past a run's last validation is
missing), the rollouts of its first validation at or above the target accuracy (or of the first mean of
``target_window`` consecutive validations at or above it), the mean zero-signal share over its training steps, the
validation at each step asked for (``at_steps``: exact, missing where the run did not validate at that step) and,
with ``tail_from`` (rollouts) or ``tail_from_step`` (training steps), the mean of its validations at or after that
point (one validation of 512 problems at T=1 carries ~1.5-1.9 points of sampling noise; the mean of several is a
steadier reading of where a run levels off). Per method: the mean, the sample standard deviation (n-1; 0 for one
seed) and the number of seeds that contributed.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from tabulate import tabulate

from verl_ext.compare.align import (AlignError, first_reaching, interpolate, rollout_axis, val_series,
                                    zero_signal_series)
from verl_ext.compare.runs import Run


@dataclass
class RunSummary:
    name: str
    method: str
    seed: str | None
    steps: int
    total_rollouts: float
    val_initial: float
    val_final: float
    val_final_step: int
    val_at_budget: dict[float, float | None] = field(default_factory=dict)
    rollouts_to_target: float | None = None
    # the rollouts of the last validation of a run that never reached the target: its rollouts to the target are
    # above this (a censored value), so a paired ratio can count it there rather than drop the seed
    target_censored_at: float | None = None
    zero_signal_mean: float | None = None
    rollouts_estimated: bool = False
    val_points: list[tuple[int, float, float]] = field(default_factory=list)  # (step, rollouts, acc)
    val_tail: float | None = None  # mean of the validations at or after ``tail_from`` rollouts / ``tail_from_step``
    val_tail_count: int = 0
    val_at_step: dict[int, float | None] = field(default_factory=dict)

    def evaluate_at(self, budgets: Sequence[float], target: float | None,
                    tail_from: float | None = None, target_window: int = 1,
                    tail_from_step: int | None = None, at_steps: Sequence[int] = (),
                    interpolated: bool = False) -> "RunSummary":
        """Fill the accuracy at each rollout budget and at each of ``at_steps``, the rollouts to ``target`` (read on
        the mean of ``target_window`` consecutive validations, at the validation that reached it or, ``interpolated``,
        where the line from the one before crosses it: ``align.first_reaching``) and the tail mean from the
        validation points."""
        if tail_from is not None and tail_from_step is not None:
            raise ValueError("tail_from (rollouts) and tail_from_step (steps) are two readings of one figure: give one")
        curve = [(r, acc) for _, r, acc in self.val_points]
        self.val_at_budget = {float(b): interpolate(curve, float(b)) for b in budgets}
        by_step = {step: acc for step, _, acc in self.val_points}
        self.val_at_step = {int(st): by_step.get(int(st)) for st in at_steps}
        self.rollouts_to_target = None if target is None else first_reaching(curve, target, target_window,
                                                                                    interpolated)
        censored = target is not None and self.rollouts_to_target is None and bool(curve)
        self.target_censored_at = curve[-1][0] if censored else None
        if tail_from_step is not None:
            tail = [acc for step, _, acc in self.val_points if step >= tail_from_step]
        else:
            tail = [acc for r, acc in curve if tail_from is not None and r >= tail_from]
        self.val_tail, self.val_tail_count = (sum(tail) / len(tail) if tail else None), len(tail)
        return self

    def as_dict(self) -> dict:
        out = dict(self.__dict__)
        out["val_at_budget"] = {str(int(k)): v for k, v in self.val_at_budget.items()}
        out["val_at_step"] = {str(k): v for k, v in self.val_at_step.items()}
        return out


def summarize_run(run: Run, budgets: Sequence[float] = (), target: float | None = None,
                  data_source: str | None = None, rollouts_per_step: float | None = None) -> RunSummary:
    vals = val_series(run, data_source)
    axis = rollout_axis(run, rollouts_per_step)
    points = [(step, axis.at(step), acc) for step, acc in vals]
    zero = zero_signal_series(run)
    last = max(run.sorted_steps())
    summary = RunSummary(
        name=run.name, method=run.method, seed=run.seed, steps=last, total_rollouts=axis.at(last),
        val_initial=points[0][2], val_final=points[-1][2], val_final_step=points[-1][0],
        zero_signal_mean=sum(v for _, v in zero) / len(zero) if zero else None,
        rollouts_estimated=bool(axis.estimated_steps), val_points=points)
    return summary.evaluate_at(budgets, target)


def default_budget(summaries: Sequence[RunSummary]) -> float:
    """The largest rollout count at which every run has validated (the smallest last-validation count)."""
    if not summaries:
        raise AlignError("no runs to compare")
    return min(s.val_points[-1][1] for s in summaries)


def mean_sd(values: Sequence[float | None]) -> tuple[float | None, float | None, int]:
    """(mean, sample sd, n) over the values that are not None."""
    xs = [v for v in values if v is not None]
    if not xs:
        return None, None, 0
    m = sum(xs) / len(xs)
    sd = math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1)) if len(xs) > 1 else 0.0
    return m, sd, len(xs)


def group_by_method(summaries: Sequence[RunSummary]) -> dict[str, list[RunSummary]]:
    groups: dict[str, list[RunSummary]] = {}
    for s in summaries:
        groups.setdefault(s.method, []).append(s)
    return groups


def method_stats(runs: Sequence[RunSummary], budgets: Sequence[float], at_steps: Sequence[int] = ()) -> dict:
    """Mean ± sd over a method's runs of every per-run figure (``val_tail`` is None-only without ``tail_from``)."""
    def stat(values: Sequence[float | None]) -> dict:
        m, sd, n = mean_sd(values)
        return {"mean": m, "sd": sd, "n": n}

    return {
        "seeds": [r.seed for r in runs], "runs": [r.name for r in runs],
        "val_initial": stat([r.val_initial for r in runs]), "val_final": stat([r.val_final for r in runs]),
        "val_gain": stat([r.val_final - r.val_initial for r in runs]),
        "val_tail": stat([r.val_tail for r in runs]),
        "val_tail_count": stat([float(r.val_tail_count) for r in runs]),
        "val_at_budget": {str(int(b)): stat([r.val_at_budget.get(float(b)) for r in runs]) for b in budgets},
        "val_at_step": {str(int(st)): stat([r.val_at_step.get(int(st)) for r in runs]) for st in at_steps},
        "rollouts_to_target": stat([r.rollouts_to_target for r in runs]),
        "zero_signal_mean": stat([r.zero_signal_mean for r in runs]),
        "total_rollouts": stat([r.total_rollouts for r in runs]),
        "steps": stat([float(r.steps) for r in runs]),
        "rollouts_estimated": any(r.rollouts_estimated for r in runs),
    }


def _pct(s: dict) -> str:
    if s["mean"] is None:
        return "–"
    return f"{100 * s['mean']:.1f} ± {100 * s['sd']:.1f}"


def _tail(s: dict) -> str:
    """The tail mean with the validations per run it averages ('24.1 ± 0.8 (of 5)')."""
    if s["val_tail"]["mean"] is None:
        return "–"
    return f"{_pct(s['val_tail'])} (of {s['val_tail_count']['mean']:.0f})"


def _count(s: dict, of: int) -> str:
    if s["mean"] is None:
        return f"– (0/{of})"
    text = f"{s['mean']:,.0f} ± {s['sd']:,.0f}"
    return text if s["n"] == of else f"{text} ({s['n']}/{of})"


def tail_label(tail_from: float | None = None, tail_from_step: int | None = None) -> str | None:
    """Where the tail mean starts, in words: 'from 5,120' (rollouts) or 'from step 40'; None without a tail."""
    if tail_from_step is not None:
        return f"from step {tail_from_step}"
    return None if tail_from is None else f"from {tail_from:,.0f}"


def markdown(stats: dict[str, dict], budgets: Sequence[float], target: float | None,
             tail: str | None = None, target_window: int = 1, at_steps: Sequence[int] = (),
             interpolated: bool = False) -> str:
    """One row per method: val accuracy (%) at each budget and each of ``at_steps``, final, the tail mean (``tail``:
    its ``tail_label``), gain, rollouts to target, zero-signal share."""
    tail_head = [f"mean val acc {tail}"] if tail is not None else []
    to_target = "rollouts to target" if target is None else f"rollouts to {100 * target:.1f}%" + (
        f" (mean of {target_window} validations)" if target_window > 1 else "") + (
        ", interpolated" if interpolated and target is not None else "")
    header = ["method", "seeds"] + [f"val acc @ {int(b):,} rollouts" for b in budgets] + [
        f"val acc @ step {int(st)}" for st in at_steps] + ["final val acc"] + tail_head + [
        "gain", to_target,
        "zero-signal share", "rollouts (total)"]
    rows = []
    for method, s in stats.items():
        n = len(s["runs"])
        cells = [method + (" *" if s["rollouts_estimated"] else ""), str(n)]
        cells += [_pct(s["val_at_budget"][str(int(b))]) for b in budgets]
        cells += [_pct(s["val_at_step"][str(int(st))]) for st in at_steps]
        cells += [_pct(s["val_final"])] + ([_tail(s)] if tail is not None else []) + [_pct(s["val_gain"]),
                  _count(s["rollouts_to_target"], n) if target is not None else "–",
                  _pct(s["zero_signal_mean"]), _count(s["total_rollouts"], n)]
        rows.append(cells)
    text = tabulate(rows, headers=header, tablefmt="pipe", disable_numparse=True,
                    colalign=("left",) + ("right",) * (len(header) - 1))
    notes = ["", "Accuracy in % (mean ± sd over seeds); validation accuracy is interpolated between validations "
             "at the same rollout count; '(k/n)' = only k of n seeds reached it."]
    if any(s["rollouts_estimated"] for s in stats.values()):
        notes.append("* some steps were missing from the log; their rollouts were estimated at the run's mean rate.")
    return "\n".join([text] + notes) + "\n"
