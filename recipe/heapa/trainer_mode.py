"""``trainer.v1.trainer_mode``: which of verl's trainers the recipe runs with a run's settings, checked before Ray
starts so that a setting the asynchronous trainers do not run fails at once, naming its key (docs/async.md).

- ``sync`` (the default) runs everything;
- ``colocate_async`` and ``separate_async`` run the pool presets (``grpo``, ``dapo``, ``ps``, ``heapa_*`` without
  the staged rollout), one weight sync per sampled batch;
- ``separate_async`` also needs a checkpoint engine that reaches other processes (``naive`` hands weights over
  inside the trainer's workers): ``ray_store`` on the CPU backend (``verl_ext/cpu/checkpoint_engine.py``),
  ``nccl`` on GPUs; a rollout pool of its own (``actor_rollout_ref.rollout.nnodes`` x ``n_gpus_per_node``) that a
  local CPU cluster has the logical GPUs for; and ``ppo_mini_batch_size == train_batch_size`` (verl's rule:
  ``train_batch_size == parameter_sync_step x ppo_mini_batch_size``).
"""

from __future__ import annotations

from omegaconf import DictConfig, OmegaConf

from recipe.heapa.settings import HeapaConfigError

MODES = ("sync", "colocate_async", "separate_async")
CPU_ENGINE = ("actor_rollout_ref.rollout.checkpoint_engine.backend=ray_store "
              "actor_rollout_ref.rollout.checkpoint_engine.custom_backend_module=verl_ext.cpu.checkpoint_engine")

# What the asynchronous trainers do not run yet, and why: (setting, is it on, reason)
ASYNC_UNSUPPORTED = (
    ("heapa.ar3po.enabled", lambda s: s.ar3po.enabled,
     "AR3PO's staged rollout plans each group within one step; a partial rollout resumed a step later is not"),
    ("heapa.reinforce_ada.enabled", lambda s: s.reinforce_ada.enabled,
     "Reinforce-Ada's rounds run in the same staged rollout as AR3PO"),
    ("heapa.allocation.enabled", lambda s: s.allocation.enabled,
     "the allocator's uneven groups have not been run through the asynchronous buffer"),
    ("heapa.hive.verify", lambda s: s.selection_name == "hive" and s.hive.verify,
     "HIVE's probe runs the actor inside selection, which the asynchronous trainer calls while the rollout runs"),
)


def check_trainer_mode(config: DictConfig, settings) -> None:
    """Refuse, naming the key, what the run's mode does not run. Called after ``attach_to_running_cluster``: a run
    that attaches has no ``ray_init.num_gpus`` left (the cluster's nodes declared their own)."""
    mode = OmegaConf.select(config, "trainer.v1.trainer_mode", default="sync")
    if mode not in MODES:
        raise HeapaConfigError(f"trainer.v1.trainer_mode={mode}: verl's trainer modes are {', '.join(MODES)}")
    if mode == "sync":
        return
    sync_steps = OmegaConf.select(config, f"trainer.v1.{mode}.parameter_sync_step", default=1)
    if sync_steps != 1:
        raise HeapaConfigError(f"trainer.v1.{mode}.parameter_sync_step={sync_steps}: the heapa recipe's step reads "
                               "one sampled batch per weight sync; set it to 1")
    for key, enabled, why in ASYNC_UNSUPPORTED:
        if enabled(settings):
            raise HeapaConfigError(f"{key} with trainer.v1.trainer_mode={mode}: {why}. Turn it off, or use "
                                   "trainer.v1.trainer_mode=sync")
    if mode == "separate_async":
        _check_separate(config, settings)


def _check_separate(config: DictConfig, settings) -> None:
    rollout = config.actor_rollout_ref.rollout
    backend = OmegaConf.select(rollout, "checkpoint_engine.backend", default="naive")
    if backend == "naive":
        fix = CPU_ENGINE if settings.platform == "cpu" else "actor_rollout_ref.rollout.checkpoint_engine.backend=nccl"
        raise HeapaConfigError(
            "actor_rollout_ref.rollout.checkpoint_engine.backend=naive with trainer.v1.trainer_mode=separate_async: "
            "the standalone rollout replicas live in other processes, which naive does not reach; set " + fix)
    batch, mini = int(config.data.train_batch_size), int(config.actor_rollout_ref.actor.ppo_mini_batch_size)
    if batch != mini:
        raise HeapaConfigError(
            f"actor_rollout_ref.actor.ppo_mini_batch_size={mini} with trainer.v1.trainer_mode=separate_async: verl "
            f"needs train_batch_size = parameter_sync_step (1) x ppo_mini_batch_size; set it to data.train_batch_size"
            f"={batch}")
    nodes, per_node = int(rollout.get("nnodes", 0) or 0), int(rollout.get("n_gpus_per_node", 0) or 0)
    if nodes <= 0 or per_node <= 0:
        raise HeapaConfigError(
            f"actor_rollout_ref.rollout.nnodes={nodes}, n_gpus_per_node={per_node} with "
            "trainer.v1.trainer_mode=separate_async: the rollout needs a pool of its own; set both (e.g. 1 and 1)")
    declared = OmegaConf.select(config, "ray_kwargs.ray_init.num_gpus", default=None)
    needed = int(config.trainer.nnodes) * int(config.trainer.n_gpus_per_node) + nodes * per_node
    if declared is not None and int(declared) < needed:
        # a local cluster this short of (logical) GPUs does not fail: its placement groups wait for ever
        raise HeapaConfigError(
            f"ray_kwargs.ray_init.num_gpus={declared} with trainer.v1.trainer_mode=separate_async: the trainer "
            f"(trainer.nnodes x n_gpus_per_node) and the rollout (actor_rollout_ref.rollout.nnodes x "
            f"n_gpus_per_node) need {needed}; set it to {needed}")
