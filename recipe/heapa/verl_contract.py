"""Every verl 0.9.1 internal the recipe relies on, in one place, and the two rules it re-states.

verl's documented extension points (trainer class, dataset, reward manager, agent-loop manager, platform and
rollout registries) do not cover what the recipe needs: it overrides private methods of ``PPOTrainerSync`` and of
the agent-loop worker, and reads private state of the replay buffer and the worker group. A verl upgrade that
renames or re-signs any of them must fail loudly and at once, naming the symbol, not halfway through a run:
``PRIVATE_NAMES`` (and ``NON_PRIVATE_NAMES``, internals without a leading underscore) list each with the
parameters the recipe calls it with. ``tests/integration/recipe/test_verl_contract.py`` checks them against the
installed verl; ``test_verl_contract_coverage.py`` finds every private verl name the code uses and fails on one
missing here, and on any verl attribute the code reassigns at run time.

Three pieces of verl logic the recipe needs are re-stated here, next to that list: ``gen_batch_size`` (the
loader's batch size, 1 when prompts are refilled one at a time; ``record_gen_batch_size`` leaves the config as
verl's loader does), ``set_training_horizon`` (steps and the optimizer's schedule horizon) and
``replay_buffer_filter_kwargs`` (what verl hands its own replay buffer about
group filtering, and not a custom one); the same test runs verl's own ``_init_dataloader`` and
``_build_replay_buffer`` on the same configurations and fails when they drift apart.
"""

from __future__ import annotations

import importlib
import inspect
from dataclasses import dataclass

from omegaconf import OmegaConf, open_dict


@dataclass(frozen=True)
class VerlName:
    """``module:qualname``; ``params``: the parameter names the recipe passes (None: not called, only read);
    ``attr``: an instance attribute set in the class's ``__init__`` (checked in its source)."""

    module: str
    qualname: str
    params: tuple[str, ...] | None = None
    attr: str | None = None
    used_by: str = ""

    @property
    def symbol(self) -> str:
        return f"{self.module}.{self.qualname}" + (f".{self.attr}" if self.attr else "")


TRAINER = "verl.trainer.ppo.v1.trainer_sync"
BASE = "verl.trainer.ppo.v1.trainer_base"
BUFFER = "verl.trainer.ppo.v1.replay_buffer"
AGENT_TQ = "verl.trainer.ppo.v1.agent_loop_tq"
AGENT = "verl.experimental.agent_loop.agent_loop"
WORKER_TQ = "AgentLoopWorkerTQ.__ray_actor_class__"  # verl wraps the class with ray.remote
REPLICA = "verl.workers.rollout.replica"
PRIVATE_NAMES: tuple[VerlName, ...] = (
    # the trainer's hooks (trainer.py, trainer_setup.py, ops/trainer_checkpoints.py)
    VerlName(TRAINER, "PPOTrainerSync._build_replay_buffer", ("self",), used_by="trainer_setup: evictions"),
    VerlName(BASE, "PPOTrainer._resolve_filter_groups_metric", ("self",), used_by="replay_buffer_filter_kwargs"),
    VerlName(TRAINER, "PPOTrainerSync._init_dataloader", ("self",), used_by="trainer_setup: the pool as dataset"),
    VerlName(TRAINER, "PPOTrainerSync._balance_batch", ("self", "batch", "metrics", "logging_prefix",
                                                        "keep_minibatch"), used_by="trainer: the view, AR3PO reuse"),
    VerlName(TRAINER, "PPOTrainerSync._compute_advantage", ("self", "batch", "metrics"),
             used_by="trainer: AR3PO weights, diag/*"),
    VerlName(TRAINER, "PPOTrainerSync._update_actor", ("self", "batch", "metrics"), used_by="trainer: the plan"),
    VerlName(BASE, "PPOTrainer._get_required_batch_multiple", ("self", "dp_size"),
             used_by="trainer: AR3PO's padding (step/update_plan.py)"),
    VerlName(BASE, "PPOTrainer._validate", ("self",), used_by="trainer: the watchdog's validation stage"),
    VerlName(BASE, "PPOTrainer._fetch_one_gen_batch", ("self",),
             used_by="trainer: heapa.allocation's group sizes as each row's __rollout_n__"),
    VerlName(TRAINER, "PPOTrainerSync._save_checkpoint", ("self",), used_by="trainer_checkpoints: pool, state"),
    VerlName(TRAINER, "PPOTrainerSync._load_checkpoint", ("self",), used_by="trainer_checkpoints: pool, state"),
    VerlName("verl.workers.engine_workers", "TrainingWorker.train_mini_batch", ("self", "data"),
             used_by="update_plan: reads extra_info mini_batch_size (and global_batch_size, for the loss)"),
    # the replay buffer (step/replay_buffer.py)
    VerlName(BUFFER, "ReplayBuffer._clear_groups", ("self", "partition_id", "uids"),
             used_by="replay_buffer: evicted groups"),
    VerlName(BUFFER, "ReplayBuffer.__init__", attr="partitions", used_by="replay_buffer"),
    VerlName(BUFFER, "ReplayBuffer.__init__", attr="finished_keys", used_by="replay_buffer"),
    # the actor worker group (actor_dp_size)
    VerlName("verl.single_controller.base.worker", "Worker._query_dispatch_info", ("self", "mesh_name"),
             used_by="actor_dp_size"),
    VerlName("verl.single_controller.base.worker_group", "WorkerGroup.__init__", attr="_dispatch_info",
             used_by="actor_dp_size"),
    VerlName("verl.single_controller.base.decorator", "dispatch_lazy_compute_data_proto",
             ("mesh_name", "worker_group"), used_by="actor_dp_size: the same lookup (max rank + 1)"),
    # AR3PO's staged agent loop (verl_ext/adapters/ar3po_agent_loop.py)
    VerlName(AGENT_TQ, f"{WORKER_TQ}._run_prompt", ("self", "prompt", "sampling_params", "trajectory", "trace"),
             used_by="ar3po_agent_loop: one prompt's stages"),
    VerlName(AGENT_TQ, f"{WORKER_TQ}._agent_loop_postprocess", ("self", "output", "validate"),
             used_by="ar3po_agent_loop: each trajectory's reward, as it finishes"),
    VerlName(AGENT, "AgentLoopWorker._run_agent_loop", ("self", "sampling_params", "trajectory"),
             used_by="ar3po_agent_loop: one session (agent_name, trace, session_id and the prompt by keyword)"),
    # the CPU rollout (verl_ext/cpu)
    VerlName("verl.workers.rollout.base", "_ROLLOUT_REGISTRY", used_by="verl_ext.cpu: the hf rollout registered "
             "(verl has no register function for BaseRollout)"),
    VerlName(REPLICA, "RolloutReplica.__init__", attr="_server_handle", used_by="cpu/hf_rollout: HFReplica"),
    VerlName(REPLICA, "RolloutReplica.__init__", attr="_server_address", used_by="cpu/hf_rollout: HFReplica"),
)

# Internals without a leading underscore: set by verl in one method and read by the recipe elsewhere, or passed
# to a constructor verl does not document.
NON_PRIVATE_NAMES: tuple[VerlName, ...] = (
    VerlName("verl.workers.rollout.utils", "ensure_async_iterator", ("iterable",),
             used_by="cpu/hf_rollout: a weight stream, plain or async"),
    VerlName(BASE, "PPOTrainer.__init__", attr="parameter_sync_step", used_by="set_training_horizon"),
    VerlName(BASE, "PPOTrainer.__init__", attr="trainer_mode", used_by="gen_batch_size, trainer_setup"),
    VerlName(BASE, "PPOTrainer._init_dataloader", attr="train_dataloader_it", used_by="trainer: resume"),
    VerlName(BASE, "PPOTrainer.fit", attr="timing_raw", used_by="trainer: AR3PO and diagnostics timers in hooks"),
    VerlName(BASE, "PPOTrainer.fit", attr="logger", used_by="trainer: the metrics history logged again"),
    VerlName("verl.utils.tracking", "Tracking.log", ("self", "data", "step", "backend"),
             used_by="ops/run_files: MetricsHistory.replay (the file backend only)"),
    VerlName(BUFFER, "ReplayBuffer.__init__", ("self", "trainer_mode", "trainer_config", "max_off_policy_threshold",
                                               "max_off_policy_strategy", "sampler_kwargs", "poll_interval"),
             used_by="replay_buffer: heapa.poll_interval_s through the constructor"),
    VerlName(AGENT_TQ, "AgentLoopManagerTQ.__init__", attr="agent_loop_workers_class",
             used_by="ar3po_agent_loop: the staged workers"),
)


def _resolve(name: VerlName):
    obj = importlib.import_module(name.module)
    for part in name.qualname.split("."):
        obj = getattr(obj, part)
    return obj


def check(name: VerlName) -> str | None:
    """None when the installed verl still has ``name`` as the recipe uses it, else what changed."""
    try:
        obj = _resolve(name)
    except (ImportError, AttributeError) as err:
        return f"{name.symbol}: gone from the installed verl ({err}); used by {name.used_by}"
    if name.attr is not None:
        source = inspect.getsource(obj)
        if f"self.{name.attr} =" not in source and f"self.{name.attr}:" not in source:
            return f"{name.symbol}: {name.qualname} no longer sets self.{name.attr}; used by {name.used_by}"
        return None
    if name.params is not None:
        got = tuple(inspect.signature(obj).parameters)
        if got[:len(name.params)] != name.params:
            return f"{name.symbol}: parameters {got}, the recipe passes {name.params}; used by {name.used_by}"
    return None


def problems() -> list[str]:
    return [p for p in map(check, PRIVATE_NAMES + NON_PRIVATE_NAMES) if p is not None]


def actor_dp_size(worker_group) -> int:
    """The actor's data-parallel size, looked up as verl's own dispatch does (``_dispatch_info``)."""
    if "actor" not in worker_group._dispatch_info:
        worker_group._dispatch_info["actor"] = worker_group._query_dispatch_info("actor")
    return max(worker_group._dispatch_info["actor"]) + 1


def exact_refill(config, trainer_mode: str) -> bool:
    """verl 0.9.1's ``_init_dataloader`` rule: DAPO's group filtering, failed-group refills and the async trainers
    refill one prompt at a time."""
    filter_groups = config.algorithm.get("filter_groups", None)
    dapo = bool(filter_groups is not None and filter_groups.get("enable", False))
    refill = bool(config.trainer.v1.sampler.get("sync_refill_failed_groups", False))
    return dapo or refill or trainer_mode != "sync"


def gen_batch_size(config, trainer_mode: str) -> int:
    """Prompts per loader batch, as verl 0.9.1's ``_init_dataloader`` decides it (1 under ``exact_refill``)."""
    if exact_refill(config, trainer_mode):
        return 1
    return int(config.data.get("gen_batch_size", None) or config.data.train_batch_size)


def record_gen_batch_size(config, trainer_mode: str) -> None:
    """Write ``data.gen_batch_size = 1`` under ``exact_refill``, as verl's ``_init_dataloader`` does: verl reads
    it back later (the async trainers' warm-up batches), so the recipe's loader must leave the same config."""
    if exact_refill(config, trainer_mode):
        with open_dict(config):
            config.data.gen_batch_size = 1


def set_training_horizon(trainer, num_seeds: int) -> None:
    """verl's step count and optimizer horizon (steps x ``parameter_sync_step`` local updates) for a dataset of
    ``num_seeds``; with a growing pool ``trainer.total_training_steps`` should be set explicitly."""
    config = trainer.config
    # the one deviation from verl: at least one step per epoch (a pool smaller than a batch still trains, since
    # reinsertion serves it again; verl's static dataset would give 0 steps)
    trainer.steps_per_epoch = max(1, num_seeds // config.data.train_batch_size)
    total = trainer.steps_per_epoch * config.trainer.total_epochs
    if config.trainer.total_training_steps is not None:
        total = config.trainer.total_training_steps
    trainer.total_training_steps = total
    optim_total = total * trainer.parameter_sync_step
    with open_dict(config):
        if OmegaConf.select(config, "actor_rollout_ref.actor.optim"):
            config.actor_rollout_ref.actor.optim.total_training_steps = optim_total
        if OmegaConf.select(config, "critic.optim"):
            config.critic.optim.total_training_steps = optim_total


FILTER_KWARGS = ("filter_groups_metric", "sync_refill_failed_groups", "train_batch_size", "gen_batch_size",
                 "max_inflight_gen_batches")


def replay_buffer_filter_kwargs(trainer) -> dict:
    """The group-filtering arguments verl 0.9.1's ``_build_replay_buffer`` gives its own ``ReplayBuffer`` (sync) or
    ``ReplayBufferAsync`` (the asynchronous modes: the first two only), and not a
    ``trainer.v1.sampler.custom_sampler``: the recipe's buffer receives them through ``sampler_kwargs``."""
    sampler = trainer.config.trainer.v1.sampler
    metric = trainer._resolve_filter_groups_metric()
    refill = bool(sampler.get("sync_refill_failed_groups", False))
    if trainer.trainer_mode != "sync":
        return {"filter_groups_metric": metric, "sync_refill_failed_groups": refill}
    train_batch_size = trainer.config.data.train_batch_size
    filter_groups = trainer.config.algorithm.get("filter_groups", None)
    return {
        "filter_groups_metric": metric,
        "sync_refill_failed_groups": refill,
        "train_batch_size": train_batch_size,
        "gen_batch_size": 1 if metric is not None or refill
        else (trainer.config.data.get("gen_batch_size", None) or train_batch_size),
        "max_inflight_gen_batches": filter_groups.get("max_inflight_gen_batches", 1) if metric is not None else 1,
    }
