"""``ray_store`` (``verl_ext/cpu/checkpoint_engine.py``) through verl's own steps on a small local Ray cluster: two
actor ranks (rank 0 the master) send, a rollout rank in another process receives; every actor rank drains its
stream, the rollout gets rank 0's tensors, a second sync gets the new ones, and a reader whose sender never sends
ends with an error naming the knob instead of hanging."""

from __future__ import annotations

import asyncio

import pytest
import torch

ray = pytest.importorskip("ray")

from verl.checkpoint_engine.base import CheckpointEngineRegistry  # noqa: E402

from verl_ext.cpu.checkpoint_engine import BACKEND  # noqa: E402  registers the backend


@pytest.fixture(scope="module")
def reader():
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield Reader.remote()  # one process for both tests: each start imports verl
    ray.shutdown()


@ray.remote(num_cpus=0)
class Reader:
    """A rollout-side engine in its own process, as verl's ``CheckpointEngineWorker`` holds it."""

    def __init__(self):
        import verl_ext.cpu.checkpoint_engine  # noqa: F401  what custom_backend_module does there

        self.engine = None

    def new(self, **kwargs):
        self.engine = CheckpointEngineRegistry.new(BACKEND, bucket_size=1 << 20, **kwargs)

    def call(self, method, *args, **kwargs):
        return getattr(self.engine, method)(*args, **kwargs)

    async def receive(self, step):
        return {name: tensor.clone() async for name, tensor in self.engine.receive_weights(global_steps=step)}


def _weights(scale: float):
    return {"w": torch.full((3, 2), scale), "b": torch.arange(4.0) * scale}


async def _drained(rank_engine, weights, step):
    drained = []

    def stream():
        for name, tensor in weights.items():
            drained.append(name)
            yield name, tensor

    metrics = await rank_engine.send_weights(stream(), global_steps=step)
    return metrics, drained


def test_weights_reach_a_rollout_rank_in_another_process(reader):
    master = CheckpointEngineRegistry.new(BACKEND, is_master=True, bucket_size=1 << 20)
    other = CheckpointEngineRegistry.new(BACKEND, is_master=False, bucket_size=1 << 20)
    ray.get(reader.new.remote())
    metadata = [master.prepare(), other.prepare(), ray.get(reader.call.remote("prepare"))]
    actor_kwargs, rollout_kwargs = type(master).build_topology(2, 1, metadata)
    assert actor_kwargs["rank"] == [0, 1] and rollout_kwargs["rank"] == [2]
    for i, engine in enumerate((master, other)):
        engine.init_process_group(**{k: v[i] for k, v in actor_kwargs.items()})
    ray.get(reader.call.remote("init_process_group", **{k: v[0] for k, v in rollout_kwargs.items()}))

    for step, scale in ((1, 1.0), (2, 3.0)):  # the slot is emptied by finalize and filled again
        received = reader.receive.remote(step)
        (metrics, drained), (quiet, drained_1) = asyncio.run(_both(master, other, _weights(scale), step))
        got = ray.get(received)
        assert drained == drained_1 == ["w", "b"]  # every actor rank drains (its gathers are collective)
        assert quiet == {} and metrics["weight_sync/ray_store_tensors"] == 2.0
        assert metrics["weight_sync/ray_store_mb"] == pytest.approx((6 + 4) * 4 / 2**20)
        assert sorted(got) == ["b", "w"] and all(torch.equal(got[k], _weights(scale)[k]) for k in got)
        master.finalize()
        other.finalize()
        ray.get(reader.call.remote("finalize"))


async def _both(master, other, weights, step):
    return await asyncio.gather(_drained(master, weights, step), _drained(other, weights, step))


def test_a_reader_without_a_sender_fails_naming_the_timeout(reader):
    master = CheckpointEngineRegistry.new(BACKEND, is_master=True, bucket_size=1 << 20)
    ray.get(reader.new.remote(timeout_s=0.5))
    metadata = [master.prepare(), ray.get(reader.call.remote("prepare"))]
    _, rollout_kwargs = type(master).build_topology(1, 1, metadata)
    ray.get(reader.call.remote("init_process_group", **{k: v[0] for k, v in rollout_kwargs.items()}))
    with pytest.raises(ray.exceptions.RayTaskError, match=r"no weights .* within 0 s \(engine_kwargs\.ray_store"):
        ray.get(reader.receive.remote(1))
