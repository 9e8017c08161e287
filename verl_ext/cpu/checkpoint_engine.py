"""``ray_store``: a checkpoint engine that hands the actor's weights to standalone rollout replicas through Ray's
object store, for ``trainer.v1.trainer_mode=separate_async`` on the CPU backend.

verl's separate asynchronous trainer moves weights from the trainer's workers to rollout replicas in other
processes (other nodes) through a checkpoint engine (``actor_rollout_ref.rollout.checkpoint_engine``). Its own
engines need CUDA (``nccl``: cupy; ``nixl``, ``hccl``, ``mooncake``: their own stacks) and ``naive`` hands weights
over inside one process, which a standalone replica is not. This one needs Ray only:

- every actor rank drains the weight stream (producing a tensor may run an FSDP all-gather, a collective), rank 0
  keeps the full tensors and puts them in the object store once per sync;
- a one-slot mailbox actor, made by rank 0 and handed to every rank in the topology, carries the object's
  reference to the rollout side;
- each replica's ``CheckpointEngineWorker`` reads the tensors from the store and hands them to the replica's
  adapter (``HFServerAdapter.update_weights``), which loads them into its server; ``finalize`` empties the slot.

Memory: the actor's full weights once in the store per sync, plus the reader's copy: sized for models a host can
hold (the CPU backend's), not for a 7B model across nodes, where ``nccl`` is the engine to use.

Select it with ``actor_rollout_ref.rollout.checkpoint_engine.backend=ray_store`` and
``actor_rollout_ref.rollout.checkpoint_engine.custom_backend_module=verl_ext.cpu.checkpoint_engine`` (verl
imports that module in the trainer, the actor workers and the rollout's checkpoint-engine workers).
"""

from __future__ import annotations

import asyncio
from typing import Any

import ray

from verl.checkpoint_engine.base import CheckpointEngine, CheckpointEngineRegistry
from verl.workers.rollout.utils import ensure_async_iterator

from .weight_mailbox import WeightMailbox

BACKEND = "ray_store"


@CheckpointEngineRegistry.register(BACKEND)
class RayStoreCheckpointEngine(CheckpointEngine):
    """See the module docstring. ``timeout_s`` (``engine_kwargs.ray_store.timeout_s``) bounds a reader's wait for
    the weights, so a sender that failed ends the sync with an error instead of a hang."""

    def __init__(self, bucket_size: int = 0, is_master: bool = False, timeout_s: float = 600.0, **_: Any) -> None:
        self.is_master, self.timeout_s = is_master, float(timeout_s)
        self.rank = -1
        self._mailbox = None
        self._ref = None

    def prepare(self) -> dict[str, Any]:
        if not self.is_master:
            return {}
        if self._mailbox is None:  # rank 0 owns it (made once): it lives as long as the trainer's workers
            self._mailbox = WeightMailbox.remote()
        return {"mailbox": self._mailbox}

    @classmethod
    def build_topology(cls, actor_wg_world_size: int, rollout_world_size: int,
                       metadata: list[dict]) -> tuple[dict[str, list[Any]], dict[str, list[Any]]]:
        box = metadata[0]["mailbox"]  # the actor workers' metadata come first, rank 0 is the master
        world = actor_wg_world_size + rollout_world_size
        return ({"rank": list(range(actor_wg_world_size)), "mailbox": [box] * actor_wg_world_size},
                {"rank": list(range(actor_wg_world_size, world)), "mailbox": [box] * rollout_world_size})

    def init_process_group(self, rank: int, mailbox) -> None:
        self.rank, self._mailbox = rank, mailbox

    async def send_weights(self, weights, global_steps: int | None = None) -> dict[str, float]:
        state, nbytes = {}, 0
        async for name, tensor in ensure_async_iterator(weights):  # every rank drains: the gathers are collective
            if self.rank == 0:
                state[name] = tensor.detach().cpu()
                nbytes += state[name].numel() * state[name].element_size()
        if self.rank != 0:
            return {}
        self._ref = ray.put(state)  # owned here until finalize: the readers fetch it meanwhile
        await self._mailbox.put.remote([self._ref])  # boxed in a list, so Ray passes the reference, not the value
        return {"weight_sync/ray_store_mb": nbytes / 2**20, "weight_sync/ray_store_tensors": float(len(state))}

    async def receive_weights(self, global_steps: int | None = None):
        try:
            (ref,) = await asyncio.wait_for(self._mailbox.get.remote(), self.timeout_s)
        except asyncio.TimeoutError:
            raise TimeoutError(f"checkpoint engine {BACKEND}: no weights from the trainer's rank 0 within "
                               f"{self.timeout_s:.0f} s (engine_kwargs.{BACKEND}.timeout_s)") from None
        state = await ref
        for name, tensor in state.items():
            yield name, tensor

    def finalize(self) -> None:
        if self.rank == 0 and self._mailbox is not None:
            ray.get(self._mailbox.clear.remote())  # before the next sync's put
        self._ref = None
