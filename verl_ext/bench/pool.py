"""Benchmark of ``QueryPool`` at training-step granularity: ``python -m verl_ext.bench.pool``.

For each pool size N the pool is filled with N scored DAPO-sized records (a one-message chat prompt of ~500
characters, answer, data source), then each timed step does what the trainer does with the pool:
``sample(batch)`` (boundary sampling), ``feedback`` for the whole batch (estimator update + archive, archive
eviction), ``add_child`` for ``batch`` new children (each one evicting the hardest record, the pool being full),
and ``reinsert``. Reported: median / p95 / max milliseconds per step, the split by phase, and resident memory per
record (RSS growth while loading, divided by N). Each size runs in a fresh interpreter so the RSS figures do not
include memory kept by an earlier, larger run. Synthetic outcomes come from a seeded generator; children's
prompts are built before the clock starts.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
import time
from typing import Any

import numpy as np
from tabulate import tabulate

from verl_ext.pool import PoolConfig, QueryPool
from verl_ext.selection.frontier import draw_batch

PROMPT_CHARS = 500
_FILLER = ("Let $x$ and $y$ be positive integers such that the sum of their squares is a prime number. "
           "Find the number of ordered pairs satisfying the constraints given below, and justify. ") * 4


def _prompt(i: int) -> list[dict[str, str]]:
    tag = f" [problem {i}]"
    return [{"role": "user", "content": _FILLER[: PROMPT_CHARS - len(tag)] + tag}]


def rss_bytes() -> int:
    """Resident set size of this process (Linux ``/proc/self/statm``)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def run_size(n: int, batch: int, steps: int, warmup: int = 3, seed: int = 0,
             boundary: str = "target") -> dict[str, Any]:
    """Fill a pool of capacity ``n`` and time ``steps`` training steps; returns the figures as a dict."""
    rng = np.random.default_rng(seed)
    gc.collect()
    rss0 = rss_bytes()
    pool = QueryPool(PoolConfig(max_pool_size=n, archive_capacity=n, boundary=boundary), seed=seed)
    t0 = time.perf_counter()
    prompts = [_prompt(i) for i in range(n)]
    answers = [str(i % 1000) for i in range(n)]
    priors = rng.uniform(0.0, 1.0, size=n).tolist()
    pool.add_seeds_bulk(prompts, answers, "math_dapo", priors=priors)
    load_s = time.perf_counter() - t0
    del prompts, answers, priors
    gc.collect()
    rss_loaded = rss_bytes()
    phases: dict[str, list[float]] = {"select": [], "feedback": [], "children": [], "reinsert": []}
    totals: list[float] = []
    cpu: list[float] = []  # process CPU time: robust to other jobs competing for the cores
    next_prompt = n
    for step in range(warmup + steps):
        child_prompts = [_prompt(next_prompt + j) for j in range(batch)]
        next_prompt += batch
        difficulty = rng.uniform(0.75, 1.33, size=batch).tolist()
        c_a = time.process_time()
        t_a = time.perf_counter()
        ids = draw_batch(pool, batch, step)
        t_b = time.perf_counter()
        c_b = time.process_time()
        true_p = np.array([pool.ranking_value(i) for i in ids])
        passes = rng.binomial(16, true_p).tolist()
        c_c = time.process_time()
        t_c = time.perf_counter()
        pool.feedback({rid: (p, 16) for rid, p in zip(ids, passes)}, step)
        t_d = time.perf_counter()
        for rid, prompt, d in zip(ids, child_prompts, difficulty):
            if rid in pool:
                pool.add_child(prompt, "42", "math_dapo", rid, d, step)
        t_e = time.perf_counter()
        pool.reinsert(step, batch)
        t_f = time.perf_counter()
        c_f = time.process_time()
        if step >= warmup:
            cpu.append((c_b - c_a + c_f - c_c) * 1e3)  # the synthetic outcome draw is not pool work
            parts = {"select": t_b - t_a, "feedback": t_d - t_c, "children": t_e - t_d, "reinsert": t_f - t_e}
            for name, seconds in parts.items():
                phases[name].append(seconds * 1e3)
            totals.append(sum(parts.values()) * 1e3)
    total = np.array(totals)
    return {
        "n": n, "batch": batch, "steps": steps, "load_s": load_s,
        "bytes_per_record": (rss_loaded - rss0) / n, "rss_mb": rss_bytes() / 2**20,
        "median_ms": float(np.median(total)), "p95_ms": float(np.percentile(total, 95)), "max_ms": float(total.max()),
        "cpu_median_ms": float(np.median(cpu)),
        **{f"{name}_ms": float(np.median(v)) for name, v in phases.items()},
        "metrics": {k: v for k, v in pool.metrics().items() if k.startswith("pool/evicted") or "size" in k},
    }


def _run_isolated(n: int, args: argparse.Namespace) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "verl_ext.bench.pool", "--sizes", str(n), "--batch", str(args.batch),
           "--steps", str(args.steps), "--boundary", args.boundary, "--json"]
    done = subprocess.run(cmd, check=True, capture_output=True, text=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def format_table(rows: list[dict[str, Any]]) -> str:
    head = ["pool size", "load (s)", "step median (ms)", "p95 (ms)", "max (ms)", "CPU median (ms)", "select",
            "feedback", "children+evict", "reinsert", "bytes/record", "RSS (MB)"]
    cells = [[f"{r['n']:,}", f"{r['load_s']:.1f}", f"{r['median_ms']:.1f}", f"{r['p95_ms']:.1f}", f"{r['max_ms']:.1f}",
              f"{r['cpu_median_ms']:.1f}", f"{r['select_ms']:.1f}", f"{r['feedback_ms']:.1f}",
              f"{r['children_ms']:.1f}", f"{r['reinsert_ms']:.2f}", f"{r['bytes_per_record']:,.0f}",
              f"{r['rss_mb']:,.0f}"] for r in rows]
    return tabulate(cells, headers=head, tablefmt="pipe", disable_numparse=True, colalign=("right",) * len(head))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10000,100000,1000000", help="comma-separated pool sizes")
    parser.add_argument("--batch", type=int, default=512, help="prompts per training step")
    parser.add_argument("--steps", type=int, default=100, help="timed steps per size (after 3 warm-up steps)")
    parser.add_argument("--quick", action="store_true", help="sizes 10^4,10^5 and 20 steps (seconds)")
    parser.add_argument("--json", action="store_true", help="one JSON line per size, run in this process")
    parser.add_argument("--boundary", default="target", choices=("target", "median", "signal"),
                        help="the frontier draw timed (heapa_grpo and heapa_dapo draw by 'signal')")
    args = parser.parse_args(argv)
    if args.quick:
        args.sizes, args.steps = "10000,100000", 20
    sizes = [int(s) for s in args.sizes.split(",") if s]
    if args.json:
        for n in sizes:
            sys.stdout.write(json.dumps(run_size(n, args.batch, args.steps, boundary=args.boundary)) + "\n")
        return 0
    rows = [_run_isolated(n, args) for n in sizes]
    sys.stdout.write(f"QueryPool benchmark: batch {args.batch}, {args.steps} steps, {os.cpu_count()} CPUs, "
                     f"Python {sys.version.split()[0]}\n")
    sys.stdout.write(format_table(rows) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
