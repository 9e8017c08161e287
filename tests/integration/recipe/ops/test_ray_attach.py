"""Attaching a launcher to a running Ray cluster (``ray start --head`` ... then ``RAY_ADDRESS=... bash run_*.sh``).

The platform presets size a local cluster (platform=cpu: ``ray_init.num_cpus``/``num_gpus``), and ray.init refuses
those when it connects to a running one ("When connecting to an existing cluster, num_cpus and num_gpus must not
be provided."). ``prepare()`` drops them exactly when ray.init will connect, and forwards the launcher's
non-secret variables to the cluster's workers. No Ray cluster is started here; the e2e twin is
``tests/e2e/test_multinode_cpu.py``.
"""

from __future__ import annotations

import inspect
import logging
import os
import re
import subprocess
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf, open_dict

from recipe.heapa.main_heapa import (
    LOCAL_CLUSTER_ONLY_KEYS,
    attach_to_running_cluster,
    prepare,
    running_cluster_address,
)

REPO = Path(__file__).resolve().parents[4]
CONFIG_DIR = str(REPO / "recipe" / "heapa" / "config")
ATTACH_LOG = "attaching to the running Ray cluster"


@pytest.fixture(autouse=True)
def hermetic_env(monkeypatch, tmp_path):
    """No cluster address from the caller's shell or from a `ray start` on this machine; env changes undone."""
    from verl_ext.cpu import ENV_DEFAULTS

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setenv("RAY_TMPDIR", str(tmp_path / "raytmp"))  # ray's `ray_current_cluster` is looked up here
    monkeypatch.setenv("VERL_PLATFORM", "cpu")  # prepare() sets these for platform=cpu: restore them afterwards
    for key, value in ENV_DEFAULTS.items():
        monkeypatch.setenv(key, os.environ.get(key, value))
    for key in ("WANDB_TAGS", "WANDB_RUN_GROUP", "VERL_FILE_LOGGER_PATH", "VERL_FILE_LOGGER_ROOT", "WANDB_MODE"):
        monkeypatch.delenv(key, raising=False)


def _launcher_cpu_config(*extra: str):
    """The config `FORCE_CPU=1 bash scripts/run_heapa_grpo_qwen.sh <extra>` hands to the trainer."""
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env.update(DRY_RUN="1", FORCE_CPU="1", VERL_EXT_ASSETS="/nonexistent/assets")
    out = subprocess.run(["bash", str(REPO / "scripts" / "run_heapa_grpo_qwen.sh"), *extra], env=env,
                         capture_output=True, text=True, check=True, timeout=60)
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base=None):
        cfg = compose(config_name="heapa_trainer", overrides=out.stdout.splitlines())
    with open_dict(cfg):
        cfg.heapa.method = "heapa_grpo"  # `${hydra:...}` resolves only inside a running Hydra app
    return cfg


def _cpu_config(*overrides: str):
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base=None):
        return compose(config_name="heapa_trainer", overrides=["platform=cpu", *overrides])


def _refused(ray_init) -> dict:
    """What of ``ray_init`` ray.init refuses when it connects (a None, False or {} passes its checks)."""
    kwargs = OmegaConf.to_container(ray_init)
    return {k: kwargs[k] for k in LOCAL_CLUSTER_ONLY_KEYS if kwargs.get(k) not in (None, False, {})}


def test_the_cpu_launcher_attaches_to_a_running_two_node_cluster(monkeypatch, caplog):
    monkeypatch.setenv("RAY_ADDRESS", "127.0.0.1:6379")
    monkeypatch.setenv("VERL_FILE_LOGGER_PATH", "/runs/heapa/metrics.jsonl")
    monkeypatch.setenv("WANDB_API_KEY", "secret")  # a secret: never copied into ray.init's (printed) kwargs
    cfg = _launcher_cpu_config("trainer.nnodes=2", "trainer.n_gpus_per_node=1")
    assert _refused(cfg.ray_kwargs.ray_init) == {"num_cpus": 16, "num_gpus": 1}  # the preset sizes a local cluster
    with caplog.at_level(logging.INFO, logger="recipe.heapa.main_heapa"):
        prepare(cfg)
    ray_init = cfg.ray_kwargs.ray_init
    assert _refused(ray_init) == {}
    assert "num_cpus" not in ray_init and "num_gpus" not in ray_init
    records = [r for r in caplog.records if ATTACH_LOG in r.getMessage()]
    assert len(records) == 1 and records[0].levelno == logging.INFO
    lines = [records[0].getMessage()]
    assert "127.0.0.1:6379" in lines[0] and "its own resources are used" in lines[0]
    assert "num_cpus=16" in lines[0] and "num_gpus=1" in lines[0]
    env = ray_init.runtime_env.env_vars  # workers of a running cluster inherit `ray start`'s env, not ours
    assert env.VERL_PLATFORM == "cpu" and env.VERL_FILE_LOGGER_PATH == "/runs/heapa/metrics.jsonl"
    assert env.HF_HUB_OFFLINE == "1" and "WANDB_API_KEY" not in env
    assert cfg.trainer.nnodes == 2 and cfg.trainer.n_gpus_per_node == 1


def test_a_local_cluster_keeps_its_size(monkeypatch, caplog):
    cfg = _launcher_cpu_config()
    with caplog.at_level(logging.INFO, logger="recipe.heapa.main_heapa"):
        prepare(cfg)
    assert _refused(cfg.ray_kwargs.ray_init) == {"num_cpus": 16, "num_gpus": 1}
    assert ATTACH_LOG not in caplog.text


@pytest.mark.parametrize(("env_address", "config_address", "expected"), [
    (None, None, None),                       # ray.init starts its own cluster
    ("10.0.0.1:6379", None, "10.0.0.1:6379"),
    ("10.0.0.1:6379", "auto", "10.0.0.1:6379"),  # RAY_ADDRESS wins over None and "auto" (ray's rule)
    ("10.0.0.1:6379", "local", None),         # "local" always starts a new cluster
    (None, "10.0.0.2:6379", "10.0.0.2:6379"),
    ("10.0.0.1:6379", "10.0.0.2:6379", "10.0.0.2:6379"),  # an explicit address wins over RAY_ADDRESS
    (None, "auto", "auto"),
    ("", None, None),                         # an empty RAY_ADDRESS is unset
])
def test_the_address_follows_ray_init_rules(monkeypatch, env_address, config_address, expected):
    if env_address is not None:
        monkeypatch.setenv("RAY_ADDRESS", env_address)
    ray_init = {} if config_address is None else {"address": config_address}
    assert running_cluster_address(ray_init) == expected
    cfg = _cpu_config(*([] if config_address is None else [f"+ray_kwargs.ray_init.address={config_address}"]))
    assert attach_to_running_cluster(cfg) == expected
    assert _refused(cfg.ray_kwargs.ray_init) == ({"num_cpus": 16, "num_gpus": 1} if expected is None else {})


def test_a_cluster_recorded_by_ray_start_on_this_machine_counts(tmp_path):
    """With no address at all, ray.init connects to the cluster `ray start` recorded; so must the stripping."""
    cfg = _cpu_config()
    assert attach_to_running_cluster(cfg) is None
    recorded = tmp_path / "raytmp" / "ray" / "ray_current_cluster"  # $RAY_TMPDIR/ray (the fixture's RAY_TMPDIR)
    recorded.parent.mkdir(parents=True)
    recorded.write_text("127.0.0.1:6380")
    assert attach_to_running_cluster(cfg) == "127.0.0.1:6380"
    assert _refused(cfg.ray_kwargs.ray_init) == {}


def test_every_refused_key_is_dropped(monkeypatch):
    monkeypatch.setenv("RAY_ADDRESS", "127.0.0.1:6379")
    cfg = _cpu_config("+ray_kwargs.ray_init.resources={accel: 1}", "+ray_kwargs.ray_init.object_store_memory=1000000",
                      "+ray_kwargs.ray_init._system_config={a: 1}", "+ray_kwargs.ray_init.namespace=heapa")
    attach_to_running_cluster(cfg)
    kwargs = OmegaConf.to_container(cfg.ray_kwargs.ray_init)
    assert not set(LOCAL_CLUSTER_ONLY_KEYS) & set(kwargs)
    assert kwargs["namespace"] == "heapa"  # what ray.init accepts when connecting stays


def test_the_dropped_keys_are_the_ones_ray_init_refuses():
    """Read ray.init's own source: every argument it refuses when connecting is in LOCAL_CLUSTER_ONLY_KEYS.

    A Ray upgrade that refuses one more fails here, naming it, instead of at a cluster's start-up.
    """
    from ray._private import worker

    source = inspect.getsource(worker.init)
    start = source.index("# In this case, we are connecting to an existing cluster.")
    block = source[start: source.index("ray_params = ray._private.parameter.RayParams(", start)]
    assert "When connecting to an existing cluster" in block
    refused = set(re.findall(r"\bif\s+(\w+)\s+is not None", block))
    refused |= set(re.findall(r"\bor\s+(\w+)\s+is not None", block))
    refused |= set(re.findall(r"\bif\s+(\w+)\s*:", block))
    assert {"num_cpus", "num_gpus", "resources", "object_store_memory"} <= refused  # the parse found the checks
    assert refused <= set(LOCAL_CLUSTER_ONLY_KEYS), sorted(refused - set(LOCAL_CLUSTER_ONLY_KEYS))
