"""``ray_store`` (``verl_ext/cpu/checkpoint_engine.py``) through verl's own steps on a small local Ray cluster: two
actor ranks (rank 0 the master) send, a rollout rank receives through the mailbox actor and the object store; every
actor rank drains its stream, the rollout gets rank 0's tensors, a second sync gets the new ones, and a reader whose
sender never sends ends with an error naming the knob instead of hanging. (Here the ranks share this process; the
e2e run in ``tests/e2e/test_async_cpu.py`` has them in the trainer's and the replica's workers.)"""

from __future__ import annotations

import asyncio

import pytest
import torch

ray = pytest.importorskip("ray")

from verl.checkpoint_engine.base import CheckpointEngineRegistry  # noqa: E402

from verl_ext.cpu.checkpoint_engine import BACKEND  # noqa: E402  registers the backend


@pytest.fixture(scope="module")
def cluster():
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


def _engine(**kwargs):
    return CheckpointEngineRegistry.new(BACKEND, bucket_size=1 << 20, **kwargs)


def _connect(actor_engines, rollout_engines) -> None:
    """verl's CheckpointEngineManager.build_process_group, for engines in this process."""
    metadata = [e.prepare() for e in (*actor_engines, *rollout_engines)]
    actor_kwargs, rollout_kwargs = type(actor_engines[0]).build_topology(len(actor_engines), len(rollout_engines),
                                                                          metadata)
    for group, kwargs in ((actor_engines, actor_kwargs), (rollout_engines, rollout_kwargs)):
        for i, engine in enumerate(group):
            engine.init_process_group(**{k: v[i] for k, v in kwargs.items()})


def _weights(scale: float) -> dict[str, torch.Tensor]:
    return {"w": torch.full((3, 2), scale), "b": torch.arange(4.0) * scale}


async def _sync(senders, reader, weights, step):
    drained = [[] for _ in senders]

    def stream(log):
        for name, tensor in weights.items():
            log.append(name)
            yield name, tensor

    async def receive():
        return {name: tensor.clone() async for name, tensor in reader.receive_weights(global_steps=step)}

    *sent, got = await asyncio.gather(*(s.send_weights(stream(d), global_steps=step) for s, d in zip(senders, drained)),
                                      receive())
    return sent, drained, got


def test_weights_reach_the_rollout_rank_and_the_slot_is_refilled(cluster):
    master, other, reader = _engine(is_master=True), _engine(is_master=False), _engine()
    _connect([master, other], [reader])
    assert (master.rank, other.rank, reader.rank) == (0, 1, 2)
    for step, scale in ((1, 1.0), (2, 3.0)):  # the slot is emptied by finalize and filled again
        (metrics, quiet), drained, got = asyncio.run(_sync([master, other], reader, _weights(scale), step))
        assert drained == [["w", "b"], ["w", "b"]]  # every actor rank drains (its gathers are collective)
        assert quiet == {} and metrics["weight_sync/ray_store_tensors"] == 2.0
        assert metrics["weight_sync/ray_store_mb"] == pytest.approx((6 + 4) * 4 / 2**20)
        assert sorted(got) == ["b", "w"] and all(torch.equal(got[k], _weights(scale)[k]) for k in got)
        for engine in (master, other, reader):
            engine.finalize()


def test_a_reader_without_a_sender_fails_naming_the_timeout(cluster):
    master, reader = _engine(is_master=True), _engine(timeout_s=0.5)
    _connect([master], [reader])

    async def receive():
        return [item async for item in reader.receive_weights(global_steps=1)]

    with pytest.raises(TimeoutError, match=r"no weights .* within 0 s \(engine_kwargs\.ray_store\.timeout_s\)"):
        asyncio.run(receive())
