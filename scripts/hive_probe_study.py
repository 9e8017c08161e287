#!/usr/bin/env python
"""HIVE's probe variants measured: which ``heapa.hive.tail_tokens`` tracks the policy's uncertainty about the answer.

    .venv/bin/python scripts/hive_probe_study.py [--model .assets/tiny/model] [--data .assets/tiny/data/train.parquet]
        [--prompts 200] [--samples 16] [--tails 0 1 2 4 8 16] [--json out.json]

Prints the markdown table that docs/hive.md quotes (recipe/heapa/hive_probe_study.py explains the measurement).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from recipe.heapa.hive_probe_study import DEFAULT_TAILS, format_table, study  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=".assets/tiny/model")
    ap.add_argument("--data", default=".assets/tiny/data/train.parquet")
    ap.add_argument("--prompts", type=int, default=200)
    ap.add_argument("--samples", type=int, default=16)
    ap.add_argument("--max-new-tokens", type=int, default=16)
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--tails", type=int, nargs="+", default=list(DEFAULT_TAILS))
    ap.add_argument("--prune-quantile", type=float, default=0.1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", type=Path, default=None, help="also write the per-prompt values here")
    args = ap.parse_args(argv)
    result = study(args.model, args.data, n_prompts=args.prompts, samples=args.samples,
                   max_new_tokens=args.max_new_tokens, temperature=args.temperature, tails=args.tails,
                   prune_quantile=args.prune_quantile, seed=args.seed)
    print(format_table(result))
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
