"""Make a GPU run's config fit what is installed and what the job needs, before Ray starts.

Two settings of verl 0.9.1 stop a first GPU run before its first step when left at verl's defaults:

- **Attention.** verl builds the actor and reference models with ``attn_implementation=flash_attention_2`` unless
  ``actor_rollout_ref.model.override_config.attn_implementation`` says otherwise (``workers/config/model.py``), and
  transformers raises ``ImportError: FlashAttention2 has been toggled on, but ...`` at model load when the
  ``flash-attn`` package is missing. Neither verl's ``vllm`` extra nor this project's ``gpu`` extra installs it
  (PyPI has no binary wheel; it compiles against the CUDA toolkit for a long time). So when the setting is left to
  verl's default and ``flash_attn`` is not importable, the run uses PyTorch's ``sdpa`` and keeps
  ``use_remove_padding`` (verl's default, True): verl's packed path passes ``attention_mask=None``, ``use_cache=False``
  and per-sequence position ids, and transformers (5.x ``masking_utils.find_packed_sequence_indices``) turns those
  into a block-diagonal causal mask for sdpa, so packed sdpa gives the padded path's log-probs
  (``tests/integration/gpu_plan/test_packed_sdpa.py``: verl's own input/output code on a tiny Qwen3, fp32, max
  difference ~5e-7). Padded rows are the memory risk: verl pads every row of a micro-batch to its longest, so one
  of 24k real tokens becomes rows x ~22k positions of 151,936-wide logits (``python -m verl_ext.gpu_plan``). It says
  how to get the faster option. An explicit ``flash_attention_2`` without the package is an error naming the key;
  ``eager`` runs padded (not checked packed).
- **vLLM's context.** With ``rollout.max_model_len`` unset, verl sizes vLLM for the model's
  ``max_position_embeddings`` (262,144 tokens for Qwen3-4B-Instruct-2507: ~36 GiB of KV cache for one sequence,
  which fails at start-up on 40-48 GB GPUs). A rollout never needs more than prompt + response, so that is the
  default here; a smaller explicit value is an error naming both keys.

The CPU platform has its own settings (``config/platform/cpu.yaml``); this runs for ``platform=gpu`` only.
"""

from __future__ import annotations

import importlib.util
import logging

from omegaconf import DictConfig, open_dict

logger = logging.getLogger(__name__)

ATTN_KEY = "actor_rollout_ref.model.override_config.attn_implementation"
REMOVE_PADDING_KEY = "actor_rollout_ref.model.use_remove_padding"
MAX_MODEL_LEN_KEY = "actor_rollout_ref.rollout.max_model_len"
VERL_DEFAULT_ATTN = "flash_attention_2"
# attention implementations that need a package beyond torch, and the module that must import
NEEDS_MODULE = {"flash_attention_2": "flash_attn", "flash_attention_3": "flash_attn_interface"}
# implementations that separate the sequences of a packed (remove-padding) batch: flash attention by cu_seqlens,
# sdpa by the block-diagonal mask transformers derives from the packed position ids
PACKED_OK = frozenset(NEEDS_MODULE) | {"sdpa"}


def has_module(name: str) -> bool:
    """Importable here (the driver's environment is the workers' on a homogeneous cluster)."""
    return importlib.util.find_spec(name) is not None


def sdpa_packs() -> bool:
    """transformers derives a block-diagonal mask from packed position ids (``find_packed_sequence_indices``, 4.5x+;
    the GPU set pins 5.9): without it a packed sdpa batch would attend across its sequences."""
    import importlib

    try:
        masking = importlib.import_module("transformers.masking_utils")
    except ImportError:
        return False
    return hasattr(masking, "find_packed_sequence_indices")


def fit_attention(config: DictConfig, available=has_module, packs=sdpa_packs) -> str:
    """Settle the attention implementation and ``use_remove_padding``; returns the implementation used."""
    model = config.actor_rollout_ref.model
    override = model.get("override_config") or {}
    explicit = override.get("attn_implementation")
    impl = explicit or VERL_DEFAULT_ATTN
    module = NEEDS_MODULE.get(impl)
    if module is not None and not available(module):
        if explicit:
            raise ValueError(
                f"{ATTN_KEY}={impl} needs the '{module}' package, which is not installed in this environment: "
                f"install it (pip install flash-attn --no-build-isolation, with the CUDA toolkit that matches torch) "
                f"or set {ATTN_KEY}=sdpa")
        logger.warning("flash-attn is not installed: the actor and reference models use PyTorch's sdpa attention "
                       "on packed sequences (%s kept; slower than flash attention for long responses; for the "
                       "faster path install flash-attn, e.g. FLASH_ATTN=1 bash scripts/setup_env.sh, and rerun)",
                       REMOVE_PADDING_KEY)
        impl = "sdpa"
    with open_dict(config):
        if model.get("override_config") is None:
            model.override_config = {}
        model.override_config.attn_implementation = impl
        if impl == "sdpa" and model.get("use_remove_padding", False) and not packs():
            logger.warning("this transformers cannot separate a packed sdpa batch: setting %s=False (padded rows; "
                           "see python -m verl_ext.gpu_plan for their memory)", REMOVE_PADDING_KEY)
            model.use_remove_padding = False
        if impl not in PACKED_OK and model.get("use_remove_padding", False):
            if explicit:
                logger.warning("%s=%s cannot separate a packed batch: setting %s=False", ATTN_KEY, impl,
                               REMOVE_PADDING_KEY)
            model.use_remove_padding = False
    return impl


def fit_context(config: DictConfig) -> int:
    """``rollout.max_model_len`` = prompt + response length unless set; an explicit value must hold both."""
    need = int(config.data.max_prompt_length) + int(config.data.max_response_length)
    rollout = config.actor_rollout_ref.rollout
    current = rollout.get("max_model_len")
    if current is None:
        with open_dict(config):
            rollout.max_model_len = need
        return need
    if int(current) < need:
        raise ValueError(f"{MAX_MODEL_LEN_KEY}={current} is smaller than data.max_prompt_length + "
                         f"data.max_response_length = {need}: raise it or shorten the lengths")
    return int(current)


def fit_gpu(config: DictConfig, available=has_module) -> dict[str, object]:
    """Apply both rules (``platform=gpu``); returns what was chosen, for the start-up log."""
    chosen = {"attn_implementation": fit_attention(config, available),
              "use_remove_padding": bool(config.actor_rollout_ref.model.get("use_remove_padding", False)),
              "max_model_len": fit_context(config)}
    logger.info("GPU settings: %s", chosen)
    return chosen
