"""Method against baseline, paired by seed, with bootstrap intervals, and the sentence each interval supports.

Runs of two methods that share a seed share their data order and initial policy, so the comparison is made per
seed (method minus baseline) and the seeds are resampled with replacement: a percentile interval of the mean
paired difference. Three seeds give a coarse interval; the words say "no difference shown" whenever it contains
zero, and nothing stronger is ever written. Below ``MIN_SEEDS`` no words are given at all: the bootstrap of two
seeds is just their range (two seeds that happen to agree give a zero-width "interval"). Pure Python + numpy; seeded, so a table regenerates identically.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from tabulate import tabulate

DEFAULT_RESAMPLES = 10_000
MIN_SEEDS = 3  # fewer seeds get no verdict, only their numbers
RESOLVE_POINTS = 1.0  # the difference (accuracy points) "seeds needed" is computed for
Z_95 = 1.959964


@dataclass(frozen=True)
class Interval:
    """Mean of the paired differences over ``n`` seeds and its bootstrap interval at ``level``."""

    mean: float
    low: float
    high: float
    n: int
    level: float = 0.95
    sd: float = math.nan  # sample standard deviation of the paired differences (n - 1 in the denominator)

    def seeds_needed(self, half_width: float) -> int | None:
        """Seeds for a 95 % interval of ``half_width`` (same units as the differences), from the measured paired
        spread: ``ceil((1.96 sd / half_width)^2)``, at least ``MIN_SEEDS``; ``None`` below 2 seeds (no spread)."""
        if self.n < 2 or math.isnan(self.sd):
            return None
        return max(MIN_SEEDS, math.ceil((Z_95 * self.sd / half_width) ** 2))

    def contains_zero(self) -> bool:
        return self.low <= 0.0 <= self.high

    def words(self, better: str, worse: str) -> str:
        """``better`` when the whole interval lies above zero, ``worse`` below, else 'no difference shown'."""
        if self.n == 0:
            return "no seed to compare (not reached)"
        if self.n < 2:
            return "one seed: no interval"
        if self.n < MIN_SEEDS:
            return f"{self.n} seeds: too few for a verdict"
        if self.contains_zero():
            return "no difference shown (interval contains 0)"
        return better if self.low > 0 else worse


def paired_bootstrap(diffs: Sequence[float], resamples: int = DEFAULT_RESAMPLES, level: float = 0.95,
                     seed: int = 0) -> Interval:
    """Percentile bootstrap of the mean of ``diffs`` (one per seed)."""
    values = np.asarray([d for d in diffs if d is not None and not math.isnan(d)], dtype=np.float64)
    if values.size == 0:
        return Interval(math.nan, math.nan, math.nan, 0, level)
    mean = float(values.mean())
    if values.size == 1:
        return Interval(mean, mean, mean, 1, level)
    sd = float(values.std(ddof=1))
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, values.size, size=(resamples, values.size))
    means = values[picks].mean(axis=1)
    tail = (1.0 - level) / 2.0
    low, high = np.quantile(means, [tail, 1.0 - tail])
    return Interval(mean, float(low), float(high), int(values.size), level, sd)


def paired(method: Mapping[str, float | None], baseline: Mapping[str, float | None]) -> list[float]:
    """method[seed] - baseline[seed] for the seeds both have a value for."""
    return [float(method[s]) - float(baseline[s]) for s in sorted(set(method) & set(baseline))
            if method[s] is not None and baseline[s] is not None]


@dataclass(frozen=True)
class Censored:
    """How many paired seeds counted a run that never reached the target at its last validation, per side."""

    method: int = 0
    baseline: int = 0


def to_target_or_censored(summary) -> tuple[float | None, bool]:
    """A run's rollouts to the target, else the rollouts of its last validation (``target_censored_at``, a lower
    bound) flagged as censored; (None, False) when it has neither."""
    if summary.rollouts_to_target:
        return float(summary.rollouts_to_target), False
    end = getattr(summary, "target_censored_at", None)
    return (float(end), True) if end else (None, False)


def paired_censored_log_ratio(method: Mapping[str, tuple[float | None, bool]],
                              baseline: Mapping[str, tuple[float | None, bool]]) -> tuple[list[float], Censored]:
    """log(method / baseline) per shared seed (rollouts to a target compare as a ratio: 0.7x = 30 % fewer), over
    seeds where at least one side reached the target, the other counted at its last validation when it did not (as
    the simulator's report counts it). Keeping only the seeds where both reached it
    drops exactly the seeds on which one method failed, so it biases the ratio towards whichever failed; a
    censored value is a lower bound, which understates the cost of the side that failed. Seeds on which neither
    reached it carry no order and are left out."""
    diffs, short_m, short_b = [], 0, 0
    for s in sorted(set(method) & set(baseline)):
        (m, m_cut), (b, b_cut) = method[s], baseline[s]
        if m is None or b is None or (m_cut and b_cut):
            continue
        diffs.append(math.log(m / b))
        short_m, short_b = short_m + m_cut, short_b + b_cut
    return diffs, Censored(short_m, short_b)


def ratio_words(iv: Interval, censored: Censored) -> str:
    """The rollouts ratio's words: 'fewer' is withheld when the method was counted at its end on some seed (its
    true cost there is higher), 'more' when the baseline was."""
    words = iv.words("more", "fewer")
    if words == "fewer" and censored.method:
        return f"not shown: the method never reached it on {censored.method} seed(s), counted at their end"
    if words == "more" and censored.baseline:
        return f"not shown: the baseline never reached it on {censored.baseline} seed(s), counted at their end"
    return words


def fmt_censored(censored: Censored) -> str:
    """'' or ' (short: 2 | 1)': seeds counted at their end, method | baseline."""
    if not (censored.method or censored.baseline):
        return ""
    return f" (short: {censored.method} | {censored.baseline})"


def fmt_points(iv: Interval, scale: float = 100.0) -> str:
    """An accuracy difference in points: '+1.2 [-0.4, +2.9]'."""
    if iv.n == 0:
        return "n/a"
    return f"{iv.mean * scale:+.1f} [{iv.low * scale:+.1f}, {iv.high * scale:+.1f}]"


def fmt_ratio(iv: Interval) -> str:
    """A log-ratio interval shown as a ratio: '0.71x [0.55x, 0.93x]'."""
    if iv.n == 0:
        return "n/a"
    return f"{math.exp(iv.mean):.2f}x [{math.exp(iv.low):.2f}x, {math.exp(iv.high):.2f}x]"


def _by_seed(summaries, method: str, value) -> dict[str, float | None]:
    return {s.seed: value(s) for s in summaries if s.method == method and s.seed is not None}


def against_baseline(summaries: Sequence, baseline: str, budgets: Sequence[float],
                     resamples: int = DEFAULT_RESAMPLES, at_steps: Sequence[int] = ()) -> list[dict]:
    """One row per other method: paired intervals of the accuracy difference at each budget, at each of
    ``at_steps`` and at the end, and of the rollouts-to-target ratio (``RunSummary``s with ``method``, ``seed``,
    ``val_at_budget``, ``val_at_step``, ``val_final``, ``rollouts_to_target``)."""
    methods = sorted({s.method for s in summaries} - {baseline})
    if baseline not in {s.method for s in summaries}:
        raise ValueError(f"baseline {baseline!r} is not among the runs' methods {sorted({s.method for s in summaries})}")
    def interval(method: str, value, pair=paired) -> Interval:
        return paired_bootstrap(pair(_by_seed(summaries, method, value), _by_seed(summaries, baseline, value)),
                                resamples)

    rows = []
    for method in methods:
        row = {"method": method, "baseline": baseline,
               "at_budget": {float(b): interval(method, lambda s, b=float(b): s.val_at_budget.get(b))
                             for b in budgets},
               "at_step": {int(st): interval(method, lambda s, st=int(st): s.val_at_step.get(st)) for st in at_steps},
               "final": interval(method, lambda s: s.val_final)}
        if any(getattr(s, "val_tail", None) is not None for s in summaries):  # only with --tail-from(-step)
            row["tail"] = interval(method, lambda s: s.val_tail)
        diffs, censored = paired_censored_log_ratio(_by_seed(summaries, method, to_target_or_censored),
                                                    _by_seed(summaries, baseline, to_target_or_censored))
        row["rollouts_to_target"] = paired_bootstrap(diffs, resamples)
        row["rollouts_to_target_censored"] = censored
        rows.append(row)
    return rows


def decisive(row: dict) -> Interval:
    """The interval a reading leans on most: the late mean when measured, else the largest budget, else the end."""
    if "tail" in row and row["tail"].n:
        return row["tail"]
    if row["at_budget"]:
        return max(row["at_budget"].items())[1]
    return row["final"]


def seeds_for_one_point(row: dict, scale: float = 100.0) -> str:
    """Seeds a 95 % interval of +-1 point would need, from the measured paired spread of ``decisive(row)``."""
    needed = decisive(row).seeds_needed(RESOLVE_POINTS / scale)
    return "n/a" if needed is None else str(needed)


def reading(row: dict) -> str:
    """What the intervals of one row support, in words (nothing beyond them)."""
    parts = []
    if row["at_budget"]:
        budget, iv = max(row["at_budget"].items())
        parts.append(f"accuracy at {budget:,.0f} rollouts: " + iv.words("higher", "lower"))
    parts.append("final accuracy: " + row["final"].words("higher", "lower"))
    if "tail" in row:
        parts.append("mean of the late validations: " + row["tail"].words("higher", "lower"))
    censored = row.get("rollouts_to_target_censored", Censored())
    parts.append("rollouts to target: " + ratio_words(row["rollouts_to_target"], censored))
    return "; ".join(parts)


def markdown_against_baseline(rows: Sequence[dict], budgets: Sequence[float], at_steps: Sequence[int] = ()) -> str:
    """Differences in accuracy points (method - baseline) and the rollouts ratio, each with its 95 % interval."""
    if not rows:
        return ""
    head = (["method", "vs", "seeds"] + [f"Δ acc @ {b:,.0f}" for b in budgets]
            + [f"Δ acc @ step {int(st)}" for st in at_steps] + ["Δ final acc"]
            + (["Δ late mean"] if any("tail" in r for r in rows) else [])
            + ["rollouts to target (ratio)", "seeds for ±1 pt", "reading"])
    cells = []
    for row in rows:
        n = max([row["final"].n] + [iv.n for iv in row["at_budget"].values()])
        line = [row["method"], row["baseline"], str(n)]
        line += [fmt_points(row["at_budget"][float(b)]) for b in budgets]
        line += [fmt_points(row["at_step"][int(st)]) for st in at_steps]
        tail = [fmt_points(row["tail"]) if "tail" in row else "n/a"] if any("tail" in r for r in rows) else []
        cells.append(line + [fmt_points(row["final"])] + tail
                     + [fmt_ratio(row["rollouts_to_target"]) + fmt_censored(row.get("rollouts_to_target_censored",
                                                                                     Censored())),
                        seeds_for_one_point(row), reading(row)])
    align = ("left", "left") + ("right",) * (len(head) - 3) + ("left",)
    table = tabulate(cells, headers=head, tablefmt="pipe", disable_numparse=True, colalign=align)
    return table + ("\n\nDifferences in accuracy points, method minus baseline, paired by seed; [95 % percentile "
                    "bootstrap interval over seeds]. A ratio below 1 means fewer rollouts. 'seeds for ±1 pt': "
                    "the seeds a 95 % interval of +-1 point would need, ceil((1.96 sd / 1 pt)^2) from the sd of "
                    "the paired differences of the late mean (else the largest budget). '(short: m | b)': seeds on "
                    "which the method | the baseline never reached the target, counted at their last validation "
                    "(a lower bound on their rollouts; seeds where neither reached it are left out).\n")
