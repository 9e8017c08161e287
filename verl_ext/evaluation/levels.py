"""Accuracy per group of problems (a field of ``extra_info``, e.g. the CPU task's ``level``), per run and paired.

``python -m verl_ext.evaluation levels eval/*/ --data val.parquet --field level --baseline grpo`` reads each run
folder's ``scored.jsonl`` (written by ``score`` / ``generate``), groups its problems by ``extra_info[field]`` of the
evaluation data (matched on ``(data_source, extra_info.index)``, as scoring matches them) and prints avg@n in % per
group. Run folders named ``<method>_s<seed>`` are paired by seed: for every method, the mean over the seeds both
ran of its difference to ``--baseline`` per group, with the seeds' spread. Which groups a method gains or loses on
is what a single headline number hides (docs/cpu_learning.md: the frontier's deficit lay on the easy levels).
"""

from __future__ import annotations

import json
import math
import os
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from tabulate import tabulate

from verl_ext.compare.runs import method_and_seed
from verl_ext.evaluation.generations import GenerationsError, Problem


@dataclass(frozen=True)
class RunLevels:
    """One run's avg@n (a fraction) per group, and how many problems each group holds."""

    name: str
    accuracy: dict[str, float]
    counts: dict[str, int]
    overall: float

    @property
    def method_seed(self) -> tuple[str, str] | None:
        """``(method, seed)`` from a ``<method>_s<seed>`` name, as the compare CLI reads run names."""
        method, seed = method_and_seed(self.name)
        return (method, seed) if seed is not None else None


def group_of(data: Sequence[Problem], field: str) -> dict[tuple[str, str], str]:
    """``(data_source, index) -> str(extra_info[field])``; a row without the field is an error naming it."""
    out = {}
    for p in data:
        info = p.extra_info or {}
        if field not in info:
            raise GenerationsError(f"{p.where}: field 'extra_info.{field}' missing (needed to group by it)")
        out[p.key] = str(info[field])
    return out


def read_run(folder: str | os.PathLike, groups: dict[tuple[str, str], str]) -> RunLevels:
    """A run folder's ``scored.jsonl`` grouped: the mean correctness of each problem, averaged per group."""
    path = Path(folder) / "scored.jsonl"
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no scored.jsonl (run `python -m verl_ext.evaluation score|generate` first)")
    sums: dict[str, float] = defaultdict(float)
    counts: dict[str, int] = defaultdict(int)
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            row = json.loads(line)
            key = (str(row["data_source"]), str(row["index"]))
            if key not in groups:
                raise GenerationsError(f"{path}:{lineno}: problem {key} is not in the evaluation data")
            correct = row["correct"]
            sums[groups[key]] += sum(correct) / len(correct)
            counts[groups[key]] += 1
    if not counts:
        raise GenerationsError(f"{path}: no scored problems")
    total = sum(counts.values())
    return RunLevels(Path(folder).name, {g: sums[g] / counts[g] for g in counts}, dict(counts),
                     sum(sums.values()) / total)


def paired(runs: Sequence[RunLevels], baseline: str) -> dict[str, dict[str, tuple[float, float, int]]]:
    """``method -> group (and "all") -> (mean difference, sd over seeds, seeds)`` against ``baseline``, over the
    seeds both ran; runs whose names are not ``<method>_s<seed>`` are left out."""
    by: dict[str, dict[str, RunLevels]] = defaultdict(dict)
    for r in runs:
        if r.method_seed:
            method, seed = r.method_seed
            by[method][seed] = r
    base = by.get(baseline, {})
    out: dict[str, dict[str, tuple[float, float, int]]] = {}
    for method, seeds in sorted(by.items()):
        common = sorted(set(seeds) & set(base))
        if method == baseline or not common:
            continue
        keys = ["all"] + sorted(base[common[0]].accuracy)
        out[method] = {}
        for g in keys:
            diffs = [_value(seeds[s], g) - _value(base[s], g) for s in common]
            mean = sum(diffs) / len(diffs)
            sd = math.sqrt(sum((d - mean) ** 2 for d in diffs) / (len(diffs) - 1)) if len(diffs) > 1 else 0.0
            out[method][g] = (mean, sd, len(diffs))
    return out


def _value(run: RunLevels, group: str) -> float:
    return run.overall if group == "all" else run.accuracy.get(group, math.nan)


def tables(runs: Sequence[RunLevels], baseline: str | None) -> str:
    """Markdown: avg@n in % per run and group; then, with a baseline, the paired differences in points."""
    groups = sorted({g for r in runs for g in r.accuracy})
    head = ["run", "all"] + groups
    rows = [[r.name, 100 * r.overall] + [100 * r.accuracy.get(g, math.nan) for g in groups] for r in runs]
    text = tabulate(rows, headers=head, tablefmt="pipe", floatfmt=".1f") + "\n"
    if baseline:
        diffs = paired(runs, baseline)
        if not diffs:
            return text + f"\nno run pairs with '{baseline}' by seed (folders named <method>_s<seed>)\n"
        head = ["method", "seeds", "all"] + groups
        rows = [[m, d["all"][2]] + [f"{100 * d[g][0]:+.1f} ± {100 * d[g][1]:.1f}" if g in d else "" for g in
                                    ["all"] + groups] for m, d in diffs.items()]
        text += f"\npaired difference to {baseline} in points (mean ± sd over the seeds both ran):\n\n"
        text += tabulate(rows, headers=head, tablefmt="pipe") + "\n"
    return text
