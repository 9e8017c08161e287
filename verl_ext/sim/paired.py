"""Paired comparison of simulator runs (CLI): one strategy against another, seed by seed, in every scenario.

    python -m verl_ext.sim.paired cold=heapa_dapo:cold.json arrival=heapa_dapo:arrival.json \\
        uniform=uniform:uniform.json target=heapa_dapo_target:t.json signal=heapa_dapo_signal:s.json \\
        --baseline arrival --uniform uniform --better target,signal

An ARM is ``LABEL=STRATEGY:FILE[,FILE...]``: the runs of ``STRATEGY`` in the ``--json`` files of
``python -m verl_ext.sim.bench``; the first ARM is the method. Several files are realisations of the same seeds
(``--set train.rollout_stream=k``): a seed's value is the mean over them. Per scenario (Markdown on stdout): each
arm's mean rollouts to the target (a run that never reached it counts its rollouts at the budget; ``>`` and
``(reached/runs)`` say so) as a multiple of ``--uniform``'s, and its accuracy at the budget; the method's rollouts
over the baseline's, paired by seed (geometric mean, 95 % percentile bootstrap over seeds; seeds on which neither
reached it left out); over the better ``--better`` arm's mean; and its accuracy minus ``--uniform``'s and the
baseline's in points, paired by seed.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from verl_ext.compare.intervals import paired_bootstrap, paired_censored_log_ratio
from verl_ext.sim.report import rollouts_or_spent
from verl_ext.sim.runner import RunResult


@dataclass
class Arm:
    """One strategy's runs: ``runs[scenario][seed]`` = (rollouts to target or at the budget, reached, accuracy)."""

    label: str
    strategy: str
    runs: dict[str, dict[int, list[tuple[float, bool, float]]]] = field(default_factory=dict)

    def seed_values(self, scenario: str) -> dict[int, tuple[float, bool, float]]:
        """Per seed, the mean rollouts, whether any realisation reached the target, the mean accuracy."""
        out = {}
        for seed, runs in self.runs[scenario].items():
            out[seed] = (sum(r for r, _, _ in runs) / len(runs), any(ok for _, ok, _ in runs),
                         sum(a for _, _, a in runs) / len(runs))
        return out

    def mean(self, scenario: str) -> tuple[float, int, int, float]:
        """Mean rollouts, runs that reached the target, runs, mean accuracy."""
        flat = [run for runs in self.runs[scenario].values() for run in runs]
        return (sum(r for r, _, _ in flat) / len(flat), sum(ok for _, ok, _ in flat), len(flat),
                sum(a for _, _, a in flat) / len(flat))


def load_arm(spec: str) -> Arm:
    label, sep, rest = spec.partition("=")
    strategy, sep2, files = rest.partition(":")
    if not (sep and sep2 and label and strategy and files):
        raise SystemExit(f"arm {spec!r}: expected LABEL=STRATEGY:FILE[,FILE...]")
    arm = Arm(label, strategy)
    runs: dict[str, dict[int, list]] = defaultdict(lambda: defaultdict(list))
    for path in files.split(","):
        try:
            records = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as err:
            raise SystemExit(f"arm {label!r}: cannot read {path}: {err}") from err
        for i, rec in enumerate(records):
            if "scenario" not in rec:
                raise SystemExit(f"{path}, record {i}: no 'scenario' field (written by an older bench: re-run it)")
            if rec["strategy"] != strategy:
                continue
            try:
                run = RunResult(**{k: v for k, v in rec.items() if k != "scenario"})
            except TypeError as err:
                raise SystemExit(f"{path}, record {i}: not a bench run record ({err})") from err
            runs[rec["scenario"]][run.seed].append((rollouts_or_spent(run), run.rollouts_to_target is not None,
                                                    run.final_accuracy))
    if not runs:
        raise SystemExit(f"arm {label!r}: no runs of strategy {strategy!r} in {files}")
    arm.runs = {sc: dict(seeds) for sc, seeds in runs.items()}
    return arm


def _iv(values: list[float], fmt: str, scale=lambda x: x) -> str:
    if not values:
        return "n/a"
    iv = paired_bootstrap(values)
    return "{} [{}, {}]".format(*(fmt.format(scale(v)) for v in (iv.mean, iv.low, iv.high)))


def table(arms: list[Arm], baseline: Arm, uniform: Arm | None = None, better: list[Arm] = ()) -> str:
    method = arms[0]
    scenarios = sorted(set.intersection(*(set(a.runs) for a in arms)))
    head = ["scenario", *(a.label for a in arms), f"{method.label} / {baseline.label}, paired"]
    head += [f"/ better of {', '.join(a.label for a in better)}"] if better else []
    head += [f"acc: - {uniform.label}"] if uniform else []
    head += [f"acc: - {baseline.label}"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for sc in scenarios:
        unit = uniform.mean(sc)[0] if uniform else 1.0
        cells = [sc]
        for arm in arms:
            rollouts, reached, n, acc = arm.mean(sc)
            cells.append(f"{'>' if reached < n else ''}{rollouts / unit:.2f}{'x' if uniform else ''} "
                         f"({reached}/{n}), {acc:.3f}")
        mine, base = method.seed_values(sc), baseline.seed_values(sc)
        ratios, _ = paired_censored_log_ratio({s: (v[0], not v[1]) for s, v in mine.items()},
                                              {s: (v[0], not v[1]) for s, v in base.items()})
        cells.append(_iv(ratios, "{:.2f}x", math.exp))
        if better:
            cells.append(f"{method.mean(sc)[0] / min(a.mean(sc)[0] for a in better):.3f}x")
        for other in ([uniform] if uniform else []) + [baseline]:
            theirs = other.seed_values(sc)
            common = sorted(set(mine) & set(theirs))
            cells.append(_iv([100 * (mine[s][2] - theirs[s][2]) for s in common], "{:+.1f}"))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m verl_ext.sim.paired", description=__doc__.split("\n")[0])
    ap.add_argument("arms", nargs="+", help="LABEL=STRATEGY:FILE[,FILE...]; the first is the method")
    ap.add_argument("--baseline", required=True, help="the arm the method is paired against")
    ap.add_argument("--uniform", default=None, help="the arm rollouts are read as a multiple of")
    ap.add_argument("--better", default="", help="comma-separated arms: the method over the better one's rollouts")
    args = ap.parse_args(argv)
    arms = [load_arm(spec) for spec in args.arms]
    by_label = {a.label: a for a in arms}

    def named(label: str) -> Arm:
        if label not in by_label:
            raise SystemExit(f"no arm labelled {label!r} (arms: {', '.join(by_label)})")
        return by_label[label]

    better = [named(x) for x in args.better.split(",") if x]
    sys.stdout.write(table(arms, named(args.baseline), named(args.uniform) if args.uniform else None, better))
    return 0


if __name__ == "__main__":
    sys.exit(main())
