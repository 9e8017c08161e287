"""vLLM back-end (GPU): offline ``vllm.LLM`` over the rendered prompts, ``n`` samples per prompt.

Imported only when chosen; without vLLM installed it raises naming the install command. Prompts are sent in
chunks so progress can be logged; vLLM batches within a chunk. Not exercised by this project's CPU tests.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from verl_ext.evaluation.sampling import SamplingConfig
from verl_ext.evaluation.scoring import Progress

logger = logging.getLogger(__name__)


class VLLMGenerator:
    def __init__(self, model_path: str, tensor_parallel_size: int = 1, gpu_memory_utilization: float = 0.85,
                 max_model_len: int | None = None, dtype: str = "auto", trust_remote_code: bool = False,
                 chunk_size: int = 1024, seed: int = 0, **_: Any) -> None:
        try:
            from vllm import LLM
        except ImportError as err:
            raise ImportError("the vllm back-end needs vLLM: pip install -e '.[gpu]' (or --backend hf)") from err
        if chunk_size < 1:
            raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
        self.llm = LLM(model=model_path, tensor_parallel_size=tensor_parallel_size,
                       gpu_memory_utilization=gpu_memory_utilization, max_model_len=max_model_len, dtype=dtype,
                       trust_remote_code=trust_remote_code, seed=seed)
        self.tokenizer = self.llm.get_tokenizer()
        self.chunk_size = int(chunk_size)

    def generate(self, prompts: Sequence[str], cfg: SamplingConfig) -> list[list[str]]:
        from vllm import SamplingParams

        params = SamplingParams(n=cfg.n, temperature=cfg.temperature, top_p=cfg.top_p, top_k=cfg.top_k,
                                max_tokens=cfg.max_new_tokens, seed=cfg.seed)
        out: list[list[str]] = []
        progress = Progress("generating (vllm)", len(prompts))
        for start in range(0, len(prompts), self.chunk_size):
            chunk = list(prompts[start:start + self.chunk_size])
            results = self.llm.generate(chunk, params, use_tqdm=False)
            out.extend([c.text for c in r.outputs] for r in results)
            progress.advance(len(chunk))
        return out
