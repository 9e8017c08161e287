"""``python -m verl_ext.evaluation {score,generate,curve,table,levels}``: avg@k / pass@k per benchmark, JSON + markdown.

    # score a generations file (schema: verl_ext/evaluation/generations.py, docs/evaluation.md)
    python -m verl_ext.evaluation score --generations gens.jsonl --data ~/data/eval/*.parquet --out eval/grpo
    # generate with a checkpoint (vLLM on GPU, transformers on CPU), then score
    python -m verl_ext.evaluation generate --model checkpoints/p/grpo --data ~/data/eval/*.parquet --out eval/grpo
    # every checkpoint of training runs (and the initial model as step 0): their curve as runs verl_ext.compare reads
    python -m verl_ext.evaluation curve outputs/cpu_compare/grpo_s0 --initial-model .assets/learn/model \
        --data .assets/learn/data/val.parquet --n 16 --temperature 1 --top-p 1 --out eval/curves
    # several runs side by side (rows = runs, columns = benchmarks + Avg)
    python -m verl_ext.evaluation table eval/*/result.json --out eval/table.md
    # accuracy per group of problems (extra_info.level), runs named <method>_s<seed> paired by seed
    python -m verl_ext.evaluation levels eval/*/ --data val.parquet --field level --baseline grpo

Each run folder gets ``result.json`` (per-benchmark and overall numbers), ``table.md``, ``scored.jsonl``
(per-problem correctness and extracted answers) and, for ``generate``, ``generations.jsonl``.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path
from typing import Any

from verl_ext.evaluation import generations as gens
from verl_ext.evaluation import levels, report
from verl_ext.evaluation.metrics import score_all
from verl_ext.evaluation.scoring import FORMATS, count_flags, score_problems

logger = logging.getLogger("verl_ext.evaluation")


def default_ks(n: int) -> list[int]:
    """1, 2, 4, ... up to n, and n itself."""
    ks, k = [], 1
    while k <= n:
        ks.append(k)
        k *= 2
    return sorted(set(ks) | {n})


def parse_ks(text: str | None, n_min: int) -> list[int]:
    if not text:
        return default_ks(n_min)
    try:
        ks = sorted({int(x) for x in text.split(",") if x.strip()})
    except ValueError as err:
        raise SystemExit(f"--pass-k {text!r}: expected comma-separated integers") from err
    if not ks or ks[0] < 1:
        raise SystemExit(f"--pass-k {text!r}: every k must be >= 1")
    return ks


def score_and_write(problems: list[gens.Problem], args: argparse.Namespace, meta: dict[str, Any],
                    out: Path | None = None, run: str | None = None) -> dict:
    """Score, compute the metrics, write scored.jsonl / result.json / table.md under ``out`` (default ``args.out``);
    the run's name is ``run``, else ``args.run``, else the folder's name."""
    out = out or Path(args.out).expanduser()
    run = run or args.run
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    results, records = score_problems(problems, fmt=args.format, workers=args.workers, k=args.k)
    n_min = min(r.n for r in results)
    metrics = score_all(results, parse_ks(args.pass_k, n_min))
    with open(out / "scored.jsonl", "w", encoding="utf-8") as f:
        for rec in records:
            f.write(json.dumps(rec, ensure_ascii=False) + "\n")
    flags = count_flags(records)
    if any(flags.values()):
        logger.warning("the scorer flagged %s responses (scored as wrong)", flags)
    result = {"schema_version": report.SCHEMA_VERSION, "run": run or out.name, "format": args.format,
              **meta, **metrics, "scorer_flags": flags, "scoring_seconds": round(time.monotonic() - t0, 3)}
    report.write_json(result, out / "result.json")
    table = report.markdown_table([result])
    (out / "table.md").write_text(table, encoding="utf-8")
    sys.stdout.write(table)
    return result


def cmd_score(args: argparse.Namespace) -> int:
    problems = gens.read_generations(args.generations)
    data = gens.load_eval_data(args.data) if args.data else None
    gens.attach_ground_truth(problems, data)
    logger.info("%d problems, %d responses from %s", len(problems), sum(len(p.responses) for p in problems),
                ", ".join(args.generations))
    score_and_write(problems, args, {"generations": [str(Path(g).resolve()) for g in args.generations]})
    return 0


def limit_per_source(problems: list[gens.Problem], limit: int | None) -> list[gens.Problem]:
    if limit is None:
        return problems
    seen: dict[str, int] = {}
    out = []
    for p in problems:
        if seen.get(p.data_source, 0) < limit:
            seen[p.data_source] = seen.get(p.data_source, 0) + 1
            out.append(p)
    return out


def generate_and_score(args: argparse.Namespace, model_spec: str, out: Path, run: str | None = None) -> dict:
    """Generate with ``model_spec`` (model or verl checkpoint) as ``args`` says, score into ``out``; the result."""
    from verl_ext.evaluation.checkpoint import resolve_model
    from verl_ext.evaluation.generate import choose_backend, generate_responses, make_generator

    out.mkdir(parents=True, exist_ok=True)
    cfg = sampling_config(args)
    problems = limit_per_source(gens.load_eval_data(args.data), args.limit)
    model = resolve_model(model_spec, args.merge_dir or out / "merged_model")
    backend = choose_backend(args.backend)
    backend_kwargs = {"trust_remote_code": args.trust_remote_code}
    if backend == "hf":
        backend_kwargs.update(batch_size=args.batch_size, device=args.device, num_threads=args.threads)
    else:
        max_model_len = args.max_model_len or _context_needed(model, problems, cfg, args.trust_remote_code)
        logger.info("vllm max_model_len: %d", max_model_len)
        backend_kwargs.update(tensor_parallel_size=args.tp, gpu_memory_utilization=args.gpu_memory_utilization,
                              max_model_len=max_model_len, seed=args.seed)
    generator, tokenizer = make_generator(backend, model, **backend_kwargs)
    t0 = time.monotonic()
    generate_responses(problems, generator, tokenizer, cfg)
    gen_s = time.monotonic() - t0
    gens.write_generations(problems, out / "generations.jsonl")
    meta = {"model": model_spec, "resolved_model": model, "backend": backend, "sampling": cfg.as_dict(),
            "data": [str(Path(d).resolve()) for d in args.data], "generation_seconds": round(gen_s, 3),
            "generations": [str((out / "generations.jsonl").resolve())]}
    return score_and_write(problems, args, meta, out, run)


def sampling_config(args: argparse.Namespace):
    from verl_ext.evaluation.sampling import SamplingConfig

    return SamplingConfig(n=args.n, temperature=args.temperature, top_p=args.top_p, top_k=args.top_k,
                          max_new_tokens=args.max_new_tokens, seed=args.seed,
                          chat_template_kwargs=json.loads(args.chat_template_kwargs))


def cmd_generate(args: argparse.Namespace) -> int:
    generate_and_score(args, args.model, Path(args.out).expanduser(), args.run)
    return 0


def cmd_curve(args: argparse.Namespace) -> int:
    from verl_ext.compare.keep import keep_run
    from verl_ext.evaluation.curve import write_curve_run

    if args.merge_dir:
        raise SystemExit("curve: --merge-dir is per checkpoint here (each step merges into its own folder)")
    sampling = sampling_config(args).as_dict()
    suffix = args.suffix if args.suffix is not None else f"_avg{args.n}" + ("" if args.temperature > 0 else "_greedy")
    out = Path(args.out).expanduser()
    for run in args.runs:
        folder = write_curve_run(Path(run).expanduser(), out, suffix, args.initial_model, sampling,
                                 lambda model, where: generate_and_score(args, model, where, where.parent.name))
        if args.keep_into:
            keep_run(folder, Path(args.keep_into).expanduser())
    return 0


def _context_needed(model: str, problems: list[gens.Problem], cfg: Any, trust_remote_code: bool) -> int:
    """Longest rendered prompt + max_new_tokens, read with the model's own tokenizer (before vLLM starts)."""
    from transformers import AutoConfig, AutoTokenizer

    from verl_ext.evaluation.generate import context_needed

    tokenizer = AutoTokenizer.from_pretrained(model, trust_remote_code=trust_remote_code)
    hf_config = AutoConfig.from_pretrained(model, trust_remote_code=trust_remote_code)
    limit = getattr(hf_config, "max_position_embeddings", None)
    return context_needed(tokenizer, problems, cfg, limit)


def cmd_table(args: argparse.Namespace) -> int:
    results = [report.read_result(p) for p in args.results]
    table = report.markdown_table(results, args.metric)
    if args.out:
        Path(args.out).expanduser().write_text(table, encoding="utf-8")
    sys.stdout.write(table)
    return 0


def cmd_levels(args: argparse.Namespace) -> int:
    groups = levels.group_of(gens.load_eval_data(args.data), args.field)
    runs = [levels.read_run(folder, groups) for folder in args.runs]
    text = levels.tables(runs, args.baseline)
    if args.out:
        Path(args.out).expanduser().write_text(text, encoding="utf-8")
    sys.stdout.write(text)
    return 0


def _add_scoring(p: argparse.ArgumentParser,
                 out_help: str = "run folder for result.json, table.md, scored.jsonl") -> None:
    p.add_argument("--out", required=True, help=out_help)
    p.add_argument("--run", default=None, help="the run's name in tables (default: the --out folder's name)")
    p.add_argument("--format", choices=FORMATS, default="auto",
                   help="answer extraction: auto (\\boxed{} then an 'Answer:' line), boxed, or dapo")
    p.add_argument("--k", type=int, default=None, help="score only the first k responses of each problem")
    p.add_argument("--pass-k", default=None, help="comma-separated k for pass@k (default 1,2,4,...,n)")
    p.add_argument("--workers", type=int, default=1, help="scoring processes")


def _add_generation(g: argparse.ArgumentParser) -> None:
    g.add_argument("--data", nargs="+", required=True, help="evaluation parquet(s) (examples/data_preprocess)")
    g.add_argument("--backend", choices=("auto", "vllm", "hf"), default="auto")
    g.add_argument("--n", type=int, default=16, help="samples per problem (avg@n)")
    g.add_argument("--temperature", type=float, default=0.7)
    g.add_argument("--top-p", type=float, default=0.7)
    g.add_argument("--top-k", type=int, default=-1)
    g.add_argument("--max-new-tokens", type=int, default=20480, help="clipped to the model's context by hf")
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("--limit", type=int, default=None, help="first N problems of each benchmark (smoke runs)")
    g.add_argument("--chat-template-kwargs", default="{}", help='JSON, e.g. \'{"enable_thinking": false}\'')
    g.add_argument("--merge-dir", default=None, help="where FSDP shards are merged (default OUT/merged_model)")
    g.add_argument("--trust-remote-code", action="store_true")
    g.add_argument("--batch-size", type=int, default=32, help="hf: prompts per generate call (x n sequences)")
    g.add_argument("--device", default=None, help="hf: cpu / cuda (default: cuda when available)")
    g.add_argument("--threads", type=int, default=None, help="hf: torch CPU threads")
    g.add_argument("--tp", type=int, default=1, help="vllm: tensor-parallel size")
    g.add_argument("--gpu-memory-utilization", type=float, default=0.85, help="vllm")
    g.add_argument("--max-model-len", type=int, default=None,
                   help="vllm (default: longest prompt + --max-new-tokens, capped at the model's context)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m verl_ext.evaluation", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    s = sub.add_parser("score", help="score a generations file")
    s.add_argument("--generations", nargs="+", required=True, help="JSON-lines generations file(s)")
    s.add_argument("--data", nargs="*", default=None, help="evaluation parquet(s) with the ground truths")
    _add_scoring(s)
    s.set_defaults(func=cmd_score)
    g = sub.add_parser("generate", help="generate with a model or verl checkpoint, then score")
    g.add_argument("--model", required=True, help="HF dir / hub id, or verl checkpoint (root, global_step_N, actor)")
    _add_generation(g)
    _add_scoring(g)
    g.set_defaults(func=cmd_generate)
    c = sub.add_parser("curve", help="evaluate every checkpoint of training runs: their curve as a run to compare")
    c.add_argument("runs", nargs="+", help="launcher run folders (metrics.jsonl + ckpt/global_step_N)")
    c.add_argument("--initial-model", default=None,
                   help="the model the runs started from, evaluated as step 0 (e.g. .assets/learn/model)")
    c.add_argument("--suffix", default=None,
                   help="put before a run name's _s<seed> (default _avg<n>, or _avg<n>_greedy at temperature 0)")
    c.add_argument("--keep-into", default=None, help="also keep each curve run here (python -m verl_ext.compare.keep)")
    _add_generation(c)
    _add_scoring(c, "folder of curve runs: <out>/<run name + suffix>/{metrics.jsonl, curve.json, step_<N>/}")
    c.set_defaults(func=cmd_curve)
    t = sub.add_parser("table", help="put several result.json side by side")
    t.add_argument("results", nargs="+", help="result.json files (one row each, in this order)")
    t.add_argument("--metric", default="avg", help="avg (avg@n) or pass@K")
    t.add_argument("--out", default=None, help="also write the table here")
    t.set_defaults(func=cmd_table)
    lv = sub.add_parser("levels", help="accuracy per group of problems (an extra_info field), paired by seed")
    lv.add_argument("runs", nargs="+", help="run folders with scored.jsonl (named <method>_s<seed> to pair)")
    lv.add_argument("--data", nargs="+", required=True, help="the evaluation parquet(s) the runs scored")
    lv.add_argument("--field", default="level", help="the extra_info field to group by")
    lv.add_argument("--baseline", default=None, help="method the others are paired against, by seed")
    lv.add_argument("--out", default=None, help="also write the tables here")
    lv.set_defaults(func=cmd_levels)
    return parser


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    args = build_parser().parse_args(argv)
    if getattr(args, "k", None) is not None and args.k < 1:
        raise SystemExit("--k must be >= 1")
    return int(args.func(args))
