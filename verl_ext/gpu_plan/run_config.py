"""The settings of a GPU run that decide its memory, read from a composed config.

Two inputs: the Hydra overrides a launcher prints (``FORCE_GPU=1 DRY_RUN=1 bash scripts/run_*.sh``, one per line),
composed here with the recipe's config exactly as ``recipe.heapa.main_heapa`` composes them; or a composed config
saved as YAML (a run's ``.hydra/config.yaml``). Composing points Hydra at verl's config folder as a file path rather
than ``pkg://verl.trainer.config``: the package form imports verl (and torch), ~20 s on a small machine, for YAML
it only reads.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

ARF = "actor_rollout_ref"
PACKED_ATTENTION = ("flash_attention_2", "flash_attention_3", "sdpa")  # see recipe/heapa/ops/gpu_fit.py
MASKED_ATTENTION = ("sdpa", "eager")  # build a dense (rows, 1, L, L) mask; flash attention needs none


def _config_dirs() -> tuple[str, str]:
    recipe = importlib.util.find_spec("recipe.heapa")
    verl = importlib.util.find_spec("verl")  # locates the package without importing it
    if recipe is None or verl is None:
        raise RuntimeError("verl and this project's recipe package must be installed to compose a launcher config")
    return (str(Path(recipe.submodule_search_locations[0]) / "config"),
            str(Path(verl.submodule_search_locations[0]) / "trainer" / "config"))


def compose_overrides(overrides: list[str]) -> DictConfig:
    from hydra import compose, initialize_config_dir

    recipe_dir, verl_dir = _config_dirs()
    with initialize_config_dir(config_dir=recipe_dir, version_base=None):
        return compose(config_name="heapa_trainer", overrides=[f"hydra.searchpath=[file://{verl_dir}]", *overrides])


def read_overrides(text: str) -> list[str]:
    """One override per line, as DRY_RUN prints them; blank lines and ``#`` comments are skipped."""
    return [line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def _get(cfg: DictConfig, key: str, default=None):
    # throw_on_resolution_failure=False: ${hydra:...} and ${oc.env:...} do not resolve outside a running app
    value = OmegaConf.select(cfg, key, default=default, throw_on_resolution_failure=False)
    return default if value is None else value


@dataclass(frozen=True)
class RunShape:
    """What the formulas of ``verl_ext.gpu_plan.estimate`` read from a config."""
    method: str
    n_gpus: int
    attn: str
    packed: bool  # use_remove_padding
    grad_checkpointing: bool
    max_prompt: int
    max_response: int
    update_tokens: int  # ppo_max_token_len_per_gpu
    logprob_tokens: int  # rollout.log_prob_max_token_len_per_gpu (the actor's old-log-prob pass)
    ref_tokens: int
    gpu_memory_utilization: float
    rollout_tp: int
    max_model_len: int
    max_num_batched_tokens: int
    max_num_seqs: int
    temperature: float
    update_entropy: bool  # actor.calculate_entropy or entropy_coeff != 0
    entropy_chunking: bool
    entropy_chunk: int
    param_offload: bool
    optimizer_offload: bool
    needs_ref: bool  # use_kl_loss or use_kl_in_reward
    hive_probe_tokens: int  # 0: no HIVE probe

    @property
    def masked(self) -> bool:
        return self.attn in MASKED_ATTENTION


def run_shape(cfg: DictConfig, method: str | None = None) -> RunShape:
    a, r, m = f"{ARF}.actor", f"{ARF}.rollout", f"{ARF}.model"
    attn = str(_get(cfg, f"{m}.override_config.attn_implementation", "flash_attention_2"))  # verl's default
    update = int(_get(cfg, f"{a}.ppo_max_token_len_per_gpu", 16384))
    prompt, response = int(_get(cfg, "data.max_prompt_length", 512)), int(_get(cfg, "data.max_response_length", 512))
    hive = _get(cfg, "heapa.selection.name", "") == "hive" and bool(_get(cfg, "heapa.hive.verify", False))
    return RunShape(
        method=method or str(_get(cfg, "method", "") or _get(cfg, "heapa.method", "") or "?"),
        n_gpus=int(_get(cfg, "trainer.nnodes", 1)) * int(_get(cfg, "trainer.n_gpus_per_node", 8)),
        attn=attn, packed=bool(_get(cfg, f"{m}.use_remove_padding", False)),
        grad_checkpointing=bool(_get(cfg, f"{m}.enable_gradient_checkpointing", False)),
        max_prompt=prompt, max_response=response, update_tokens=update,
        logprob_tokens=int(_get(cfg, f"{r}.log_prob_max_token_len_per_gpu", update)),
        ref_tokens=int(_get(cfg, f"{ARF}.ref.log_prob_max_token_len_per_gpu", update)),
        gpu_memory_utilization=float(_get(cfg, f"{r}.gpu_memory_utilization", 0.5)),
        rollout_tp=int(_get(cfg, f"{r}.tensor_model_parallel_size", 1)),
        max_model_len=int(_get(cfg, f"{r}.max_model_len", prompt + response)),  # gpu_fit's rule when unset
        max_num_batched_tokens=int(_get(cfg, f"{r}.max_num_batched_tokens", 8192)),
        max_num_seqs=int(_get(cfg, f"{r}.max_num_seqs", 256)),
        temperature=float(_get(cfg, f"{r}.temperature", 1.0)),
        update_entropy=bool(_get(cfg, f"{a}.calculate_entropy", False))
        or float(_get(cfg, f"{a}.entropy_coeff", 0.0)) != 0.0,
        entropy_chunking=bool(_get(cfg, f"{a}.entropy_from_logits_with_chunking", False)),
        entropy_chunk=int(_get(cfg, f"{a}.entropy_from_logits_chunk_size", 2048)),
        param_offload=bool(_get(cfg, f"{a}.fsdp_config.param_offload", False)),
        optimizer_offload=bool(_get(cfg, f"{a}.fsdp_config.optimizer_offload", False)),
        needs_ref=bool(_get(cfg, f"{a}.use_kl_loss", False)) or bool(_get(cfg, "algorithm.use_kl_in_reward", False)),
        hive_probe_tokens=int(_get(cfg, "heapa.hive.probe_max_tokens", 4096)) if hive else 0,
    )


def load(overrides_text: str | None = None, yaml_path: str | None = None) -> RunShape:
    if yaml_path:
        return run_shape(OmegaConf.load(yaml_path))
    args = read_overrides(overrides_text or "")
    method = next((a.split("=", 1)[1] for a in args if a.startswith("method=")), None)
    return run_shape(compose_overrides(args), method)
