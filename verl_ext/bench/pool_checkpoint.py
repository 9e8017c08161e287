"""Checkpoint benchmark of a full pool: ``python -m verl_ext.bench.pool_checkpoint``.

For each size N a pool of N DAPO-sized records (the ``verl_ext.bench.pool`` records) runs 20 training steps, then
is saved and loaded the way the recipe does it: ``pool_state.pkl`` beside ``data.pt`` (``adapters/pool_file.py``).
With ``--torch`` the alternative is timed too: the pool inline in ``torch.save`` (inside ``data.pt``).
Reported: wall and CPU seconds of save and load, file size, and the RSS growth while saving (the peak cost of a
checkpoint on top of the pool itself). Each size runs in a fresh interpreter.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from typing import Any

import numpy as np
from tabulate import tabulate

from verl_ext.adapters.pool_file import read_pool_file, write_pool_file
from verl_ext.bench.pool import _prompt, rss_bytes
from verl_ext.pool import PoolConfig, QueryPool
from verl_ext.selection.frontier import draw_batch


def _peak_rss_bytes() -> int:
    """High-water RSS of this process (VmHWM), reset before each measured phase."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return rss_bytes()


def _reset_peak() -> None:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:  # not permitted: the peak then covers the whole run
        pass


def _timed(fn):
    _reset_peak()
    base = rss_bytes()
    c0, t0 = time.process_time(), time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0, time.process_time() - c0, (_peak_rss_bytes() - base) / 2**20


def run_size(n: int, with_torch: bool) -> dict[str, Any]:
    rng = np.random.default_rng(0)
    pool = QueryPool(PoolConfig(max_pool_size=n), seed=0)
    pool.add_seeds_bulk([_prompt(i) for i in range(n)], [str(i) for i in range(n)], "math_dapo",
                        priors=rng.uniform(size=n).tolist())
    for step in range(20):
        ids = draw_batch(pool, 512, step)
        pool.feedback({i: (int(rng.integers(0, 17)), 16) for i in ids}, step)
        pool.reinsert(step, 512)
    row: dict[str, Any] = {"n": n, "pool_rss_mb": rss_bytes() / 2**20}
    with tempfile.TemporaryDirectory() as folder:
        ref, row["save_s"], row["save_cpu_s"], row["save_peak_mb"] = _timed(
            lambda: write_pool_file(folder, pool.state_dict()))
        row["file_mb"] = os.path.getsize(os.path.join(folder, ref["file"])) / 2**20

        def load():
            restored = QueryPool(PoolConfig(max_pool_size=n))
            restored.load_state_dict(read_pool_file(ref, folder))
            return restored
        restored, row["load_s"], row["load_cpu_s"], _ = _timed(load)
        assert draw_batch(restored, 8, 99) == draw_batch(pool, 8, 99), "a restored pool must draw the same batch"
        del restored
        if with_torch:
            import torch  # the inline alternative only: the pool itself never needs torch

            path = os.path.join(folder, "data.pt")
            _, row["torch_save_s"], _, row["torch_save_peak_mb"] = _timed(
                lambda: torch.save({"dataset": {"pool": pool.state_dict()}}, path))
            _, row["torch_load_s"], _, _ = _timed(lambda: torch.load(path, weights_only=False))
    return row


def format_table(rows: list[dict[str, Any]]) -> str:
    head = ["pool size", "save (s)", "save CPU (s)", "RSS growth while saving (MB)", "load (s)", "load CPU (s)",
            "file (MB)", "torch.save inline (s)", "torch.load (s)"]
    cells = []
    for r in rows:
        old = [f"{r['torch_save_s']:.1f}", f"{r['torch_load_s']:.1f}"] if "torch_save_s" in r else ["-", "-"]
        cells.append([f"{r['n']:,}", f"{r['save_s']:.1f}", f"{r['save_cpu_s']:.1f}", f"{r['save_peak_mb']:,.0f}",
                      f"{r['load_s']:.1f}", f"{r['load_cpu_s']:.1f}", f"{r['file_mb']:,.0f}", *old])
    return tabulate(cells, headers=head, tablefmt="pipe", disable_numparse=True, colalign=("right",) * len(head))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="100000,1000000")
    ap.add_argument("--torch", action="store_true", help="also time the pool inline in torch.save/torch.load")
    ap.add_argument("--json", action="store_true", help="one JSON line per size, in this process")
    args = ap.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",") if s]
    if args.json:
        for n in sizes:
            sys.stdout.write(json.dumps(run_size(n, args.torch)) + "\n")
        return 0
    rows = []
    for n in sizes:
        cmd = [sys.executable, "-m", "verl_ext.bench.pool_checkpoint", "--sizes", str(n), "--json"]
        cmd += ["--torch"] if args.torch else []
        done = subprocess.run(cmd, check=True, capture_output=True, text=True)
        rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
    sys.stdout.write(f"pool checkpoint benchmark, {os.cpu_count()} CPUs\n{format_table(rows)}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
