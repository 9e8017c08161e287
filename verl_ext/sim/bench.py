"""Strategy benchmark on the simulator (CLI): every strategy x every seed of one scenario, then a table and a plot.

    python -m verl_ext.sim.bench --scenario default \\
        --strategies uniform,prioritized,boundary,heapa,hive,mopps,greso,oracle --seeds 10 --out docs/sim_default.png
    python -m verl_ext.sim.bench --scenario all --seeds 10 --jobs 2     # every shipped scenario + a summary matrix
    python -m verl_ext.sim.bench --scenario small_batch --set learner.repeat_decay=0.7   # a field overridden

The table (Markdown, on stdout) has, per strategy, the mean and 95% interval over seeds of: training rollouts to
reach the scenario's target accuracy, accuracy when the rollout budget is spent, and the share of zero-variance
groups; then the mean augmentation generations, teacher calls and verification forward passes (costs that are
not training rollouts). Progress goes to stderr. Seeds are 0..N-1 (``--first-seed`` shifts them); a run depends
only on (scenario, strategy, seed), so ``--jobs`` changes the wall-clock time, never the numbers.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from tqdm import tqdm

from verl_ext.sim.config import ScenarioConfig, available_scenarios, load_scenario, with_overrides
from verl_ext.sim.report import format_matrix, format_table, plot, summarise
from verl_ext.sim.runner import SIM_STRATEGIES, RunResult, run_simulation

DEFAULT_STRATEGIES = "uniform,prioritized,boundary,heapa,hive,mopps,greso,oracle"


def _run(task: tuple[ScenarioConfig, str, int]) -> RunResult:
    config, strategy, seed = task
    return run_simulation(config, strategy, seed)


def run_grid(config: ScenarioConfig, strategies: list[str], seeds: list[int], jobs: int = 1,
             progress: bool = True) -> list[RunResult]:
    """All (strategy, seed) runs, in strategy-major order whatever ``jobs`` is."""
    tasks = [(config, s, seed) for s in strategies for seed in seeds]
    results: list[RunResult] = []
    # tqdm draws the bar on stderr, so stdout keeps only the tables (pipe them to a file as they are)
    with tqdm(total=len(tasks), desc=config.name, unit="run", file=sys.stderr, disable=not progress) as bar:
        def done(res: RunResult) -> None:
            results.append(res)
            bar.set_postfix_str(f"{res.strategy} seed {res.seed}", refresh=False)
            bar.update()

        if jobs <= 1:
            for task in tasks:
                done(_run(task))
        else:
            with ProcessPoolExecutor(max_workers=jobs) as ex:
                for res in ex.map(_run, tasks):
                    done(res)
    return results


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m verl_ext.sim.bench", description=__doc__.split("\n")[0])
    ap.add_argument("--scenario", default="default",
                    help=f"shipped scenario ({', '.join(available_scenarios())}), a YAML path, a comma-separated "
                         "list of them, or 'all'")
    ap.add_argument("--strategies", default=DEFAULT_STRATEGIES,
                    help=f"comma-separated, from: {', '.join(SIM_STRATEGIES)}")
    ap.add_argument("--seeds", type=int, default=10, help="number of seeds per strategy")
    ap.add_argument("--first-seed", type=int, default=0)
    ap.add_argument("--jobs", type=int, default=1, help="worker processes (results do not depend on it)")
    ap.add_argument("--out", default=None, help="PNG plot of accuracy vs rollouts (needs matplotlib)")
    ap.add_argument("--json", default=None, help="write every run's curve and counters to this JSON file")
    ap.add_argument("--set", dest="overrides", action="append", default=[], metavar="SECTION.KEY=VALUE",
                    help="override a scenario field in every scenario run (repeatable), e.g. "
                         "learner.repeat_decay=0.7")
    ap.add_argument("--quiet", action="store_true", help="no progress on stderr")
    args = ap.parse_args(argv)
    args.strategies = [s.strip() for s in args.strategies.split(",") if s.strip()]
    unknown = [s for s in args.strategies if s not in SIM_STRATEGIES]
    if unknown:
        ap.error(f"unknown strategies {unknown}; known: {', '.join(SIM_STRATEGIES)}")
    if args.seeds < 1 or args.first_seed < 0 or args.jobs < 1:
        ap.error("--seeds and --jobs must be >= 1 and --first-seed >= 0")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    names = available_scenarios() if args.scenario == "all" else [n for n in args.scenario.split(",") if n]
    seeds = list(range(args.first_seed, args.first_seed + args.seeds))
    by_scenario: dict[str, list] = {}
    all_results: list[tuple[str, RunResult]] = []
    for name in names:
        config = with_overrides(load_scenario(name), args.overrides)
        started = time.perf_counter()
        results = run_grid(config, args.strategies, seeds, jobs=args.jobs, progress=not args.quiet)
        wall = time.perf_counter() - started
        train = config.train
        print(f"scenario {config.name!r}: {config.description}")
        print(f"{len(seeds)} seeds x {len(args.strategies)} strategies, {train.batch_size} prompts x {train.n} "
              f"rollouts per step, budget {train.budget_rollouts:,} rollouts; {wall:.0f} s\n")
        rows = summarise(results)
        print(format_table(rows, train.target_accuracy, train.budget_rollouts) + "\n")
        by_scenario[config.name] = rows
        all_results += [(config.name, r) for r in results]
        if args.out:
            out = args.out if len(names) == 1 else str(Path(args.out).with_name(
                f"{Path(args.out).stem}_{config.name}{Path(args.out).suffix}"))
            title = f"simulator, scenario '{config.name}' ({len(seeds)} seeds, mean and 95% interval)"
            if plot(results, out, title):
                sys.stderr.write(f"plot written to {out}\n")
            else:
                sys.stderr.write("matplotlib is not installed: no plot (pip install matplotlib)\n")
    if len(names) > 1:
        print("rollouts to target as a multiple of uniform's (reached/seeds), accuracy at the budget:\n")
        print(format_matrix(by_scenario))
    if args.json:
        records = [{"scenario": name, **vars(r)} for name, r in all_results]  # verl_ext.sim.paired reads them
        Path(args.json).write_text(json.dumps(records), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
