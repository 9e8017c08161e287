"""Entry point: ``python -m recipe.heapa.main_heapa method=heapa_dapo platform=gpu data.train_files=...``.

Composes verl's ``ppo_trainer`` config with the recipe's (``config/heapa_trainer.yaml``), then, in the driver and
before Ray starts: validates the ``heapa:`` block, expands ``~`` in paths, validates the data files and checks
that the teacher answers (``ops/preflight.py``), so bad input fails in seconds naming file, row, field or key. The
recipe's own small Ray runner does the rest: verl's ``TaskRunnerV1`` is a ``@ray.remote`` class (it cannot be
subclassed) and its trainer registry refuses a second "sync" trainer. The runner starts a new attempt of the
metrics and trace files (``ops/run_files.py``) before the trainer opens them, so a resumed run loses none.
"""

from __future__ import annotations

import logging
import os
import sys
from pprint import pformat

import hydra
import ray
from omegaconf import DictConfig, OmegaConf, open_dict

from recipe.heapa.ops.ray_cleanup import local_cluster_cleanup
from recipe.heapa.ops.ray_session import start_ray_in_own_session
from recipe.heapa.ops.preemption import DriverPreemption, preemptions
from recipe.heapa.ops.supervise import ATTEMPT_ENV, PREEMPTED_ENV, RESTARTS_ENV
from verl_ext.checkpoint_layout import checkpoint_root

logger = logging.getLogger("recipe.heapa.main_heapa")  # not "__main__" under -m: the recipe level applies


@ray.remote(num_cpus=1)
class HeapaTaskRunner:
    """Builds the recipe's trainer for ``trainer.v1.trainer_mode`` (``recipe/heapa/trainer.py``, ``trainer_class``)
    and the agent-loop manager, then trains (mirrors verl's ``TaskRunnerV1.run``)."""

    def run(self, config: DictConfig) -> None:
        import transfer_queue as tq

        from verl.trainer.ppo.v1 import AgentLoopManagerTQ
        from verl.utils.import_utils import load_class_from_fqn
        from verl.utils.logging_utils import configure_verl_logging

        from recipe.heapa.ops.checkpoint_manifest import choose_resume
        from recipe.heapa.ops.run_files import prepare_run_files
        from recipe.heapa.trainer import trainer_class
        from verl_ext.adapters._config import configure_logging

        configure_verl_logging()
        configure_logging()
        config.transfer_queue.enable = True
        OmegaConf.resolve(config)
        h = config.heapa  # the whole block at DEBUG (VERL_EXT_LOG_LEVEL=DEBUG): ~90 lines a console need not show
        logger.info("heapa: method %s, selection %s, platform %s, seed %s", h.method, h.selection.name, h.platform,
                    h.seed)
        logger.debug("heapa config:\n%s", pformat(OmegaConf.to_container(h)))
        choose_resume(config)  # a damaged latest checkpoint: the newest complete one (ops/checkpoint_manifest.py)
        prepare_run_files(config)  # before the trainer opens them (cut at the step resumed); logs what it kept
        tq.init(config.transfer_queue)
        trainer = None
        succeeded = False
        try:
            trainer = trainer_class(config.trainer.v1.trainer_mode)(config=config)
            trainer.init()
            fqn = config.actor_rollout_ref.rollout.get("agent", {}).get("agent_loop_manager_class")
            manager_cls = load_class_from_fqn(fqn, "AgentLoopManager") if fqn else AgentLoopManagerTQ
            manager = manager_cls.create(
                config=config, llm_client=trainer.get_llm_client(), teacher_client=trainer.get_teacher_client(),
                reward_loop_worker_handles=trainer.get_reward_handles(),
            )
            trainer.fit(manager)
            succeeded = True
        finally:
            try:
                if trainer is not None and getattr(trainer, "augment", None) is not None:
                    trainer.augment.close()  # stop teacher workers; pending work was saved with the checkpoint
                tracking = getattr(trainer, "logger", None)
                if tracking is not None:
                    tracking.finish(exit_code=0 if succeeded else 1)
            finally:
                tq.close()


def read_settings(config: DictConfig):
    """The validated ``heapa:`` block (paths ``~``-expanded first); cheap: verl itself is not imported yet."""
    from recipe.heapa.ops.preflight import expand_paths
    from recipe.heapa.settings import parse_settings
    from verl_ext.adapters._config import LOG_LEVEL_ENV, configure_logging

    _forward_env(config, {LOG_LEVEL_ENV: configure_logging()})
    expand_paths(config)
    settings = parse_settings(OmegaConf.to_container(config.heapa, resolve=True))
    with open_dict(config):
        config.heapa.method = settings.method  # `${hydra:...}` resolves only in this process, not in Ray actors
    return settings


def prepare(config: DictConfig):
    """Validate the config and switch the platform on, in the driver, before Ray starts its workers."""
    from recipe.heapa.trainer_mode import check_trainer_mode
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config

    settings = read_settings(config)
    mode = str(config.actor_rollout_ref.actor.loss_agg_mode)
    if settings.update.sequence_mean_over == "signal_rows" and not mode.startswith("seq-mean"):
        from recipe.heapa.settings import HeapaConfigError

        raise HeapaConfigError(f"heapa.update.sequence_mean_over=signal_rows needs a sequence-mean "
                               f"actor_rollout_ref.actor.loss_agg_mode, got {mode}")
    if not config.trainer.get("use_v1", True):
        raise ValueError("the heapa recipe runs on verl's V1 trainer: trainer.use_v1 must stay true")
    _check_overlong_buffer(config)
    if settings.platform == "cpu":
        from verl_ext.cpu import ENV_DEFAULTS, activate

        activate()
        _forward_env(config, {"VERL_PLATFORM": "cpu", **ENV_DEFAULTS})
    else:
        from recipe.heapa.ops.gpu_fit import fit_gpu

        fit_gpu(config)  # attention that is installed, vLLM sized for prompt + response (ops/gpu_fit.py)
    attach_to_running_cluster(config)  # drops the local cluster's sizes (num_gpus) when it attaches
    check_trainer_mode(config, settings)  # before Ray: trainer_mode.py
    validate_config(config=config, use_reference_policy=need_reference_policy(config), use_critic=need_critic(config))
    _tag_run(config, settings)
    return settings


def _check_overlong_buffer(config: DictConfig) -> None:
    """DAPO's overlong buffer must fit in the response length. verl's reward workers check it only when Ray starts
    them, and their death surfaces as verl's replay buffer finding "no materializable trajectories"."""
    buffer = OmegaConf.select(config, "reward.reward_kwargs.overlong_buffer", default=None)
    if buffer is None or not buffer.get("enable", False):
        return
    length, max_len = int(buffer.get("len", 0)), int(config.data.max_response_length)
    if not 0 <= length <= max_len:
        from recipe.heapa.settings import HeapaConfigError

        raise HeapaConfigError(
            f"reward.reward_kwargs.overlong_buffer.len={length} must lie in [0, data.max_response_length={max_len}] "
            "when reward.reward_kwargs.overlong_buffer.enable=true (the dapo presets): lower it, or raise "
            "data.max_response_length")


# ray.init refuses these when it connects to a running cluster (ray 2.60, ray/_private/worker.py: "When connecting
# to an existing cluster, num_cpus and num_gpus must not be provided", and so on): the nodes declared their own.
LOCAL_CLUSTER_ONLY_KEYS = ("num_cpus", "num_gpus", "resources", "labels", "object_store_memory", "_system_config",
                           "_enable_object_reconstruction", "_node_name")
# Read inside Ray actors (verl's file logger in the task runner, wandb, the HF hub) and set by the launchers: the
# workers of a running cluster inherit `ray start`'s environment, not the driver's. Secrets (WANDB_API_KEY,
# TEACHER_API_KEY, HF_TOKEN) are not forwarded: verl prints ray.init's kwargs; give them to `ray start` instead.
ATTACH_FORWARDED_ENV = ("VERL_FILE_LOGGER_PATH", "VERL_FILE_LOGGER_ROOT", "WANDB_MODE", "WANDB_DIR", "WANDB_SILENT",
                        "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_HOME")


def running_cluster_address(ray_init) -> str | None:
    """The address of the running cluster ``ray.init(**ray_init)`` will connect to; None when it starts its own.

    Ray's rules: an address of None or "auto" gives way to ``$RAY_ADDRESS``; "local" starts a new cluster; with
    neither, ray.init connects to the cluster a ``ray start`` on this machine recorded (``<ray temp>/
    ray_current_cluster``), if there is one.
    """
    address = ray_init.get("address")
    if address in (None, "auto") and os.environ.get("RAY_ADDRESS"):
        address = os.environ["RAY_ADDRESS"]
    if address == "local":
        return None
    if address is None:
        try:
            from ray._private.utils import read_ray_address  # what ray.init itself reads
        except ImportError:  # pragma: no cover - a Ray that moved it: ray.init's own error still names the key
            return None
        address = read_ray_address(ray_init.get("_temp_dir"))
    return str(address) if address else None


def attach_to_running_cluster(config: DictConfig) -> str | None:
    """Make ``ray_kwargs.ray_init`` valid for connecting to a running cluster; returns its address (None: local).

    The platform presets size a local cluster (platform=cpu: ``num_cpus``/``num_gpus``), which ray.init refuses
    when it connects to one: those keys are dropped and the cluster's own resources are used. The launchers'
    non-secret variables travel in the runtime env (``ATTACH_FORWARDED_ENV``).
    """
    ray_init = config.ray_kwargs.get("ray_init")
    address = running_cluster_address(ray_init or {})
    if address is None:
        return None
    dropped = {}
    if ray_init is not None:
        with open_dict(config):
            dropped = {key: ray_init.pop(key) for key in LOCAL_CLUSTER_ONLY_KEYS if key in ray_init}
    shown = ", ".join(f"{key}={value}" for key, value in dropped.items()
                      if value is not None and value is not False and value != {})
    logger.info("attaching to the running Ray cluster at %s: its own resources are used%s", address,
                f" (dropped ray_kwargs.ray_init {shown})" if shown else "")
    _forward_env(config, {key: os.environ[key] for key in ATTACH_FORWARDED_ENV if os.environ.get(key)})
    return address


def _forward_env(config: DictConfig, values: dict[str, str]) -> None:
    """Set variables here and in Ray's runtime_env: workers of an already running cluster do not inherit ours."""
    with open_dict(config):
        ray_init = config.ray_kwargs.ray_init
        if ray_init.get("runtime_env") is None:
            ray_init.runtime_env = {}
        if ray_init.runtime_env.get("env_vars") is None:
            ray_init.runtime_env.env_vars = {}
        env = ray_init.runtime_env.env_vars  # the config node itself (DictConfig.setdefault returns a copy)
        for key, value in values.items():
            os.environ.setdefault(key, value)
            if key not in env:
                env[key] = os.environ[key]


def _tag_run(config: DictConfig, settings) -> None:
    """Name and tag wandb runs (wandb reads WANDB_RUN_GROUP / WANDB_TAGS) so GRPO / DAPO / HeaPA runs compare."""
    if "wandb" not in (config.trainer.logger or []):
        return
    tags = [f"method:{settings.method}", f"selection:{settings.selection_name}",
            f"pool:{settings.pool.max_pool_size}", f"platform:{settings.platform}", "recipe:heapa"]
    _forward_env(config, {"WANDB_RUN_GROUP": f"{config.trainer.project_name}/{settings.method}",
                          "WANDB_TAGS": ",".join(tags)})


class _LaunchRunner:
    """What ``run_ppo`` gets as ``task_runner_class``: it calls ``.remote()`` in the driver right after
    ``ray.init``, which installs its own SIGTERM handler (exit at once); the preemption handler is installed here,
    after it, so a scheduler's signal becomes a checkpoint instead (``ops/preemption.py``)."""

    def __init__(self, preemption: DriverPreemption) -> None:
        self.preemption = preemption

    def remote(self):
        self.preemption.install()
        return HeapaTaskRunner.remote()

    def options(self, **kwargs):
        launcher = self

        class _Options:
            def remote(self):
                launcher.preemption.install()
                return HeapaTaskRunner.options(**kwargs).remote()

        return _Options()


@hydra.main(config_path="config", config_name="heapa_trainer", version_base=None)
def main(config: DictConfig) -> None:
    from recipe.heapa.ops.preflight import check_data, check_teacher
    from verl.trainer.main_ppo import run_ppo

    settings = read_settings(config)
    # which attempt of a supervised run this is (recipe/heapa/ops/supervise.py), for the trainer's run/* metrics
    _forward_env(config, {k: os.environ[k] for k in (ATTEMPT_ENV, RESTARTS_ENV) if k in os.environ})
    _forward_env(config, {PREEMPTED_ENV: str(preemptions(checkpoint_root(config.trainer.default_local_dir)))})
    check_data(config, settings)  # before verl's heavy imports: a data error shows in seconds
    check_teacher(settings)
    prepare(config)
    preemption = DriverPreemption(settings.run, checkpoint_root(config.trainer.default_local_dir))
    local = running_cluster_address(config.ray_kwargs.get("ray_init") or {}) is None
    if local:  # a job-wide signal (scancel, kill -- -PGID, Ctrl-C) then reaches the driver, not the cluster
        start_ray_in_own_session()
    with local_cluster_cleanup(local):  # every Ray process this run started ends with it (ops/ray_cleanup.py)
        run_ppo(config, task_runner_class=_LaunchRunner(preemption))
    code = preemption.exit_code()
    if code is not None:
        sys.exit(code)  # "requeue me": the checkpoint of the step the signal arrived in is complete


if __name__ == "__main__":
    main()
