"""``python -m verl_ext.gpu_plan``: peak GPU memory per GPU of a launcher's run, by phase, with a verdict.

    FORCE_GPU=1 DRY_RUN=1 bash scripts/run_heapa_dapo_qwen.sh > args.txt
    python -m verl_ext.gpu_plan --overrides args.txt --model-config ~/models/Qwen3-4B/config.json --gpu-gb 80 40
    FORCE_GPU=1 DRY_RUN=1 bash scripts/run_grpo_qwen.sh | python -m verl_ext.gpu_plan --model-config qwen3-4b

``--model-config``: a config.json, a model folder, a hub name in the local Hugging Face cache, or a built-in shape
(``qwen3-4b``: Qwen3-4B-Instruct-2507). No network. Formulas and assumptions: ``verl_ext.gpu_plan.estimate``.
Exit code 0, or 1 when the peak is over for any ``--gpu-gb`` given with ``--check``.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from verl_ext.gpu_plan import estimate, run_config
from verl_ext.gpu_plan.shape import ModelShape, resolve_config

logger = logging.getLogger("verl_ext.gpu_plan")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m verl_ext.gpu_plan", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    src = p.add_mutually_exclusive_group()
    src.add_argument("--overrides", default="-", help="file of Hydra overrides, one per line (DRY_RUN output); "
                                                      "'-' = stdin (default)")
    src.add_argument("--config", default=None, help="a composed config saved as YAML (a run's .hydra/config.yaml)")
    p.add_argument("--model-config", required=True, help="config.json, model folder, cached hub name or qwen3-4b")
    p.add_argument("--gpu-gb", type=float, nargs="+", default=[80.0], help="GPU memory in GiB (several: one table "
                                                                           "each)")
    p.add_argument("--short-row-tokens", type=int, default=1024,
                   help="padded micro-batches: length of the short rows that fill the token budget beside the "
                        "longest row (worst case assumed; default 1024)")
    p.add_argument("--check", action="store_true", help="exit 1 when a phase is over the GPU's memory")
    return p


def table(model: ModelShape, source: str, run: run_config.RunShape, gpu_gb: float, short_row: int) -> tuple[str, bool]:
    gib = estimate.GIB
    phases = estimate.plan(model, run, gpu_gb * gib, short_row)
    lines = [f"## GPU memory plan: {run.method} on {run.n_gpus} x {gpu_gb:g} GiB, {model.name} "
             f"({model.param_count() / 1e9:.2f}B params, {source})",
             f"attention {run.attn}, {'packed' if run.packed else 'padded'} (use_remove_padding={run.packed}), "
             f"gradient checkpointing {run.grad_checkpointing}, update {run.update_tokens:,} tokens/GPU, "
             f"vLLM u={run.gpu_memory_utilization:g} max_model_len={run.max_model_len:,}",
             "", "| phase | peak GiB | verdict | largest parts (GiB) | note |", "|---|---:|---|---|---|"]
    for ph in phases:
        parts = sorted(((k, v) for k, v in ph.parts.items() if v > 0), key=lambda kv: -kv[1])[:4]
        shown = ", ".join(f"{k} {v / gib:.1f}" for k, v in parts)
        lines.append(f"| {ph.name} | {ph.total / gib:.1f} | {ph.verdict(gpu_gb * gib)} | {shown} | {ph.note} |")
    top = estimate.peak(phases)
    verdict = top.verdict(gpu_gb * gib)
    lines += ["", f"peak {top.total / gib:.1f} GiB ({top.name}): {verdict} on {gpu_gb:g} GiB", ""]
    return "\n".join(lines) + "\n", verdict != "over"


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    args = build_parser().parse_args(argv)
    try:
        config, source = resolve_config(args.model_config)
    except FileNotFoundError as err:
        logger.error("%s", err)
        return 2
    model = ModelShape.from_config(config, name=Path(args.model_config).name or args.model_config)
    if args.config:
        run = run_config.load(yaml_path=args.config)
    else:
        text = sys.stdin.read() if args.overrides == "-" else Path(args.overrides).read_text(encoding="utf-8")
        run = run_config.load(overrides_text=text)
    ok = True
    for gb in args.gpu_gb:
        out, fits = table(model, source, run, gb, args.short_row_tokens)
        sys.stdout.write(out)
        ok = ok and fits
    return 0 if ok or not args.check else 1
