"""The Hydra overrides that put verl's real trainer on the CPU backend (with ``VERL_PLATFORM=cpu``).

``python -m verl_ext.cpu.overrides`` prints them one per line, so plain verl users can write::

    VERL_PLATFORM=cpu python -m verl.trainer.main_ppo $(python -m verl_ext.cpu.overrides) data.train_files=...

The recipe's ``cpu`` preset (``recipe/heapa/config/platform/cpu.yaml``) mirrors this list; a test keeps them equal.
Each line says why it is needed (verl 0.9.1 facts, ``shared/spec/verl.md``).
"""

from __future__ import annotations

import sys

CPU_OVERRIDES: tuple[str, ...] = (
    "trainer.device=cpu",
    # verl's placement groups want accelerators: advertise one logical GPU and enough logical CPUs
    # (with the real 2 cores the bundle {'GPU':1,'CPU':3} never fits and the run hangs silently).
    "trainer.n_gpus_per_node=1",
    "trainer.nnodes=1",
    "+ray_kwargs.ray_init.num_gpus=1",
    "ray_kwargs.ray_init.num_cpus=16",
    # no dashboard process on a host run: ~2 s of each start on 2 cores and ~120 MB (=true brings it back)
    "+ray_kwargs.ray_init.include_dashboard=False",
    # FSDP1 passes an integer device id; FSDP2 works on host tensors. No flash-attn on CPU.
    "actor_rollout_ref.actor.strategy=fsdp2",
    "actor_rollout_ref.ref.strategy=fsdp2",
    "+actor_rollout_ref.model.override_config.attn_implementation=sdpa",
    "actor_rollout_ref.model.use_remove_padding=False",
    "actor_rollout_ref.model.enable_gradient_checkpointing=False",
    # fp32 end to end (no bf16 on most CPUs; keeps rollout and actor log-probs comparable), no torch.compile
    "+actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype=fp32",
    "+actor_rollout_ref.ref.fsdp_config.mixed_precision.param_dtype=fp32",
    "actor_rollout_ref.rollout.dtype=float32",
    "actor_rollout_ref.actor.fsdp_config.use_torch_compile=False",
    "actor_rollout_ref.ref.fsdp_config.use_torch_compile=False",
    "actor_rollout_ref.actor.fsdp_config.param_offload=False",
    "actor_rollout_ref.actor.fsdp_config.optimizer_offload=False",
    "actor_rollout_ref.ref.fsdp_config.param_offload=False",
    # the hf rollout (verl_ext.cpu.hf_rollout): one HF generate server, weights pushed in-process
    "actor_rollout_ref.rollout.name=hf",
    "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
    "actor_rollout_ref.rollout.checkpoint_engine.backend=naive",
    "actor_rollout_ref.rollout.calculate_log_probs=True",
    "actor_rollout_ref.rollout.agent.num_workers=1",
    "reward.num_workers=1",
    "transfer_queue.backend.SimpleStorage.num_data_storage_units=1",
    "data.dataloader_num_workers=0",
)


def main() -> int:
    sys.stdout.write("\n".join(CPU_OVERRIDES) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
