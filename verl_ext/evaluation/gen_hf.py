"""transformers ``generate`` back-end: CPU (the tiny model, laptops, CI) or one GPU for small models.

Prompts go in batches (left-padded); each prompt is sampled ``n`` times (``num_return_sequences``). The token
budget is clipped to the model's context (``max_position_embeddings``) so a long default never overruns a small
model. Sampling is seeded once (``torch.manual_seed``) so a rerun on the same machine gives the same responses.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import torch

from verl_ext.evaluation.sampling import SamplingConfig
from verl_ext.evaluation.scoring import Progress

logger = logging.getLogger(__name__)


class HFGenerator:
    def __init__(self, model_path: str, batch_size: int = 32, device: str | None = None, dtype: str | None = None,
                 trust_remote_code: bool = False, num_threads: int | None = None) -> None:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if num_threads:
            torch.set_num_threads(int(num_threads))
        self.device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        torch_dtype = getattr(torch, dtype) if dtype else (torch.bfloat16 if self.device.type == "cuda"
                                                            else torch.float32)
        self.tokenizer = AutoTokenizer.from_pretrained(model_path, trust_remote_code=trust_remote_code)
        self.tokenizer.padding_side = "left"
        self.model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch_dtype,
                                                          trust_remote_code=trust_remote_code).to(self.device).eval()
        eos = self.model.generation_config.eos_token_id
        eos = self.tokenizer.eos_token_id if eos is None else eos
        self.eos_ids = list(eos) if isinstance(eos, (list, tuple)) else [eos]
        pad = self.tokenizer.pad_token_id
        self.pad_id = pad if pad is not None else self.eos_ids[0]
        self.max_positions = int(getattr(self.model.config, "max_position_embeddings", 0) or 0)
        self.batch_size = int(batch_size)

    def _kwargs(self, cfg: SamplingConfig, prompt_len: int) -> dict[str, Any]:
        budget = cfg.max_new_tokens
        if self.max_positions:
            room = self.max_positions - prompt_len
            if room < 1:
                raise ValueError(f"a prompt of {prompt_len} tokens leaves no room in the model's "
                                 f"{self.max_positions}-token context")
            budget = min(budget, room)
        kwargs: dict[str, Any] = dict(max_new_tokens=budget, num_return_sequences=cfg.n, eos_token_id=self.eos_ids,
                                      pad_token_id=self.pad_id, do_sample=cfg.temperature > 0)
        if cfg.temperature > 0:
            kwargs.update(temperature=cfg.temperature, top_p=cfg.top_p, top_k=cfg.top_k if cfg.top_k > 0 else 0)
        return kwargs

    def generate(self, prompts: Sequence[str], cfg: SamplingConfig) -> list[list[str]]:
        torch.manual_seed(cfg.seed)
        out: list[list[str]] = []
        progress = Progress("generating (hf)", len(prompts))
        for start in range(0, len(prompts), self.batch_size):
            chunk = list(prompts[start:start + self.batch_size])
            enc = self.tokenizer(chunk, return_tensors="pt", padding=True, add_special_tokens=False).to(self.device)
            width = enc["input_ids"].shape[1]
            with torch.no_grad():
                seqs = self.model.generate(**enc, **self._kwargs(cfg, width))
            texts = self.tokenizer.batch_decode(seqs[:, width:], skip_special_tokens=True)
            out.extend(texts[i * cfg.n:(i + 1) * cfg.n] for i in range(len(chunk)))
            progress.advance(len(chunk))
        return out
