"""``python -m verl_ext.compare RUN [RUN ...] --out DIR``: runs side by side, grouped by method over seeds.

    python -m verl_ext.compare outputs/grpo outputs/heapa_dapo --out compare/        # CPU launcher outputs
    python -m verl_ext.compare outputs/cpu_compare/*_s* --out compare/                  # method_s<seed> folders
    python -m verl_ext.compare grpo=wandb/offline-run-2026... wandb:me/math-rl/abc123 --out compare/

A RUN is ``[NAME=]SOURCE`` (see ``verl_ext.compare.runs``). The method and seed come from NAME or the folder
name (``<method>_s<seed>``), or wandb's ``method:`` tag and ``heapa.seed``. Writes ``DIR/table.md``,
``DIR/summary.json`` (per run and per method) and the PNG curves (``verl_ext.compare.plots``).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import re
import sys
from pathlib import Path

from verl_ext.compare import runs as runs_mod
from verl_ext.compare.diagnostics import table as diagnostics_table
from verl_ext.compare.intervals import (RESOLVE_POINTS, against_baseline, decisive, markdown_against_baseline,
                                        reading)
from verl_ext.compare.summary import (default_budget, group_by_method, markdown, method_stats, summarize_run,
                                      tail_label)

logger = logging.getLogger("verl_ext.compare")


def parse_floats(text: str | None, what: str) -> list[float]:
    if not text:
        return []
    try:
        return [float(x.replace("_", "")) for x in text.split(",") if x.strip()]
    except ValueError as err:
        raise SystemExit(f"{what} {text!r}: expected comma-separated numbers") from err


def parse_steps(text: str | None) -> list[int]:
    steps = parse_floats(text, "--at-steps")
    if any(st < 0 or st != int(st) for st in steps):
        raise SystemExit(f"--at-steps {text!r}: expected whole training steps >= 0")
    return [int(st) for st in steps]


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m verl_ext.compare", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("runs", nargs="+", help="[NAME=]SOURCE: metrics.jsonl, a run folder, a wandb offline folder, "
                                           "or wandb:<entity>/<project>/<run_id>")
    p.add_argument("--out", required=True, help="folder for table.md, summary.json and the PNGs")
    p.add_argument("--budgets", default=None,
                   help="rollout counts to compare accuracy at (default: the largest count every run validated at)")
    p.add_argument("--target", default="auto",
                   help="accuracy (0-1) for 'rollouts to target'; 'auto' = the lowest method-mean final accuracy; "
                        "'none' to leave the column out")
    p.add_argument("--target-window", type=int, default=1,
                   help="read 'rollouts to target' on the mean of this many consecutive validations (1: the first "
                        "validation at or above the target; one validation's noise picks the luckiest crossing)")
    p.add_argument("--target-crossing", choices=("validation", "interpolated"), default="validation",
                   help="where a run reaches the target: at the first validation at or above it, or where the line "
                        "from the validation before crosses it (finer than the validation spacing)")
    p.add_argument("--val-source", default=None, help="one data source's val accuracy (default: mean over all)")
    p.add_argument("--rollouts-per-step", type=float, default=None,
                   help="for runs without feedback/* metrics (plain verl): train_batch_size x rollout.n")
    p.add_argument("--name-regex", default=runs_mod.NAME_RE.pattern,
                   help="regex with named groups 'method' (and 'seed') applied to run names")
    p.add_argument("--baseline", default="auto",
                   help="method every other is compared with, paired by seed with bootstrap intervals "
                        "('auto' = grpo when present; 'none' to leave it out)")
    tail = p.add_mutually_exclusive_group()
    tail.add_argument("--tail-from", type=float, default=None,
                      help="also report the mean of each run's validations at or after this rollout count, and its "
                           "paired difference (a steadier end point than one validation)")
    tail.add_argument("--tail-from-step", type=int, default=None,
                      help="the same late mean read by training step: each run's validations at or after this step "
                           "(e.g. 40 for steps 40-80 of an 80-step run)")
    p.add_argument("--at-steps", default=None,
                   help="training steps (comma-separated) to also report each run's validation at, and its paired "
                        "difference; a run that did not validate at a step is left out there")
    p.add_argument("--max-step", type=int, default=None,
                   help="read every run only up to this training step, as if it had stopped there (the first 40 "
                        "steps of an 80-step run sit in a 40-step table)")
    p.add_argument("--no-plots", action="store_true", help="skip the PNGs (no matplotlib needed)")
    return p


def resolve_target(text: str, summaries) -> float | None:
    if text == "none":
        return None
    if text != "auto":
        value = parse_floats(text, "--target")[0]
        if not 0 <= value <= 1:
            raise SystemExit(f"--target {value}: expected an accuracy in [0, 1]")
        return value
    finals = {}
    for s in summaries:
        finals.setdefault(s.method, []).append(s.val_final)
    return min(sum(v) / len(v) for v in finals.values())


def resolve_baseline(text: str, stats: dict) -> str | None:
    if text == "none":
        return None
    if text == "auto":
        return "grpo" if "grpo" in stats and len(stats) > 1 else None
    if text not in stats:
        raise SystemExit(f"--baseline {text!r}: no runs of that method (methods: {sorted(stats)})")
    return text


def interval_row_dict(row: dict) -> dict:
    """An ``against_baseline`` row as JSON: each interval as {mean, low, high, n}, plus the reading in words."""
    def iv(x):
        return {"mean": x.mean, "low": x.low, "high": x.high, "n": x.n, "level": x.level, "sd": x.sd}

    return {"method": row["method"], "baseline": row["baseline"], "final": iv(row["final"]),
            "at_budget": {str(int(b)): iv(x) for b, x in row["at_budget"].items()},
            "rollouts_to_target_log_ratio": iv(row["rollouts_to_target"]), "reading": reading(row),
            "rollouts_to_target_censored": dataclasses.asdict(row["rollouts_to_target_censored"]),
            "at_step": {str(st): iv(x) for st, x in row.get("at_step", {}).items()},
            "seeds_for_one_point": decisive(row).seeds_needed(RESOLVE_POINTS / 100.0),
            **({"tail": iv(row["tail"])} if "tail" in row else {})}


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    args = build_parser().parse_args(argv)
    try:
        pattern = re.compile(args.name_regex)
    except re.error as err:
        raise SystemExit(f"--name-regex {args.name_regex!r}: {err}") from err
    runs = [run for spec in args.runs for run in runs_mod.load_runs(spec, pattern)]
    if args.max_step is not None:
        if args.max_step < 0:
            raise SystemExit(f"--max-step {args.max_step}: expected a step >= 0")
        for run in runs:
            run.steps = {step: m for step, m in run.steps.items() if step <= args.max_step}
    names = [r.name for r in runs]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise SystemExit(f"run names must be unique, got {dupes} more than once: name them with NAME=SOURCE")
    summaries = [summarize_run(r, data_source=args.val_source, rollouts_per_step=args.rollouts_per_step)
                 for r in runs]
    budgets = parse_floats(args.budgets, "--budgets") or [default_budget(summaries)]
    at_steps = parse_steps(args.at_steps)
    if args.tail_from_step is not None and args.tail_from_step < 0:
        raise SystemExit(f"--tail-from-step {args.tail_from_step}: expected a step >= 0")
    target = resolve_target(args.target, summaries)
    if args.target_window < 1:
        raise SystemExit(f"--target-window {args.target_window}: expected a count of validations, at least 1")
    for s in summaries:
        s.evaluate_at(budgets, target, args.tail_from, args.target_window, args.tail_from_step, at_steps,
                      interpolated=args.target_crossing == "interpolated")
    stats = {m: method_stats(group, budgets, at_steps) for m, group in group_by_method(summaries).items()}
    out = Path(args.out).expanduser()
    out.mkdir(parents=True, exist_ok=True)
    table = markdown(stats, budgets, target, tail_label(args.tail_from, args.tail_from_step), args.target_window,
                     at_steps, args.target_crossing == "interpolated")
    baseline = resolve_baseline(args.baseline, stats)
    rows = against_baseline(summaries, baseline, budgets, at_steps=at_steps) if baseline else []
    if rows:
        table += "\n" + markdown_against_baseline(rows, budgets, at_steps)
    table += diagnostics_table(runs)
    (out / "table.md").write_text(table, encoding="utf-8")
    summary = {"budgets": budgets, "target": target, "target_window": args.target_window,
               "target_crossing": args.target_crossing,
               "tail_from": args.tail_from, "tail_from_step": args.tail_from_step, "at_steps": at_steps,
               "val_source": args.val_source or "mean over data sources",
               "methods": stats, "runs": [s.as_dict() for s in summaries],
               "sources": {r.name: r.source for r in runs},
               "against_baseline": [interval_row_dict(r) for r in rows]}
    (out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")
    if not args.no_plots:
        from verl_ext.compare.plots import plot_all

        for path in plot_all(runs, summaries, out):
            logger.info("wrote %s", path)
    sys.stdout.write(table)
    return 0
