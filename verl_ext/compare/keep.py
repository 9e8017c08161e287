"""``python -m verl_ext.compare.keep RUN_DIR [...] --into results/cpu_compare``: keep a finished run's metrics.

A comparison of many runs on 2 cores spans days; its evidence must outlive the run folders (checkpoints, logs,
wandb files: hundreds of MB). This copies the metrics a comparison reads — validation, rollout cost, feedback,
pool, selection, diagnostics, gradient norm, timing — into ``<into>/<run name>/metrics.jsonl.gz`` (about 1/40 of
the file: trimmed to about 1/10, then gzipped, byte-identical when re-kept) with a ``run.json`` saying where it
came from (source folder, git commit, date), so that
``python -m verl_ext.compare <into>/*/ --out ...`` regenerates the table from the repository alone.
"""

from __future__ import annotations

import argparse
import gzip
import json
import logging
import subprocess
import sys
import time
from pathlib import Path

from verl_ext.compare.runs import file_logger_files

logger = logging.getLogger("verl_ext.compare.keep")

KEPT_PREFIXES = ("val-core/", "val-aux/", "rollout/", "feedback/", "pool/", "select/", "diag/", "hive/", "update/",
                 "augment/", "lineage/", "reward/", "training/global_step", "actor/grad_norm", "actor/entropy",
                 "actor/lr", "critic/score/mean", "response_length/mean", "timing_s/step",
                 "training/filter_groups/")


def trim_line(line: str) -> str | None:
    """One file-logger line ({"step": n, "data": {...}}) with only the kept metrics; None for a torn line."""
    try:
        row = json.loads(line)
    except json.JSONDecodeError:
        return None
    data = row.get("data", {})
    kept = {k: v for k, v in data.items() if k.startswith(KEPT_PREFIXES)}
    return json.dumps({"step": row.get("step"), "data": kept}, sort_keys=True)


def _git_commit(path: Path) -> str | None:
    try:
        out = subprocess.run(["git", "-C", str(path), "rev-parse", "HEAD"], capture_output=True, text=True,
                             timeout=10, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


def keep_run(run_dir: Path, into: Path) -> Path:
    """Copy ``run_dir/metrics.jsonl`` (and a resumed run's earlier ``metrics.attempt-<k>.jsonl``) trimmed and
    gzipped to ``into/<run_dir name>/<name>.gz``; returns the new folder. Files the source no longer has (and the
    uncompressed copies older versions kept) are removed, so a re-kept run is exactly its source."""
    source = run_dir / "metrics.jsonl"
    if not source.is_file():
        raise FileNotFoundError(f"{source}: no metrics file (is {run_dir} a launcher's run folder?)")
    dest = into / run_dir.name
    dest.mkdir(parents=True, exist_ok=True)
    files = sorted(run_dir.glob("metrics.attempt-*.jsonl")) + [source]
    counts = {}
    for src in files:
        lines = [t for t in map(trim_line, src.read_text(encoding="utf-8").splitlines()) if t is not None]
        name = src.name + ".gz"
        tmp = dest / (name + ".tmp")
        # mtime 0 and no file name in the header: the same lines give the same bytes (a re-keep is no git change)
        tmp.write_bytes(gzip.compress(("\n".join(lines) + "\n").encode("utf-8"), compresslevel=9, mtime=0))
        tmp.replace(dest / name)
        counts[name] = len(lines)
    for stale in file_logger_files(dest):  # what the comparison would read besides the files just written
        if stale.name not in counts:
            stale.unlink()
    meta = {"source": str(run_dir.resolve()), "lines": sum(counts.values()), "files": counts,
            "kept_prefixes": list(KEPT_PREFIXES), "git_commit": _git_commit(Path(__file__).resolve().parent),
            "kept_at": time.strftime("%Y-%m-%d %H:%M:%S")}
    (dest / "run.json").write_text(json.dumps(meta, indent=1) + "\n", encoding="utf-8")
    logger.info("kept %s -> %s (%d lines in %d files)", run_dir, dest, meta["lines"], len(files))
    return dest


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    p = argparse.ArgumentParser(prog="python -m verl_ext.compare.keep", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("runs", nargs="+", help="run folders holding metrics.jsonl (e.g. outputs/cpu_compare/grpo_s0)")
    p.add_argument("--into", required=True, help="folder of kept runs, e.g. results/cpu_compare")
    args = p.parse_args(argv)
    for run in args.runs:
        keep_run(Path(run), Path(args.into))
    return 0


if __name__ == "__main__":
    sys.exit(main())
