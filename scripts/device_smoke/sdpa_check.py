"""Packed vs padded sdpa log-probs and peak memory on long rows (the device smoke test's standalone CUDA check).

What tests/integration/gpu_plan/test_packed_sdpa.py shows on CPU with a tiny model, here at Qwen3-4B's width
(hidden 2560, 32/8 heads of 128, SwiGLU 9728, vocabulary 151,936; random init, ``--layers`` layers, bf16): the
trainer's packed input (one row, ``attention_mask=None``, per-sequence position ids, from which transformers builds
sdpa's block-diagonal mask) must give the padded input's log-probs. Also reported: each path's peak CUDA memory.

    python scripts/device_smoke/sdpa_check.py --rows 8192,1024,1024 --out OUT/sdpa.json     # on the GPU
    python scripts/device_smoke/sdpa_check.py --tiny --device cpu --out OUT/sdpa.json         # dry run
"""

from __future__ import annotations

import argparse
import json
import sys
import time


def build_model(tiny: bool, layers: int, device, dtype):
    import torch
    from transformers import AutoModelForCausalLM, Qwen3Config

    from verl.models.transformers.monkey_patch import apply_monkey_patch

    torch.manual_seed(0)
    if tiny:
        cfg = Qwen3Config(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=layers,
                          num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=4096,
                          tie_word_embeddings=True)
    else:  # Qwen3-4B-Instruct-2507's shape (verl_ext/gpu_plan's built-in `qwen3-4b`)
        cfg = Qwen3Config(vocab_size=151936, hidden_size=2560, intermediate_size=9728, num_hidden_layers=layers,
                          num_attention_heads=32, num_key_value_heads=8, head_dim=128, max_position_embeddings=40960,
                          tie_word_embeddings=True, rope_theta=5_000_000)
    model = AutoModelForCausalLM.from_config(cfg, attn_implementation="sdpa", dtype=dtype).to(device).eval()
    apply_monkey_patch(model, use_remove_padding=True)  # as verl's FSDP engine does before packed forwards
    return model, cfg


def token_logprobs(logits, ids):
    import torch

    # log-prob of token t+1 given the prefix: float32 log-softmax, one row at a time keeps the peak honest
    return torch.log_softmax(logits[:-1].float(), dim=-1).gather(-1, ids[1:, None]).squeeze(-1)


def main(argv: list[str] | None = None) -> int:
    import torch

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rows", default="8192,1024,1024", help="sequence lengths of the micro-batch")
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--tiny", action="store_true", help="the tests' tiny width (dry runs on CPU)")
    p.add_argument("--device", default="cuda")
    p.add_argument("--dtype", default=None, help="default: bfloat16 on cuda, float32 on cpu")
    p.add_argument("--atol", type=float, default=None, help="default: 0.1 for bf16, 1e-4 for fp32")
    p.add_argument("--out", required=True)
    args = p.parse_args(argv)
    device = torch.device(args.device)
    dtype = getattr(torch, args.dtype) if args.dtype else (torch.bfloat16 if device.type == "cuda" else torch.float32)
    atol = args.atol if args.atol is not None else (0.1 if dtype == torch.bfloat16 else 1e-4)
    lengths = [int(x) for x in args.rows.split(",")]
    model, cfg = build_model(args.tiny, args.layers, device, dtype)
    gen = torch.Generator().manual_seed(1)
    seqs = [torch.randint(0, cfg.vocab_size, (n,), generator=gen) for n in lengths]
    cuda = device.type == "cuda"

    def peak_reset():
        if cuda:
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
        return time.time()

    def peak():
        return round(torch.cuda.max_memory_allocated() / 2**30, 3) if cuda else None

    result: dict = {"rows": lengths, "layers": args.layers, "tiny": args.tiny, "dtype": str(dtype),
                    "device": str(device), "torch": torch.__version__}
    with torch.no_grad():
        t0 = peak_reset()  # padded: rows x longest, right-padded, with a mask
        width = max(lengths)
        ids = torch.zeros(len(seqs), width, dtype=torch.long)
        mask = torch.zeros(len(seqs), width, dtype=torch.long)
        for i, s in enumerate(seqs):
            ids[i, : len(s)], mask[i, : len(s)] = s, 1
        ids, mask = ids.to(device), mask.to(device)
        logits = model(input_ids=ids, attention_mask=mask, use_cache=False).logits
        padded = [token_logprobs(logits[i, : n], ids[i, : n]) for i, n in enumerate(lengths)]
        del logits
        result.update(padded_peak_gib=peak(), padded_s=round(time.time() - t0, 3))

        t0 = peak_reset()  # packed: one row, no mask, position ids restart per sequence
        flat = torch.cat(seqs)[None].to(device)
        pos = torch.cat([torch.arange(n) for n in lengths])[None].to(device)
        logits = model(input_ids=flat, position_ids=pos, attention_mask=None, use_cache=False).logits[0]
        packed, start = [], 0
        for n in lengths:
            packed.append(token_logprobs(logits[start: start + n], flat[0, start: start + n]))
            start += n
        del logits
        result.update(packed_peak_gib=peak(), packed_s=round(time.time() - t0, 3))
    diff = max(float((a - b).abs().max()) for a, b in zip(padded, packed))
    result.update(max_abs_logprob_diff=diff, atol=atol, ok=diff <= atol)
    with open(args.out, "w") as fh:
        json.dump(result, fh, indent=1)
    sys.stdout.write(json.dumps(result) + "\n")
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
