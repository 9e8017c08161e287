"""Peak GPU memory per GPU of a verl 0.9.1 GPU run, by phase, from formulas (no GPU needed).

Notation: P parameters (``ModelShape.param_count``), V vocabulary, h hidden size, L layers, H / Hkv query / key-value
heads of width d, I SwiGLU width, N = nnodes x n_gpus_per_node (FSDP shards over all of them), G the GPU's memory,
u = rollout.gpu_memory_utilization, TP = rollout.tensor_model_parallel_size. Sizes are bytes; the table shows GiB
(2^30), and ``--gpu-gb`` is read as GiB (an "80 GB" A100/H100 has 80 GiB).

Resident state (FSDP, verl's actor: fp32 master weights, bf16 compute, fp32 gradients, AdamW):
  actor params 4P/N (0 with param_offload), AdamW m+v 8P/N (0 with optimizer_offload), gradients 4P/N during the
  update only (``zero_grad`` frees them after the step); the reference model (only with use_kl_loss or
  use_kl_in_reward) 2P/N in bf16; gathered while a forward runs: the embedding V*h*2 plus two layers' bf16 weights
  2*2*P_layer (the one computing and the one prefetched).
Context: C = 1.5 GiB per GPU for the CUDA contexts of the trainer process and vLLM's process (vLLM keeps its context
  and allocator pool while asleep). Not modelled: allocator fragmentation (often 5-15 %), NCCL buffers, Ray.

Rollout (vLLM awake; the trainer keeps its resident state):
  vLLM share u*G holds weights 2P/TP, an activation reserve B*(2I + 4h)*2 + S*V*4*2 (B = max_num_batched_tokens,
  S = max_num_seqs: its profiling forward and the fp32 logits/probabilities of one decode step), and the KV cache,
  2*L*(Hkv/TP)*d*2 bytes per token. vLLM starts only if the KV cache holds one sequence of max_model_len tokens;
  "seqs" = KV / (per-token * max_model_len) full-length sequences at once.
  peak = u*G + actor params + AdamW + ref + C.

Micro-batches (dynamic batch size, verl ``rearrange_micro_batches``): at most T real tokens per micro-batch
(T = ppo_max_token_len_per_gpu for the update, the log-prob limits for the log-prob passes).
  packed (use_remove_padding=True): the forward sees exactly those tokens: positions X = T.
  padded (use_remove_padding=False): verl pads every row to the micro-batch's longest (``to_padded_tensor``). Worst
  case assumed: one row of R = min(max_prompt + max_response, T) tokens and short rows of ``short_row`` tokens
  (default 1,024) filling the rest of T: rows = 1 + floor((T - R) / short_row), X = rows * R. The real tokens
  are still T.
Per-pass transient memory for a micro-batch of X positions (bf16 activations under autocast):
  logits copy X*V*2. Copies alive at the peak:
    update (backward): logits + the saved log-softmax (``logprobs_from_logits_v2`` keeps each row's for backward) +
      the logits' gradient = 3, + 2 (softmax and softmax*logits of ``entropy_from_logits``) when the update computes
      entropy (actor.calculate_entropy or entropy_coeff != 0), + 1 for the temperature-scaled copy when the rollout
      temperature != 1. Chunked entropy (packed only) replaces the 2 copies by 2*chunk*V*4.
    log-prob passes (no grad): logits 1, + 2 for entropy (the actor's old-log-prob pass and HIVE's probe always
      compute it; the reference's never), + 1 when temperature != 1.
    padded only: + T*V*2 (verl concatenates the real rows' logits before the log-probs).
  activations, update: with gradient checkpointing L*X*h*2 (each layer's saved input) + X*a (one layer recomputed);
    without, L*X*a. a = 2*(4h + 2*H*d + 2*Hkv*d + 4I) + 4*2h bytes per token and layer (norm outputs and residuals,
    q and attention output, k and v, gate/up/activation/product, the fp32 RMSNorm inputs); with a dense mask
    (sdpa/eager) k and v are expanded to H heads: + 2*2*(H - Hkv)*d.
  activations, no grad: X*a (one layer at a time).
  attention mask (sdpa/eager only): rows*X_row^2 bytes for the boolean mask + twice that for the bf16 bias SDPA
    builds from it: 3*X^2 packed (one row of X), 3*rows*R^2 padded. Flash attention: none.
Phases (peak = the largest):
  update      = actor params + AdamW + grads + gathered + update transient + C          (vLLM asleep)
  old log-prob = actor params + AdamW + gathered + actor log-prob transient + C          (vLLM asleep)
  ref log-prob = actor params + AdamW + ref + gathered + ref transient + C               (vLLM asleep)
  HIVE probe  = rollout peak + gathered + probe transient at X = heapa.hive.probe_max_tokens (vLLM awake)
Verdict: "fits" when peak <= 0.9 G, "tight" when <= G, "over" otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass

from verl_ext.gpu_plan.run_config import RunShape
from verl_ext.gpu_plan.shape import ModelShape

GIB = 2**30
CONTEXT = 1.5 * GIB
BF16, FP32 = 2, 4


@dataclass(frozen=True)
class Phase:
    name: str
    total: float  # bytes
    parts: dict[str, float]
    note: str = ""

    def verdict(self, gpu_bytes: float) -> str:
        if self.total <= 0.9 * gpu_bytes:
            return "fits"
        return "tight" if self.total <= gpu_bytes else "over"


def layer_activation_bytes(m: ModelShape, masked: bool) -> int:
    """a: bytes saved per token by one decoder layer for its backward (see the module docstring)."""
    a = BF16 * (4 * m.hidden + 2 * m.heads * m.head_dim + 2 * m.kv_heads * m.head_dim + 4 * m.intermediate)
    a += FP32 * 2 * m.hidden
    if masked:
        a += BF16 * 2 * (m.heads - m.kv_heads) * m.head_dim
    return a


def positions(run: RunShape, tokens: int, short_row: int) -> tuple[int, int, int]:
    """(positions X, rows, row length) of the largest micro-batch under a real-token limit."""
    if run.packed:
        return tokens, 1, tokens
    longest = min(run.max_prompt + run.max_response, tokens)
    rows = 1 + max(0, tokens - longest) // max(1, short_row)
    return rows * longest, rows, longest


def transient(m: ModelShape, run: RunShape, tokens: int, short_row: int, *, train: bool,
              entropy: bool) -> dict[str, float]:
    x, rows, row_len = positions(run, tokens, short_row)
    copy = x * m.vocab * BF16
    copies = (3 if train else 1) + (1 if run.temperature != 1.0 else 0)
    parts = {}
    if entropy and run.packed and run.entropy_chunking:
        parts["entropy"] = 2 * run.entropy_chunk * m.vocab * FP32
    elif entropy:
        copies += 2
    parts["logits"] = copies * copy + (0 if run.packed else tokens * m.vocab * BF16)
    a = layer_activation_bytes(m, run.masked)
    if train and run.grad_checkpointing:
        parts["activations"] = m.layers * x * m.hidden * BF16 + x * a
    else:
        parts["activations"] = (m.layers if train else 1) * x * a
    if run.masked:
        parts["mask"] = 3 * rows * row_len * row_len
    return parts


def resident(m: ModelShape, run: RunShape) -> dict[str, float]:
    p, n = m.param_count(), run.n_gpus
    parts = {"params": 0.0 if run.param_offload else FP32 * p / n,
             "adam": 0.0 if run.optimizer_offload else 2 * FP32 * p / n}
    if run.needs_ref:
        parts["ref"] = BF16 * p / n
    return parts


def gathered(m: ModelShape) -> float:
    return m.embedding_params() * BF16 + 2 * BF16 * m.layer_params()


def rollout(m: ModelShape, run: RunShape, gpu_bytes: float) -> tuple[Phase, dict[str, float]]:
    share = run.gpu_memory_utilization * gpu_bytes
    weights = BF16 * m.param_count() / run.rollout_tp
    reserve = run.max_num_batched_tokens * (2 * m.intermediate + 4 * m.hidden) * BF16 \
        + run.max_num_seqs * m.vocab * FP32 * 2
    kv_per_token = 2 * m.layers * max(1, m.kv_heads // run.rollout_tp) * m.head_dim * BF16
    kv = share - weights - reserve
    seqs = kv / (kv_per_token * run.max_model_len)
    vllm = {"vllm_weights": weights, "vllm_reserve": reserve, "kv_cache": kv, "kv_per_token": kv_per_token,
            "seqs": seqs}
    parts = {"vllm_share": share, **resident(m, run), "context": CONTEXT}
    note = f"KV {kv / GIB:.1f} GiB = {seqs:.1f} x {run.max_model_len}-token seqs"
    if seqs < 1:
        note = f"vLLM cannot start: KV {kv / GIB:.1f} GiB < one {run.max_model_len}-token sequence"
    return Phase("rollout (vLLM awake)", sum(parts.values()), parts, note), vllm


def plan(m: ModelShape, run: RunShape, gpu_bytes: float, short_row: int = 1024) -> list[Phase]:
    res, gat = resident(m, run), gathered(m)
    actor = {k: v for k, v in res.items() if k != "ref"}
    roll, vllm = rollout(m, run, gpu_bytes)
    if vllm["seqs"] < 1:  # vLLM refuses to start: the rollout phase is over whatever the sum says
        roll = Phase(roll.name, max(roll.total, gpu_bytes + 1), roll.parts, roll.note)
    layout = "packed" if run.packed else "padded"

    def note(tokens: int) -> str:
        x, rows, _ = positions(run, tokens, short_row)
        return f"{layout}, {x:,} positions" + ("" if run.packed else f" ({rows} rows)")

    up = {**actor, "grads": 0.0 if run.param_offload else FP32 * m.param_count() / run.n_gpus, "gathered": gat,
          **transient(m, run, run.update_tokens, short_row, train=True, entropy=run.update_entropy),
          "context": CONTEXT}
    old = {**actor, "gathered": gat, **transient(m, run, run.logprob_tokens, short_row, train=False, entropy=True),
           "context": CONTEXT}
    phases = [roll, Phase("actor update", sum(up.values()), up, note(run.update_tokens)),
              Phase("old log-prob", sum(old.values()), old, note(run.logprob_tokens))]
    if run.needs_ref:
        ref = {**res, "gathered": gat,
               **transient(m, run, run.ref_tokens, short_row, train=False, entropy=False), "context": CONTEXT}
        phases.append(Phase("ref log-prob", sum(ref.values()), ref, note(run.ref_tokens)))
    if run.hive_probe_tokens:
        probe_run = run if run.packed else _padded_probe(run)
        probe = {**roll.parts, "gathered": gat,
                 **transient(m, probe_run, run.hive_probe_tokens, short_row, train=False, entropy=True)}
        phases.append(Phase("HIVE probe (vLLM awake)", sum(probe.values()), probe,
                            f"{layout}, {run.hive_probe_tokens:,} positions"))
    return phases


def _padded_probe(run: RunShape) -> RunShape:
    """HIVE's padded micro-batches hold at most probe_max_tokens positions (recipe/heapa/stages/hive_verify.py), i.e. rows
    x longest <= budget: modelled as one row of that many positions."""
    from dataclasses import replace

    return replace(run, max_prompt=run.hive_probe_tokens, max_response=0)


def peak(phases: list[Phase]) -> Phase:
    return max(phases, key=lambda p: p.total)
