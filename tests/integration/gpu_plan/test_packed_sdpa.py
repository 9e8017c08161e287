"""Packed (remove-padding) sdpa gives the padded path's log-probs, entropies and gradients, through verl's own code.

The launchers' fallback without flash-attn is sdpa with ``use_remove_padding=True`` (recipe/heapa/ops/gpu_fit.py). This
runs verl 0.9.1's FSDP engine code for one micro-batch on the CPU, both ways: ``left_right_2_no_padding`` (what the
trainer does before ``compute_log_prob`` / ``update_actor``), the engine's ``forward_step`` (its
``prepare_model_inputs``: packed = one row, ``attention_mask=None``, per-sequence position ids; padded =
``to_padded_tensor`` rows with a mask; the model call with ``use_cache=False``; ``prepare_model_outputs``: log-probs
and entropy), on a tiny random Qwen3 (and Qwen2) built from a config, with ``apply_monkey_patch`` as the engine
applies it. Only the FSDP wrapping and the process group are left out (one rank: neither changes the math). A
control shows the test has teeth: without transformers' packed-sequence detection, the packed path attends across
its sequences and the log-probs move by orders of magnitude more.
"""

from __future__ import annotations

import pytest
import torch

RTOL_GRAD = 1e-5
ATOL = 1e-5  # fp32; measured ~5e-7 (Qwen3) for log-probs


def tiny_model(kind: str):
    from transformers import AutoModelForCausalLM, Qwen2Config, Qwen3Config

    from verl.models.transformers.monkey_patch import apply_monkey_patch

    torch.manual_seed(0)
    common = dict(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, max_position_embeddings=256, tie_word_embeddings=True)
    cfg = Qwen3Config(head_dim=16, **common) if kind == "qwen3" else Qwen2Config(**common)
    model = AutoModelForCausalLM.from_config(cfg, attn_implementation="sdpa").float()
    apply_monkey_patch(model, use_remove_padding=True)  # as FSDPEngine._build_module does
    return model


def batch(packed: bool, temperature: float):
    """Four rows as the trainer holds them: prompts left-padded, responses right-padded, of different lengths."""
    from tensordict import TensorDict

    from verl.utils import tensordict_utils as tu
    from verl.workers.utils.padding import left_right_2_no_padding

    prompt, response = 12, 20
    prompt_lens, response_lens = [12, 5, 9, 3], [20, 7, 1, 14]
    gen = torch.Generator().manual_seed(1)
    ids = torch.randint(1, 512, (4, prompt + response), generator=gen)
    mask = torch.zeros_like(ids)
    for i, (p, r) in enumerate(zip(prompt_lens, response_lens)):
        mask[i, prompt - p: prompt + r] = 1
    td = TensorDict({"input_ids": ids * mask, "attention_mask": mask,
                     "position_ids": torch.clamp(mask.cumsum(-1) - 1, min=0),
                     "response_mask": mask[:, prompt:].clone()}, batch_size=[4])
    td = left_right_2_no_padding(td)
    tu.assign_non_tensor(td, use_remove_padding=packed, calculate_entropy=True, temperature=temperature)
    return td


@pytest.fixture(autouse=True)
def _on_cpu(monkeypatch):
    """forward_step moves the micro-batch to verl's device (cuda unless the CPU platform is selected): here, the CPU."""
    from verl.workers.engine.fsdp import transformer_impl

    monkeypatch.setattr(transformer_impl, "get_device_id", lambda: "cpu")
    monkeypatch.setattr(transformer_impl, "get_device_name", lambda: "cpu")


def engine(model):
    """verl's FSDPEngineWithLMHead without __init__ (which needs a process group): only what forward_step reads."""
    from verl.utils import torch_functional as verl_F
    from verl.workers.config import FSDPEngineConfig
    from verl.workers.engine.fsdp.transformer_impl import FSDPEngineWithLMHead

    eng = object.__new__(FSDPEngineWithLMHead)
    eng.engine_config, eng.module = FSDPEngineConfig(), model
    eng.pad_to_length, eng.use_ulysses_sp, eng.ulysses_device_mesh = False, False, None
    eng.compute_entropy_from_logits = verl_F.entropy_from_logits
    eng._autocast_dtype = torch.float32  # fp32 on the CPU: forward_step then skips autocast
    return eng


def run(model, packed: bool, temperature: float = 0.7):
    model.zero_grad()

    def loss_fn(model_output, data, dp_group):
        return model_output["log_probs"].values().sum(), {}

    loss, out = engine(model).forward_step(batch(packed, temperature), loss_function=loss_fn, forward_only=False)
    loss.backward()
    grads = torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])
    model_output = out["model_output"]
    return model_output["log_probs"].values(), model_output["entropy"].values(), grads


@pytest.mark.parametrize("kind", ["qwen3", "qwen2"])
def test_packed_sdpa_equals_padded(kind):
    model = tiny_model(kind)
    lp_packed, ent_packed, g_packed = run(model, packed=True)
    lp_padded, ent_padded, g_padded = run(model, packed=False)
    assert lp_packed.shape == lp_padded.shape == (12 + 20 + 5 + 7 + 9 + 1 + 3 + 14,)
    assert (lp_packed - lp_padded).abs().max().item() < ATOL
    assert (ent_packed - ent_padded).abs().max().item() < ATOL
    assert ((g_packed - g_padded).abs().max() / g_padded.abs().max()).item() < RTOL_GRAD


def test_without_packed_masks_the_sequences_would_mix(monkeypatch):
    """The control: transformers' detection of packed sequences is what separates them in sdpa."""
    from transformers import masking_utils

    model = tiny_model("qwen3")
    lp_padded = run(model, packed=False)[0]
    monkeypatch.setattr(masking_utils, "find_packed_sequence_indices", lambda position_ids: None)
    lp_mixed = run(model, packed=True)[0]
    assert (lp_mixed - lp_padded).abs().max().item() > 100 * ATOL
