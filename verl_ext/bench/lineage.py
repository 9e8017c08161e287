"""Benchmark of the lineage refresh: ``python -m verl_ext.bench.lineage [--sizes 100000 1000000]``.

Measures, per forest size, a full refresh and the incremental refresh of one training step (``--updates`` base
values change, then ``refresh()``), and checks that both agree. The forest is a random recursive forest: the
first ``seed_fraction`` of the nodes are seeds, every later node is a child of a uniformly chosen earlier node
(so depth grows like log n, fan-out is skewed towards old nodes, as augmentation of re-sampled parents does).
It is built through ``load_state_dict`` so that setting up 10^6 nodes takes about a second. Targets
(docs/lineage.md): incremental <= 10 ms per step, full refresh of 10^6 nodes <= 3 s.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time

import numpy as np
from tabulate import tabulate

from verl_ext.pool.lineage import SCHEMA_VERSION, LineageConfig, LineageForest


def random_forest_state(n: int, seed_fraction: float, rng: np.random.Generator) -> dict:
    """State dict of a random recursive forest with ``n`` nodes (parents listed before children)."""
    n_seeds = max(1, int(n * seed_fraction))
    idx = np.arange(n)
    parents = np.where(idx < n_seeds, -1, (rng.random(n) * np.maximum(idx, 1)).astype(np.int64))
    base = rng.random(n)
    missing = rng.random(n) < 0.05  # a few never-measured records
    return {
        "schema_version": SCHEMA_VERSION,
        "ids": idx.tolist(),
        "parents": [None if p < 0 else p for p in parents.tolist()],
        "difficulty": rng.uniform(0.75, 1.33, n).tolist(),
        "live": (rng.random(n) > 0.1).tolist(),  # some evicted inner nodes kept for their descendants
        "base": [None if m else b for m, b in zip(missing.tolist(), base.tolist())],
        "dirty": [],
        "reset": [],
        "dropped": 0,
        "refused": 0,
    }


def run_size(n: int, updates: int, steps: int, config: LineageConfig, seed: int = 0) -> dict:
    """Time one full refresh (best of 3) and ``steps`` incremental steps on a forest of ``n`` nodes."""
    rng = np.random.default_rng(seed)
    forest = LineageForest(config)
    t0 = time.perf_counter()
    forest.load_state_dict(random_forest_state(n, 0.1, rng))
    build_s = time.perf_counter() - t0
    full_s = min(_timed(lambda: forest.refresh(full=True)) for _ in range(3))
    per_step, written = [], []
    for _ in range(steps):
        ids = rng.integers(0, n, updates).tolist()
        vals = rng.random(updates).tolist()
        t0 = time.perf_counter()
        for rid, p in zip(ids, vals):
            forest.set_base(rid, p)
        result = forest.refresh(full=False)
        per_step.append(time.perf_counter() - t0)
        written.append(len(result.values))
    check = {i: forest.value(i) for i in rng.integers(0, n, 2000).tolist()}
    forest.refresh(full=True)
    max_diff = max(abs(forest.value(i) - v) for i, v in check.items() if v is not None)
    m = forest.metrics()
    return {
        "nodes": n, "edges": int(m["lineage/edges"]), "max_depth": int(m["lineage/max_depth"]),
        "build_s": build_s, "full_s": full_s,
        "inc_ms_median": 1e3 * statistics.median(per_step), "inc_ms_max": 1e3 * max(per_step),
        "written_per_step": statistics.mean(written), "max_abs_diff": max_diff,
    }


def _timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def format_table(rows: list[dict]) -> str:
    head = ("nodes", "edges", "max_depth", "build_s", "full_s", "inc_ms_median", "inc_ms_max",
            "written_per_step", "max_abs_diff")
    fmt = {"build_s": "{:.2f}", "full_s": "{:.3f}", "inc_ms_median": "{:.2f}", "inc_ms_max": "{:.2f}",
           "written_per_step": "{:.0f}", "max_abs_diff": "{:.1e}"}
    cells = [[fmt.get(k, "{}").format(r[k]) for k in head] for r in rows]
    return tabulate(cells, headers=head, tablefmt="pipe", disable_numparse=True, colalign=("right",) * len(head))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[100_000, 1_000_000])
    ap.add_argument("--updates", type=int, default=512, help="base values changed per step")
    ap.add_argument("--steps", type=int, default=20, help="incremental steps timed per size")
    ap.add_argument("--method", choices=["pathagg", "childagg"], default="pathagg")
    ap.add_argument("--tau", type=float, default=1.0)
    ap.add_argument("--max-depth", type=int, default=None)
    args = ap.parse_args(argv)
    config = LineageConfig(method=args.method, tau=args.tau, max_depth=args.max_depth,
                           max_nodes=max(args.sizes) + 1)
    rows = [run_size(n, args.updates, args.steps, config) for n in args.sizes]
    # A CLI's table is its product: written to stdout, not logged.
    sys.stdout.write(
        f"lineage refresh benchmark: {args.method}, tau={args.tau}, max_depth={args.max_depth}, "
        f"{args.updates} updates/step, {args.steps} steps; {os.cpu_count()} CPUs, {platform.processor() or '?'}, "
        f"numpy {np.__version__}\n{format_table(rows)}\n"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
