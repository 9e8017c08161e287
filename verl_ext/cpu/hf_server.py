"""The ``hf`` rollout server: a Ray actor serving HF ``model.generate`` token-in/token-out on the CPU.

verl's agent loop calls ``server.generate.remote(request_id=..., prompt_ids=..., sampling_params=...)`` and
expects a ``TokenOutput``; the trainer's sleep/wake/abort calls are no-ops here (nothing to free on a host).
The actor owns its own copy of the model; the actor worker pushes fresh weights after every PPO update
through ``load_weights`` (see ``hf_rollout.HFServerAdapter``), so rollouts always come from the current policy.
Generation is serialised by one lock and runs in a worker thread so the actor's event loop stays responsive.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import torch

from verl.workers.rollout.replica import TokenOutput

logger = logging.getLogger(__name__)


def sampled_logprobs(logits: list[torch.Tensor], tokens: torch.Tensor, temperature: float) -> list[float]:
    """Log-probability of each sampled token under the sampling distribution's temperature.

    verl compares these with the actor's own log-probs (``logits / temperature``), so both sides use the same
    scaling; greedy decoding (temperature 0) reports the untempered distribution.
    """
    scale = temperature if temperature > 0 else 1.0
    out = []
    for step_logits, tok in zip(logits, tokens.tolist()):
        lp = torch.log_softmax(step_logits[0].float() / scale, dim=-1)
        out.append(float(lp[tok]))
    return out


class HFServer:
    """Serves one HF causal LM; ``generate`` is the only hot method."""

    def __init__(self, model_path: str, response_length: int, max_model_len: int, seed: int = 0,
                 trust_remote_code: bool = False, num_threads: int = 1):
        from transformers import AutoModelForCausalLM, AutoTokenizer

        torch.manual_seed(seed)
        torch.set_num_threads(max(1, num_threads))
        self.model = AutoModelForCausalLM.from_pretrained(
            model_path, dtype=torch.float32, trust_remote_code=trust_remote_code, attn_implementation="sdpa"
        ).eval()
        self.tokenizer = AutoTokenizer.from_pretrained(model_path, trust_remote_code=trust_remote_code)
        self.response_length = int(response_length)
        self.max_model_len = int(max_model_len)
        self.global_steps: int | None = None
        self.weight_versions = 0
        self._lock = asyncio.Lock()
        eos = self.model.generation_config.eos_token_id
        if eos is None:
            eos = self.tokenizer.eos_token_id
        self.eos_ids = eos if isinstance(eos, list) else [eos]
        self.pad_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else self.eos_ids[0]
        logger.info("HFServer loaded %s (%d params)", model_path, sum(p.numel() for p in self.model.parameters()))

    def _max_new_tokens(self, prompt_len: int, sampling_params: dict[str, Any]) -> int:
        requested = sampling_params.get("max_tokens", sampling_params.get("max_new_tokens"))
        limit = self.response_length if requested is None else int(requested)
        room = self.max_model_len - prompt_len
        if room < 1:
            raise ValueError(f"prompt of {prompt_len} tokens leaves no room within max_model_len={self.max_model_len}")
        return max(1, min(limit, room))

    def _generate_sync(self, prompt_ids: list[int], sampling_params: dict[str, Any]) -> tuple[list[int], list[float]]:
        temperature = float(sampling_params.get("temperature", 1.0))
        top_k = int(sampling_params.get("top_k", -1))
        stop = sampling_params.get("stop") or None
        if isinstance(stop, str):
            stop = [stop]
        kwargs: dict[str, Any] = dict(
            max_new_tokens=self._max_new_tokens(len(prompt_ids), sampling_params),
            do_sample=temperature > 0,
            eos_token_id=self.eos_ids,
            pad_token_id=self.pad_id,
            return_dict_in_generate=True,
            output_logits=True,
        )
        if temperature > 0:
            kwargs.update(temperature=temperature, top_p=float(sampling_params.get("top_p", 1.0)),
                          top_k=top_k if top_k > 0 else 0)
        if stop:
            kwargs.update(stop_strings=list(stop), tokenizer=self.tokenizer)
        input_ids = torch.tensor([prompt_ids], dtype=torch.long)
        with torch.no_grad():
            out = self.model.generate(input_ids=input_ids, attention_mask=torch.ones_like(input_ids), **kwargs)
        new_tokens = out.sequences[0, len(prompt_ids):]
        logprobs = sampled_logprobs(list(out.logits), new_tokens, temperature)
        return new_tokens.tolist(), logprobs

    async def generate(self, request_id: str, *, prompt_ids: list[int], sampling_params: dict[str, Any],
                       image_data: Any = None, video_data: Any = None, **_kwargs: Any) -> TokenOutput:
        if image_data is not None or video_data is not None:
            raise NotImplementedError("the hf CPU rollout serves text-only models")
        prompt_ids = [int(t) for t in prompt_ids]
        async with self._lock:
            tokens, logprobs = await asyncio.to_thread(self._generate_sync, prompt_ids, dict(sampling_params))
        want_logprobs = bool(sampling_params.get("logprobs", False))
        return TokenOutput(
            token_ids=tokens,
            log_probs=logprobs if want_logprobs else None,
            stop_reason="completed",  # EOS, a stop string or the length cap (vLLM reports all as completed)
            extra_fields={"global_steps": self.global_steps},
        )

    async def load_weights(self, named_tensors: dict[str, torch.Tensor], global_steps: int | None = None) -> int:
        """Copy the actor's weights in; returns how many tensors matched (0 matches is an error)."""
        # state_dict (not named_parameters) also lists tied weights such as lm_head.weight under their own name.
        own = self.model.state_dict(keep_vars=True)
        matched = [n for n in named_tensors if n in own]
        if not matched:
            raise RuntimeError(
                f"weight push matched none of the rollout model's {len(own)} tensors "
                f"(first incoming: {sorted(named_tensors)[:3]}): actor and rollout disagree on names"
            )
        unknown = sorted(set(named_tensors) - set(own))
        if unknown:
            logger.warning("weight push carries %d unknown tensors, e.g. %s", len(unknown), unknown[:3])
        async with self._lock:
            with torch.no_grad():
                for name in matched:
                    own[name].copy_(named_tensors[name].to(own[name].dtype))
        self.global_steps = global_steps
        self.weight_versions += 1
        return len(matched)

    async def get_weight_versions(self) -> int:
        return self.weight_versions

    # The trainer's lifecycle calls: nothing to release or resume on a host.
    async def wake_up(self, *args: Any, **kwargs: Any) -> None:
        return None

    async def sleep(self, *args: Any, **kwargs: Any) -> None:
        return None

    async def abort_all_requests(self, *args: Any, **kwargs: Any) -> dict:
        return {}

    async def resume_generation(self, *args: Any, **kwargs: Any) -> dict:
        return {}

    async def clear_kv_cache(self, *args: Any, **kwargs: Any) -> None:
        return None

    async def release_kv_cache(self, *args: Any, **kwargs: Any) -> None:
        return None

    async def resume_kv_cache(self, *args: Any, **kwargs: Any) -> None:
        return None

    async def start_profile(self, *args: Any, **kwargs: Any) -> None:
        return None

    async def stop_profile(self, *args: Any, **kwargs: Any) -> None:
        return None
