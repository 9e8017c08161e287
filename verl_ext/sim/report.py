"""Summaries of simulator runs over seeds: the benchmark table (mean and 95% interval) and the accuracy plot.

Rollouts-to-target of a run that never reached the target is *censored* at the budget: the mean then counts it
as the budget (a lower bound on the true cost) and the cell is marked ``>``; the ``reached`` column says how
often that happened. Intervals are Student-t intervals of the mean over seeds (seeds are independent runs); paired
comparisons (``paired_against``: one seed = the same data) use ``verl_ext.compare.intervals``' bootstrap.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tabulate import tabulate

from verl_ext.compare.intervals import Interval, paired_bootstrap
from verl_ext.sim.runner import RunResult

# Two-sided 95% Student-t quantiles t_{0.975, df} for df = 1..30 (beyond: the normal 1.96). No scipy needed.
_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145,
         2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048,
         2.045, 2.042)


def mean_ci(values: Sequence[float]) -> tuple[float, float, float]:
    """(mean, low, high) of the 95% t-interval; a single value gives a zero-width interval."""
    x = np.asarray(values, dtype=np.float64)
    mean = float(x.mean())
    if len(x) < 2:
        return mean, mean, mean
    df = len(x) - 1
    t = _T975[df - 1] if df <= len(_T975) else 1.96
    half = t * float(x.std(ddof=1)) / math.sqrt(len(x))
    return mean, mean - half, mean + half


@dataclass
class StrategySummary:
    """One table row: a strategy over all its seeds."""

    strategy: str
    seeds: int
    to_target: tuple[float, float, float]
    reached: int
    accuracy: tuple[float, float, float]
    zero_variance: tuple[float, float, float]
    generations: float
    teacher_calls: float
    verify_forwards: float


def summarise(results: Sequence[RunResult]) -> list[StrategySummary]:
    """Group runs by strategy (first-seen order) and summarise each group."""
    groups: dict[str, list[RunResult]] = {}
    for r in results:
        groups.setdefault(r.strategy, []).append(r)
    rows = []
    for name, runs in groups.items():
        to_target = [r.rollouts_to_target if r.rollouts_to_target is not None else r.rollouts[-1] for r in runs]
        rows.append(StrategySummary(
            strategy=name, seeds=len(runs), to_target=mean_ci(to_target),
            reached=sum(r.rollouts_to_target is not None for r in runs),
            accuracy=mean_ci([r.final_accuracy for r in runs]),
            zero_variance=mean_ci([r.zero_variance_share for r in runs]),
            generations=float(np.mean([r.augment.get("generations", 0) for r in runs])),
            teacher_calls=float(np.mean([r.augment.get("teacher_calls", 0) for r in runs])),
            verify_forwards=float(np.mean([r.verify_forwards for r in runs])),
        ))
    return rows


def _fmt_ci(ci: tuple[float, float, float], spec: str) -> str:
    mean, low, high = ci
    return f"{mean:{spec}} [{low:{spec}}, {high:{spec}}]"


def format_table(rows: Sequence[StrategySummary], target: float, budget: int) -> str:
    """The benchmark table as Markdown (mean [95% interval] over seeds)."""
    head = ["strategy", f"rollouts to acc {target:g}", "reached", f"acc @ {budget:,} rollouts", "zero-variance groups",
            "aug generations", "teacher calls", "verify forwards"]
    cells = []
    for s in rows:
        censored = ">" if s.reached < s.seeds else ""
        cells.append([s.strategy, f"{censored}{_fmt_ci(s.to_target, ',.0f')}", f"{s.reached}/{s.seeds}",
                      _fmt_ci(s.accuracy, ".3f"), _fmt_ci(s.zero_variance, ".3f"), f"{s.generations:,.0f}",
                      f"{s.teacher_calls:,.0f}", f"{s.verify_forwards:,.0f}"])
    return tabulate(cells, headers=head, tablefmt="pipe", disable_numparse=True,
                    colalign=("left",) + ("right",) * (len(head) - 1))


def format_matrix(by_scenario: dict[str, list[StrategySummary]], baseline: str = "uniform") -> str:
    """Strategies x scenarios: mean rollouts to target as a multiple of ``baseline``'s (``>`` when some seeds never
    got there, reached/seeds), then the accuracy when the budget was spent. Lower multiples are better."""
    names: list[str] = []
    for rows in by_scenario.values():
        names += [r.strategy for r in rows if r.strategy not in names]
    lines = []
    for name in names:
        cells = [name]
        for rows in by_scenario.values():
            mine = {r.strategy: r for r in rows}
            row, base = mine.get(name), mine.get(baseline)
            if row is None:
                cells.append("")
                continue
            ratio = f"{row.to_target[0] / base.to_target[0]:.2f}x" if base else f"{row.to_target[0]:,.0f}"
            mark = ">" if row.reached < row.seeds else ""
            cells.append(f"{mark}{ratio} ({row.reached}/{row.seeds}), {row.accuracy[0]:.3f}")
        lines.append(cells)
    return tabulate(lines, headers=["strategy", *by_scenario], tablefmt="pipe", disable_numparse=True,
                    colalign=("left",) + ("right",) * len(by_scenario))


def rollouts_or_spent(r: RunResult) -> float:
    """Rollouts to target, censored at the rollouts spent when never reached (as ``summarise``)."""
    return float(r.rollouts_to_target if r.rollouts_to_target is not None else r.rollouts[-1])


def paired_against(results: Sequence[RunResult], method: str, baseline: str,
                   resamples: int = 10_000) -> dict[str, Interval]:
    """``method`` minus ``baseline`` paired by seed (same data, same test set), with percentile bootstrap intervals
    over seeds (``verl_ext.compare.intervals.paired_bootstrap``): ``to_target`` (rollouts, censored values as in
    ``summarise``) and ``accuracy`` (final). ``censored``: pairs in which either run never reached the target."""
    mine = {r.seed: r for r in results if r.strategy == method}
    base = {r.seed: r for r in results if r.strategy == baseline}
    seeds = sorted(set(mine) & set(base))
    to_target = [rollouts_or_spent(mine[s]) - rollouts_or_spent(base[s]) for s in seeds]
    accuracy = [mine[s].final_accuracy - base[s].final_accuracy for s in seeds]
    censored = sum(mine[s].rollouts_to_target is None or base[s].rollouts_to_target is None for s in seeds)
    return {"to_target": paired_bootstrap(to_target, resamples), "accuracy": paired_bootstrap(accuracy, resamples),
            "censored": censored}


def format_allocation_table(results: Sequence[RunResult], baselines: dict[str, str]) -> str:
    """Rollout-allocation comparison (Markdown): per strategy, rollouts to target (mean, reached/seeds), final
    accuracy, responses per prompt, reused groups and steps per run; for strategies named in ``baselines``
    (method -> base), the paired differences against the base with 95% bootstrap intervals over seeds
    (``*``: some pairs censored at the budget, so that difference is a bound)."""
    groups: dict[str, list[RunResult]] = {}
    for r in results:
        groups.setdefault(r.strategy, []).append(r)
    cells = []
    for name, runs in groups.items():
        reached = sum(r.rollouts_to_target is not None for r in runs)
        row = [name, f"{'>' if reached < len(runs) else ''}{np.mean([rollouts_or_spent(r) for r in runs]):,.0f}",
               f"{reached}/{len(runs)}", f"{np.mean([r.final_accuracy for r in runs]):.3f}",
               f"{np.mean([r.responses_per_prompt for r in runs]):.2f}", f"{np.mean([r.reused for r in runs]):,.0f}",
               f"{np.mean([r.steps for r in runs]):,.0f}", "", ""]
        if name in baselines:
            diff = paired_against(results, name, baselines[name])
            t, a = diff["to_target"], diff["accuracy"]
            mark = "*" if diff["censored"] else ""
            row[-2] = f"{t.mean:+,.0f} [{t.low:+,.0f}, {t.high:+,.0f}]{mark}"
            row[-1] = f"{a.mean * 100:+.1f} [{a.low * 100:+.1f}, {a.high * 100:+.1f}]"
        cells.append(row)
    head = ["strategy", "rollouts to target", "reached", "final acc", "responses/prompt", "reused groups", "steps",
            "Δ rollouts to target vs base", "Δ final acc (points) vs base"]
    return tabulate(cells, headers=head, tablefmt="pipe", disable_numparse=True,
                    colalign=("left",) + ("right",) * (len(head) - 1))


def mean_curve(runs: Sequence[RunResult], grid: np.ndarray) -> np.ndarray:
    """Per-seed accuracy interpolated on a common rollout grid: array (seeds, len(grid))."""
    return np.stack([np.interp(grid, r.rollouts, r.accuracy) for r in runs])


def plot(results: Sequence[RunResult], path: str | Path, title: str) -> bool:
    """Accuracy vs training rollouts per strategy (mean over seeds, shaded 95% interval) to a PNG.

    Returns False (and writes nothing) when matplotlib is not installed: the plot is optional, the table is not.
    """
    try:
        import matplotlib
    except ImportError:
        return False
    matplotlib.use("Agg")  # no display on servers and CI
    import matplotlib.pyplot as plt

    groups: dict[str, list[RunResult]] = {}
    for r in results:
        groups.setdefault(r.strategy, []).append(r)
    first = results[0]
    grid = np.linspace(0, max(r.rollouts[-1] for r in results), 200)
    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=100)
    for name, runs in groups.items():
        curves = mean_curve(runs, grid)
        mean = curves.mean(axis=0)
        ax.plot(grid, mean, label=name, lw=1.5, ls="--" if name == "oracle" else "-")
        if len(runs) > 1:
            half = np.array([mean_ci(col)[2] for col in curves.T]) - mean
            ax.fill_between(grid, mean - half, mean + half, alpha=0.15, lw=0)
    ax.axhline(first.target_accuracy, color="grey", lw=0.8, ls=":")
    ax.set_xlabel("training rollouts (responses generated)")
    ax.set_ylabel("test accuracy (expected pass@1)")
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, ncol=2, loc="lower right")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return True
