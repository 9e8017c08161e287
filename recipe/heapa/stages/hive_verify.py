"""HIVE's online verification in the recipe: the current actor's prompt entropy for HIVE's candidates.

HIVE (arXiv 2603.25184) prunes history-ranked candidates whose utility went stale, using the *prompt entropy* under
the current policy as a cheap proxy (a forward pass, no generation). ``PromptEntropyProbe`` is the strategy's
``prompt_entropy(ids) -> {id: H}`` callback: H is the mean entropy of the actor's next-token distribution (at the
rollout temperature) over the last ``heapa.hive.tail_tokens`` positions of the rendered prompt (default 2: the end
of the assistant header and the distribution over the first response token, i.e. the policy's uncertainty as it
starts to answer; 0 = every position, which mostly measures how surprising the question text and template are).
``scripts/hive_probe_study.py`` measured the variants on the tiny CPU model (docs/hive.md has the table). When
the probe returns the same value for every candidate of a call (a template that forces the first response
tokens, e.g. ``<think>``, makes the tail deterministic) it warns once: raise ``tail_tokens`` then.

Where it runs (verl 0.9.1, V1 sync trainer): selection is lazy, inside ``prepare_step`` -> ``_fetch_one_gen_batch``
(and DAPO refills inside ``replay_buffer.sample``), so the probe runs there. The actor worker group answers
``compute_log_prob`` at any point of the step (its engine loads what it needs per call); the probe uses exactly the
path ``_compute_old_log_prob`` uses: rows in TransferQueue (a partition of its own, cleared right after), a
``KVBatchMeta`` with ``calculate_entropy`` to ``actor_rollout_wg.compute_log_prob``, per-token ``entropy`` read back
over the whole sequence. The rows are the candidates' prompts as the agent loop tokenizes them (chat template,
generation prompt, left-truncated to ``rollout.prompt_length``) plus one placeholder response token.

Memory (GPUs): the pass runs while the rollout servers are awake, and it must. The sync trainer wakes them in
``update_weights`` (``on_step_end`` of the previous step, ``on_init_end`` before the first) and sleeps them only in
``on_sample_end``, after ``replay_buffer.sample`` returned; ``prepare_step`` fires each selected chunk into generation
at once and DAPO refills select while the rest of the batch is generating. Sleeping them for the probe would drop
vLLM's weights (sleep level 2) and force a full weight sync per selection. So the probe bounds its own forward: each
micro-batch holds at most ``heapa.hive.probe_max_tokens`` tokens per GPU (default 4096), whatever the actor's
log-prob batching (``ppo_max_token_len_per_gpu`` = 24576 in the GPU launcher). The probe sets the batching keys of
the call itself (``extra_info`` -> the engine's ``infer_batch``, which fills only the keys a call leaves out): with
dynamic batch sizes and packed rows (``use_remove_padding``) ``max_token_len_per_gpu`` = min(budget, the actor's
``log_prob_max_token_len_per_gpu``), which verl 0.9.1's ``rearrange_micro_batches`` enforces as a hard limit per
micro-batch; otherwise fixed micro-batches, ``micro_batch_size_per_gpu`` <= budget // longest row (verl pads a
micro-batch to its longest row and its dynamic limit counts real tokens only, so padded rows use fixed ones even
when the actor's are dynamic). A prompt longer than the budget is forwarded alone (fixed micro-batches) or lifts
the call's limit to its own length (verl refuses a lower one).

Why 4096: the transient memory of an entropy forward is dominated by the vocabulary-sized tensors, T x V per copy
(logits, their temperature-scaled copy, the softmax and the product of ``entropy_from_logits``, one more in the
log-prob kernel); at V = 151,936 (Qwen2.5/Qwen3) one copy is 0.30 MB per token in bf16, 0.61 MB in fp32. 4096
tokens: 1.2 GB (bf16) / 2.5 GB (fp32) per copy, ~5-10 GB at four copies; 24576 tokens: 7.5 / 14.9 GB per copy,
30-60 GB, more than the ~16 GB that ``gpu_memory_utilization=0.8`` leaves on an 80 GB GPU. 4096 also holds two
prompts of the launcher's ``max_prompt_length`` (2048), and a selection stays cheap (2 x 512 candidates of ~250
tokens over 8 ranks: ~32k tokens, about 8 micro-batches per GPU). What remains the user's: the actor's resident
shard (params, optimizer unless offloaded) plus this budget must fit beside vLLM's share.

Cost per step: ``hive/verify_s`` (wall seconds), ``hive/verify_tokens`` (tokens forwarded), ``hive/verify_prompts``.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
import transfer_queue as tq
from transfer_queue import KVBatchMeta

from verl.utils.tensordict_utils import list_of_dict_to_tensordict
from verl.utils.tokenizer import normalize_token_ids

logger = logging.getLogger(__name__)
PARTITION = "hive_verify"
FLAT_EPS = 1e-6  # candidates whose probe values all lie this close cannot be told apart
DEFAULT_MAX_TOKENS = 4096  # tokens per probe forward micro-batch per GPU (heapa.hive.probe_max_tokens; see above)


def probe_row(prompt_ids: Sequence[int], placeholder: int) -> dict[str, torch.Tensor]:
    """A TransferQueue trajectory row whose 'prompt' is the candidate and whose 'response' is one placeholder token
    (the engine returns entropy for every position of ``input_ids``; the placeholder's own position is unused)."""
    prompts = torch.tensor(list(prompt_ids), dtype=torch.int64)
    responses = torch.tensor([int(placeholder)], dtype=torch.int64)
    input_ids = torch.cat([prompts, responses])
    mask = torch.ones(1, dtype=torch.int64)
    return {"prompts": prompts, "responses": responses, "input_ids": input_ids,
            "position_ids": torch.arange(input_ids.numel(), dtype=torch.int64), "response_mask": mask,
            "loss_mask": mask.clone(), "attention_mask": torch.ones_like(input_ids)}


def mean_prompt_entropy(entropy: torch.Tensor, prompt_len: int, tail_tokens: int = 2) -> float:
    """Mean entropy over the last ``tail_tokens`` of positions ``[0, prompt_len)`` (all of them when 0); position
    ``prompt_len - 1`` is the distribution over the first response token."""
    values = entropy[:prompt_len].float()
    if tail_tokens:
        values = values[-tail_tokens:]
    return float(values.mean()) if values.numel() else 0.0


class PromptEntropyProbe:
    """``ids -> {id: prompt entropy}`` through the actor (see the module docstring); accumulates its cost."""

    def __init__(self, dataset: Any, tokenizer: Any, actor_wg: Callable[[], Any], dp_size: Callable[[], int], *,
                 temperature: float, prompt_length: int, micro_batch_size: int | None = None, tail_tokens: int = 2,
                 chat_template_kwargs: dict | None = None, max_tokens: int = DEFAULT_MAX_TOKENS,
                 max_token_len_per_gpu: int | None = None, remove_padding: bool = True) -> None:
        self.dataset, self.tokenizer = dataset, tokenizer
        self._actor_wg, self._dp_size = actor_wg, dp_size
        self.micro_batch_size = micro_batch_size  # the actor's log-prob micro batch; None with dynamic batch sizes
        self.max_tokens = int(max_tokens)  # the probe's own budget per forward micro-batch per GPU
        self.max_token_len_per_gpu = max_token_len_per_gpu  # the actor's log-prob token limit (dynamic batch sizes)
        self.remove_padding = bool(remove_padding)  # model.use_remove_padding: off, verl pads a micro-batch's rows
        self.temperature, self.prompt_length, self.tail_tokens = float(temperature), int(prompt_length), tail_tokens
        self.chat_template_kwargs = {k: v for k, v in (chat_template_kwargs or {}).items()
                                     if k not in ("tokenize", "return_dict", "return_tensors")}
        self._warned_flat = False
        self.placeholder = tokenizer.eos_token_id if tokenizer.eos_token_id is not None else tokenizer.pad_token_id
        self._reset()

    def _reset(self) -> None:
        self.seconds, self.tokens, self.prompts, self.calls = 0.0, 0, 0, 0
        self.entropies: list[float] = []

    def tokenize(self, record_id: int) -> list[int]:
        """The candidate's prompt tokens as the agent loop renders them."""
        messages = list(self.dataset[record_id]["raw_prompt"])
        ids = normalize_token_ids(self.tokenizer.apply_chat_template(
            messages, add_generation_prompt=True, tokenize=True, **self.chat_template_kwargs))
        return ids[-self.prompt_length:] if len(ids) > self.prompt_length else ids

    def __call__(self, ids: Sequence[int]) -> dict[int, float]:
        ids = [int(i) for i in ids]
        if not ids:
            return {}
        start = time.perf_counter()
        prompts = [self.tokenize(i) for i in ids]
        rows = [probe_row(p, self.placeholder) for p in prompts]
        multiple, extra = self._layout(len(rows), max(len(p) for p in prompts) + 1)
        rows += [rows[-1]] * (-len(rows) % multiple)  # copies of the last row: even split, whole micro batches
        run = uuid.uuid4().hex
        keys = [f"{run}{j}_0_0" for j in range(len(rows))]
        tags = [{"prompt_len": int(r["prompts"].numel()), "response_len": 1, "seq_len": int(r["input_ids"].numel())}
                for r in rows]
        tq.kv_batch_put(keys=keys, partition_id=PARTITION, fields=list_of_dict_to_tensordict(rows), tags=tags)
        try:
            meta = KVBatchMeta(partition_id=PARTITION, keys=keys, tags=tags,
                               extra_info={"calculate_entropy": True, "compute_loss": False,
                                           "temperature": self.temperature, **extra})
            self._actor_wg().compute_log_prob(meta)
            data = tq.kv_batch_get(keys=keys[:len(ids)], partition_id=PARTITION, select_fields=["entropy"])
        finally:
            tq.kv_clear(keys=keys, partition_id=PARTITION)
        out = {rid: mean_prompt_entropy(data["entropy"][j], len(prompts[j]), self.tail_tokens)
               for j, rid in enumerate(ids)}
        values = list(out.values())
        if len(values) > 1 and max(values) - min(values) < FLAT_EPS and not self._warned_flat:
            self._warned_flat = True
            logger.warning("hive: the prompt-entropy probe returned %.3g for all %d candidates over the last %d "
                           "prompt positions: it cannot tell them apart (a forced response prefix?); raise "
                           "heapa.hive.tail_tokens", values[0], len(values), self.tail_tokens)
        self.seconds += time.perf_counter() - start
        self.tokens += sum(len(p) + 1 for p in prompts)
        self.prompts += len(ids)
        self.calls += 1
        self.entropies.extend(out.values())
        return out

    def _layout(self, n: int, longest: int) -> tuple[int, dict[str, Any]]:
        """How ``n`` rows of at most ``longest`` tokens are batched: the row count must be a multiple of the first
        value (copies pad it), the second goes into the call's ``extra_info``, where it replaces the engine's own
        batching keys. Rows split evenly over the actor's data-parallel ranks; a micro-batch holds at most
        max(``max_tokens``, the longest row) tokens per GPU, padding included, and never more than the actor's own
        log-prob batching allows."""
        dp = max(1, int(self._dp_size()))
        budget = self.max_tokens
        if not self.micro_batch_size and self.max_token_len_per_gpu:
            budget = min(budget, int(self.max_token_len_per_gpu))
        if not self.micro_batch_size and self.remove_padding:
            # packed rows: verl's dynamic batching packs them up to a hard limit (it refuses one below the longest row)
            return dp, {"use_dynamic_bsz": True, "max_token_len_per_gpu": max(budget, longest)}
        # fixed micro batches, also in place of dynamic ones when padding is kept: verl pads each micro-batch to its
        # longest row and its dynamic limit counts real tokens only, so micro x longest <= budget is the bound
        micro = min(max(1, budget // longest), -(-n // dp))  # and no larger than a rank's share
        if self.micro_batch_size:
            micro = min(micro, int(self.micro_batch_size))
        return dp * micro, {"use_dynamic_bsz": False, "micro_batch_size_per_gpu": micro}

    def close_step(self) -> dict[str, float]:
        """This step's cost and entropy summary; resets the step's counters."""
        ent = np.asarray(self.entropies, dtype=np.float64)
        out = {"hive/verify_s": self.seconds, "hive/verify_tokens": float(self.tokens),
               "hive/verify_prompts": float(self.prompts), "hive/verify_calls": float(self.calls)}
        if ent.size:
            out.update({"hive/prompt_entropy_mean": float(ent.mean()), "hive/prompt_entropy_std": float(ent.std()),
                        "hive/prompt_entropy_min": float(ent.min()), "hive/prompt_entropy_max": float(ent.max())})
        self._reset()
        return out


def response_entropy(rows: Sequence, partition_id: str) -> dict[int, float]:
    """Mean token entropy of each record's responses this step (verl writes ``entropy`` in old_log_prob); ``rows``
    are the step view's trajectories (``batch_view.Trajectory``: key and record id)."""
    if not rows:
        return {}
    data = tq.kv_batch_get(keys=[t.key for t in rows], partition_id=partition_id,
                           select_fields=["entropy", "response_mask"])
    sums: dict[int, list[float]] = {}
    for j, t in enumerate(rows):
        mask = data["response_mask"][j]
        ent = data["entropy"][j][:mask.numel()].float()
        valid = mask.bool()
        acc = sums.setdefault(t.record_id, [0.0, 0.0])
        acc[0] += float(ent[valid].sum())
        acc[1] += float(valid.sum())
    return {rid: s / n for rid, (s, n) in sums.items() if n > 0}
