"""Generating the responses to score: sampling settings, prompt rendering and the back-end choice.

Prompts are the rows' chat messages rendered with the model's own chat template (``add_generation_prompt``),
as verl renders them for rollouts, so every back-end sees the same text. Back-ends live in their own modules
and are imported only when chosen: ``vllm`` (GPU, ``gen_vllm``) and ``hf`` (transformers ``generate``, CPU or
GPU, ``gen_hf``). ``auto`` takes vLLM when it is installed and a GPU is visible, else ``hf``.
"""

from __future__ import annotations

import importlib.util
import logging
from collections.abc import Sequence
from typing import Any, Protocol

from verl_ext.evaluation.generations import Problem
from verl_ext.evaluation.sampling import SamplingConfig

logger = logging.getLogger(__name__)

BACKENDS = ("auto", "vllm", "hf")


class Generator(Protocol):
    """``generate(prompts, cfg)`` -> for each rendered prompt, ``cfg.n`` response strings."""

    def generate(self, prompts: Sequence[str], cfg: SamplingConfig) -> list[list[str]]: ...


def render_prompts(tokenizer: Any, problems: Sequence[Problem], cfg: SamplingConfig) -> list[str]:
    """Each problem's chat messages through the tokenizer's chat template (a plain string is one user turn)."""
    if getattr(tokenizer, "chat_template", None) is None:
        raise ValueError("the model's tokenizer has no chat template; evaluation renders chat messages with it")
    out = []
    for p in problems:
        messages = [{"role": "user", "content": p.prompt}] if isinstance(p.prompt, str) else list(p.prompt)
        out.append(tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False,
                                                 **cfg.chat_template_kwargs))
    return out


def context_needed(tokenizer: Any, problems: Sequence[Problem], cfg: SamplingConfig,
                   max_position_embeddings: int | None = None) -> int:
    """vLLM's ``max_model_len`` for this evaluation: the longest rendered prompt plus ``max_new_tokens``.

    Left unset, vLLM reserves KV cache for the model's whole context (262k tokens for Qwen3-4B-Instruct-2507, more
    than a 40-48 GB GPU holds). Capped at the model's ``max_position_embeddings`` (then long answers are cut, as the
    hf back-end cuts them)."""
    prompts = render_prompts(tokenizer, problems, cfg)
    longest = max((len(tokenizer(p, add_special_tokens=False)["input_ids"]) for p in prompts), default=0)
    need = longest + cfg.max_new_tokens
    if max_position_embeddings and need > max_position_embeddings:
        logger.warning("longest prompt (%d tokens) + max_new_tokens (%d) exceeds the model's context (%d): "
                       "max_model_len=%d, long answers will be cut", longest, cfg.max_new_tokens,
                       max_position_embeddings, max_position_embeddings)
        return int(max_position_embeddings)
    return need


def choose_backend(name: str) -> str:
    if name not in BACKENDS:
        raise ValueError(f"backend {name!r}; expected one of {BACKENDS}")
    if name != "auto":
        return name
    has_vllm = importlib.util.find_spec("vllm") is not None
    return "vllm" if has_vllm and _cuda_available() else "hf"


def _cuda_available() -> bool:
    import torch

    return bool(torch.cuda.is_available())


def make_generator(backend: str, model_path: str, **kwargs: Any) -> tuple[Generator, Any]:
    """(generator, tokenizer) for the chosen back-end; ``kwargs`` go to its constructor."""
    backend = choose_backend(backend)
    logger.info("generation back-end: %s, model: %s", backend, model_path)
    if backend == "vllm":
        from verl_ext.evaluation.gen_vllm import VLLMGenerator

        gen = VLLMGenerator(model_path, **kwargs)
    else:
        from verl_ext.evaluation.gen_hf import HFGenerator

        gen = HFGenerator(model_path, **kwargs)
    return gen, gen.tokenizer


def generate_responses(problems: list[Problem], generator: Generator, tokenizer: Any,
                       cfg: SamplingConfig) -> list[Problem]:
    """Fill each problem's ``responses`` with ``cfg.n`` samples (replacing any it had)."""
    prompts = render_prompts(tokenizer, problems, cfg)
    outputs = generator.generate(prompts, cfg)
    if len(outputs) != len(problems) or any(len(o) != cfg.n for o in outputs):
        raise RuntimeError(f"back-end returned {len(outputs)} prompt results (expected {len(problems)}) or a "
                           f"wrong number of samples (expected {cfg.n} each)")
    for p, responses in zip(problems, outputs):
        p.responses = list(responses)
    return problems
