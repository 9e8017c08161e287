"""The ``hf`` rollout backend: a replica that launches ``HFServer`` actors and the in-worker weight adapter.

Registered as ``actor_rollout_ref.rollout.name=hf`` (with ``checkpoint_engine.backend=naive``): verl's
actor worker builds ``HFServerAdapter`` as its ``self.rollout`` and, after each PPO update, calls
``update_weights`` with the actor's parameters, which the adapter pushes to its replica's server actor.
"""

from __future__ import annotations

import logging
import os
from typing import Any

import ray

from verl.workers.rollout.base import BaseRollout
from verl.workers.rollout.replica import RolloutReplica
from verl.workers.rollout.utils import ensure_async_iterator

from .hf_server import HFServer

logger = logging.getLogger(__name__)


def server_name(replica_rank: int) -> str:
    """Named-actor name shared by the replica (creator) and the adapter (weight pusher) of one job."""
    job = ray.get_runtime_context().get_job_id()
    return f"verl_ext_hf_server_{job}_{replica_rank}"


def _model_field(model_config: Any, key: str, default: Any = None) -> Any:
    if hasattr(model_config, "get"):
        return model_config.get(key, default)
    return getattr(model_config, key, default)


class HFReplica(RolloutReplica):
    """One ``HFServer`` actor per replica (tensor/pipeline parallelism do not apply on a host)."""

    def rollout_worker_use_gpu(self) -> bool:
        return False

    async def launch_servers(self) -> None:
        if self.world_size != 1:
            raise ValueError(
                "the hf rollout serves one process per replica: set rollout.tensor_model_parallel_size=1, "
                f"data_parallel_size=1, pipeline_model_parallel_size=1 (world size is {self.world_size})"
            )
        model_path = _model_field(self.model_config, "local_path") or _model_field(self.model_config, "path")
        cfg = self.config
        max_model_len = cfg.max_model_len or (cfg.prompt_length + cfg.response_length)
        name = server_name(self.replica_rank)
        engine_kwargs = dict(getattr(cfg, "engine_kwargs", None) or {}).get("hf", {}) or {}
        server = (
            ray.remote(HFServer)
            .options(name=name, num_cpus=0, max_concurrency=self.max_concurrency)
            .remote(
                model_path=model_path,
                response_length=cfg.response_length,
                max_model_len=max_model_len,
                seed=int(engine_kwargs.get("seed", 0)),
                trust_remote_code=bool(_model_field(self.model_config, "trust_remote_code", False)),
                num_threads=int(engine_kwargs.get("num_threads", 1)),
                max_batch=int(engine_kwargs.get("max_batch", 64)),
                deterministic=bool(engine_kwargs.get("deterministic", False)),
                # common random numbers across runs: samples independent of batching (hf_server.py)
                crn=bool(engine_kwargs.get("crn", True)),
                pad_to=int(engine_kwargs.get("pad_to") or cfg.prompt_length),
            )
        )
        # Fail at start-up (not at the first generate) when the model cannot load.
        await server.get_weight_versions.remote()
        self.servers = [server]
        self._server_handle = server
        self._server_address = name
        logger.info("hf rollout replica %d serving %s as %s", self.replica_rank, model_path, name)


class HFServerAdapter(BaseRollout):
    """Lives in the actor worker; pushes each new policy to its replica's ``HFServer``."""

    def __init__(self, config: Any, model_config: Any, device_mesh: Any, *args: Any, replica_rank: int = -1,
                 **kwargs: Any):
        super().__init__(config, model_config, device_mesh)
        rank = int(os.environ.get("RANK", 0))
        world = (self.config.tensor_model_parallel_size * self.config.data_parallel_size
                 * self.config.pipeline_model_parallel_size)
        # A standalone replica's checkpoint-engine worker is told its replica (its RANK counts within its own
        # worker group, not the trainer's); a hybrid one works it out from the trainer rank, as vLLM's adapter does.
        self.replica_rank = rank // world if replica_rank == -1 else replica_rank
        self.rollout_rank = rank % world
        self.is_leader_rank = self.rollout_rank == 0  # verl's checkpoint engine asks which worker pushes
        self._server = None

    def _server_handle(self):
        if self._server is None:
            self._server = ray.get_actor(server_name(self.replica_rank))
        return self._server

    async def update_weights(self, weights, wire_format: str = "named_tensors", **kwargs: Any) -> dict:
        if wire_format != "named_tensors":
            raise NotImplementedError(f"hf rollout accepts full named tensors only, got wire_format={wire_format!r}")
        # Every rank must drain the stream: producing each tensor may run a collective (all-gather). The actor
        # hands a generator, a checkpoint engine's receive_weights an async one.
        tensors = {name: t.detach().to("cpu").clone() async for name, t in ensure_async_iterator(weights)}
        if self.rollout_rank != 0:
            return {}
        matched = await self._server_handle().load_weights.remote(tensors, global_steps=kwargs.get("global_steps"))
        logger.debug("pushed %d tensors to hf server (replica %d)", matched, self.replica_rank)
        return {}

    async def resume(self, tags: list[str]) -> None:
        return None

    async def release(self) -> None:
        return None
