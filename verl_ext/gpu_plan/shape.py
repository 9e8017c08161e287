"""A decoder-only model's shape from its ``config.json``: what the memory formulas need, and its parameter count.

``resolve_config`` finds a ``config.json`` without network access: a file, a model folder, a hub name already in
the local Hugging Face cache, or a shape built into this package (``BUILTIN``), so the estimator runs on any laptop.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

# Qwen3-4B-Instruct-2507 (the launchers' default MODEL_PATH), the fields the estimator reads. Qwen3-4B (base and
# 2507 variants) share this shape: 36 layers, hidden 2560, 32 query / 8 key-value heads of 128 (so the attention
# width 4096 exceeds the hidden size), SwiGLU 9728, vocabulary 151,936, tied input/output embeddings, q/k RMSNorm,
# no attention bias; 2507 raised the context to 262,144 (rope_theta 5e6). 4.02e9 parameters by ``param_count``.
QWEN3_4B = {
    "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": 2560, "num_hidden_layers": 36,
    "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128, "intermediate_size": 9728,
    "vocab_size": 151936, "tie_word_embeddings": True, "attention_bias": False, "max_position_embeddings": 262144,
    "rope_theta": 5000000, "rms_norm_eps": 1e-06, "torch_dtype": "bfloat16",
}
BUILTIN = {"qwen3-4b": QWEN3_4B, "Qwen/Qwen3-4B-Instruct-2507": QWEN3_4B, "Qwen/Qwen3-4B": QWEN3_4B}


@dataclass(frozen=True)
class ModelShape:
    name: str
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    tied: bool
    qk_norm: bool  # Qwen3's per-head RMSNorm on q and k
    attention_bias: bool  # Qwen2's q/k/v biases

    @classmethod
    def from_config(cls, config: dict, name: str = "") -> ModelShape:
        text = config.get("text_config") or config  # multimodal configs nest the language model's
        heads = int(text["num_attention_heads"])
        model_type = str(text.get("model_type", ""))
        return cls(name=name or model_type, hidden=int(text["hidden_size"]), layers=int(text["num_hidden_layers"]),
                   heads=heads, kv_heads=int(text.get("num_key_value_heads") or heads),
                   head_dim=int(text.get("head_dim") or text["hidden_size"] // heads),
                   intermediate=int(text["intermediate_size"]), vocab=int(text["vocab_size"]),
                   tied=bool(config.get("tie_word_embeddings", text.get("tie_word_embeddings", False))),
                   qk_norm=model_type.startswith("qwen3"),
                   attention_bias=bool(text.get("attention_bias", model_type == "qwen2")))

    def layer_params(self) -> int:
        """q, k, v, o projections + SwiGLU (gate, up, down) + two RMSNorms (+ q/k norms, + q/k/v biases)."""
        q, kv = self.heads * self.head_dim, self.kv_heads * self.head_dim
        n = self.hidden * q + 2 * self.hidden * kv + q * self.hidden + 3 * self.hidden * self.intermediate
        n += 2 * self.hidden + (2 * self.head_dim if self.qk_norm else 0) + (q + 2 * kv if self.attention_bias else 0)
        return n

    def embedding_params(self) -> int:
        return self.vocab * self.hidden

    def param_count(self) -> int:
        """Embedding (+ a separate lm_head when untied) + layers + the final norm."""
        heads = 1 if self.tied else 2
        return heads * self.embedding_params() + self.layers * self.layer_params() + self.hidden


def _hf_cache_dirs() -> list[Path]:
    if os.environ.get("HF_HUB_CACHE"):
        return [Path(os.environ["HF_HUB_CACHE"])]
    home = Path(os.environ.get("HF_HOME") or Path.home() / ".cache" / "huggingface")
    return [home / "hub"]


def find_local_config(model: str) -> Path | None:
    """``config.json`` for a file, a folder or a cached hub name; None when none is on this machine."""
    path = Path(model).expanduser()
    if path.is_file():
        return path
    if (path / "config.json").is_file():
        return path / "config.json"
    if "/" in model and not model.startswith(("/", ".", "~")):
        for cache in _hf_cache_dirs():
            snapshots = cache / f"models--{model.replace('/', '--')}" / "snapshots"
            found = sorted(snapshots.glob("*/config.json"), key=lambda p: p.stat().st_mtime) if snapshots.is_dir() \
                else []
            if found:
                return found[-1]  # the newest snapshot
    return None


def resolve_config(model: str) -> tuple[dict, str]:
    """(config dict, where it came from); raises FileNotFoundError naming what was tried."""
    local = find_local_config(model)
    if local is not None:
        return json.loads(local.read_text(encoding="utf-8")), str(local)
    if model in BUILTIN:
        return dict(BUILTIN[model]), f"builtin:{model}"
    raise FileNotFoundError(f"no config.json for {model!r}: not a file, a model folder or a cached hub model here, "
                            f"and not a built-in shape ({', '.join(BUILTIN)})")
