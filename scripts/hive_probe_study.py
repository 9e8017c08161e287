#!/usr/bin/env python
"""Which prompt positions should HIVE's probe average over? A measurement, on a causal LM (the tiny CPU model).

HIVE's online verification (``stages/hive_verify.py``) reads the actor's next-token entropy at each prompt position and
averages it over the last ``heapa.hive.tail_tokens`` positions (0 = all). The probe is meant to measure how
uncertain the policy is about the *answer*; averaged over the whole prompt it mostly measures how surprising the
prompt text (and the chat template) is. This study measures, per variant, how well the probe's number tracks
what it stands in for. For each of ``n_prompts`` training prompts:

- one forward of the prompt rendered as the agent loop renders it (chat template, generation prompt), the
  per-position entropy at the rollout temperature -> one value per ``tail_tokens`` variant (the probe's own
  ``mean_prompt_entropy``);
- ``samples`` sampled responses (same temperature, no top-k/top-p) -> the pass rate ``p`` (the boxed answer equals
  the ground truth), ``p(1-p)`` (GRPO's signal: 0 when every response agrees) and the mean response-token entropy.

It reports the Spearman correlation of each variant with ``p``, ``p(1-p)`` and the response entropy, the mean
probe value, and what HIVE's ``prune_quantile`` rule would prune: the share of zero-signal prompts (every sampled
response right, or every one wrong) among the lowest ``prune_quantile`` of the variant's values, next to the
share over all prompts (a probe that helps pruning scores above that base rate).

    .venv/bin/python scripts/hive_probe_study.py [--model .assets/tiny/model] [--data .assets/tiny/data/train.parquet]
        [--prompts 200] [--samples 16] [--tails 0 1 2 4 8 16] [--json out.json]

Prints the markdown table that docs/hive.md quotes.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from recipe.heapa.stages.hive_verify import mean_prompt_entropy  # noqa: E402
from verl.utils.tokenizer import normalize_token_ids  # noqa: E402
from verl_ext.tasks.arithmetic import answer_from_response  # noqa: E402

DEFAULT_TAILS = (0, 1, 2, 4, 8, 16)


def spearman(a: Sequence[float], b: Sequence[float]) -> float:
    """Spearman's rank correlation (average ranks for ties); NaN when either side is constant."""
    ra, rb = _ranks(np.asarray(a, dtype=np.float64)), _ranks(np.asarray(b, dtype=np.float64))
    if ra.std() == 0 or rb.std() == 0:
        return math.nan
    return float(np.corrcoef(ra, rb)[0, 1])


def _ranks(x: np.ndarray) -> np.ndarray:
    order = np.argsort(x, kind="stable")
    ranks = np.empty(len(x))
    ranks[order] = np.arange(len(x), dtype=np.float64)
    for value in np.unique(x):  # ties share their average rank
        tied = x == value
        if tied.sum() > 1:
            ranks[tied] = ranks[tied].mean()
    return ranks


def token_entropy(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """Entropy (nats) of softmax(logits / temperature) along the last axis."""
    logp = torch.log_softmax(logits.float() / temperature, dim=-1)
    return -(logp.exp() * logp).sum(-1)


def _rows(data_file: Path, n_prompts: int, seed: int) -> list[dict[str, Any]]:
    import pandas as pd

    frame = pd.read_parquet(data_file)
    picks = random.Random(seed).sample(range(len(frame)), min(n_prompts, len(frame)))
    return [frame.iloc[i].to_dict() for i in picks]


@torch.no_grad()
def study(model_dir: str | Path, data_file: str | Path, *, n_prompts: int = 200, samples: int = 16,
          max_new_tokens: int = 16, temperature: float = 1.0, tails: Sequence[int] = DEFAULT_TAILS,
          prune_quantile: float = 0.1, seed: int = 0) -> dict[str, Any]:
    """Run the measurement (see the module docstring); returns per-prompt values and the correlation table."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32).eval()
    torch.manual_seed(seed)
    eos = tokenizer.eos_token_id
    probe: dict[int, list[float]] = {t: [] for t in tails}
    pass_rate, resp_entropy, prompt_len = [], [], []
    for row in _rows(Path(data_file), n_prompts, seed):
        messages = [dict(m) for m in row["prompt"]]
        ids = normalize_token_ids(tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True))
        x = torch.tensor([ids], dtype=torch.int64)
        ent = token_entropy(model(input_ids=x).logits[0], temperature)
        for t in tails:
            probe[t].append(mean_prompt_entropy(ent, len(ids), t))
        out = model.generate(input_ids=x.repeat(samples, 1), attention_mask=torch.ones(samples, len(ids)),
                             do_sample=True, temperature=temperature, top_k=0, top_p=1.0,
                             max_new_tokens=max_new_tokens, output_logits=True, return_dict_in_generate=True,
                             pad_token_id=tokenizer.pad_token_id, eos_token_id=eos)
        gen = out.sequences[:, len(ids):]
        steps = token_entropy(torch.stack(out.logits, dim=1), temperature)  # (samples, generated steps)
        after_eos = torch.cumsum((gen == eos).int(), dim=1) - (gen == eos).int()  # tokens after the first eos
        valid = after_eos == 0
        resp_entropy.append(float(steps[valid].mean()))
        gold = str(row["reward_model"]["ground_truth"]).strip()
        texts = tokenizer.batch_decode(gen, skip_special_tokens=True)
        pass_rate.append(float(np.mean([answer_from_response(t) == gold for t in texts])))
        prompt_len.append(len(ids))
    p = np.asarray(pass_rate)
    signal = p * (1 - p)
    table = {t: {"mean": float(np.mean(v)), "rho_pass_rate": spearman(v, p), "rho_signal": spearman(v, signal),
                 "rho_response_entropy": spearman(v, resp_entropy),
                 "zero_signal_pruned": float(np.mean(signal[_lowest(v, prune_quantile)] == 0))}
             for t, v in probe.items()}
    return {"n_prompts": len(p), "samples": samples, "temperature": temperature, "mean_pass_rate": float(p.mean()),
            "prune_quantile": prune_quantile, "zero_signal_all": float(np.mean(signal == 0)),
            "frac_mixed": float(np.mean(signal > 0)), "mean_prompt_tokens": float(np.mean(prompt_len)),
            "table": table, "per_prompt": {"pass_rate": pass_rate, "response_entropy": resp_entropy,
                                           "probe": {str(t): v for t, v in probe.items()}}}


def _lowest(values: Sequence[float], q: float) -> np.ndarray:
    """The ``ceil(q n)`` lowest values (at least one), ties broken by position."""
    n = max(1, int(math.ceil(q * len(values))))
    return np.argsort(np.asarray(values), kind="stable")[:n]


def format_table(result: dict[str, Any]) -> str:
    """The correlation table as markdown (what ``docs/hive.md`` quotes)."""
    lines = [f"{result['n_prompts']} prompts x {result['samples']} samples at T={result['temperature']}; mean pass "
             f"rate {result['mean_pass_rate']:.3f}, {result['frac_mixed']:.0%} of prompts with mixed outcomes, "
             f"{result['mean_prompt_tokens']:.1f} prompt tokens on average", "",
             f"| tail_tokens | mean probe entropy | rho(pass rate) | rho(p(1-p)) | rho(response entropy) | zero-signal "
             f"share of the lowest {result['prune_quantile']:.0%} (all prompts: {result['zero_signal_all']:.2f}) |",
             "|---|---|---|---|---|---|"]
    for t, row in result["table"].items():
        lines.append(f"| {t if t else '0 (all)'} | {row['mean']:.3f} | {row['rho_pass_rate']:+.3f} | "
                     f"{row['rho_signal']:+.3f} | {row['rho_response_entropy']:+.3f} | "
                     f"{row['zero_signal_pruned']:.2f} |")
    return "\n".join(lines)


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
