"""The hf rollout's adapter in the actor / checkpoint-engine worker (no Ray: the server handle is a stand-in).

Which replica it pushes to, and that it takes the weight stream a checkpoint engine hands (an async generator) as
well as the actor's plain one; only the replica's first rollout rank pushes, every rank drains the stream."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest
import torch

from verl_ext.cpu.hf_rollout import HFServerAdapter

ROLLOUT = SimpleNamespace(tensor_model_parallel_size=2, data_parallel_size=1, pipeline_model_parallel_size=1)


class _Remote:
    def __init__(self, fn):
        self.remote = fn


class _Server:
    """Records what ``load_weights.remote`` received, as the Ray actor handle would be awaited."""

    def __init__(self):
        self.pushed = []

        async def load(tensors, global_steps=None):
            self.pushed.append((sorted(tensors), global_steps))
            return len(tensors)

        self.load_weights = _Remote(load)


def _adapter(monkeypatch, rank: int, **kwargs) -> tuple[HFServerAdapter, _Server]:
    monkeypatch.setenv("RANK", str(rank))
    adapter = HFServerAdapter(ROLLOUT, SimpleNamespace(), None, **kwargs)
    server = _Server()
    adapter._server = server
    return adapter, server


def _plain():
    yield "a", torch.ones(2)
    yield "b", torch.zeros(3)


async def _async():
    for item in _plain():
        await asyncio.sleep(0)
        yield item


@pytest.mark.parametrize("rank, kwargs, replica, leader", [
    (0, {}, 0, True), (1, {}, 0, False), (3, {}, 1, False), (2, {}, 1, True),  # hybrid: from the trainer rank
    (0, {"replica_rank": 5}, 5, True),  # standalone: the replica verl names, whatever RANK says
])
def test_replica_and_leader(monkeypatch, rank, kwargs, replica, leader):
    adapter, _ = _adapter(monkeypatch, rank, **kwargs)
    assert (adapter.replica_rank, adapter.is_leader_rank) == (replica, leader)


@pytest.mark.parametrize("stream", [_plain, _async])
def test_the_leader_pushes_a_plain_or_async_stream(monkeypatch, stream):
    adapter, server = _adapter(monkeypatch, 0, replica_rank=0)
    assert asyncio.run(adapter.update_weights(stream(), global_steps=4)) == {}
    assert server.pushed == [(["a", "b"], 4)]


def test_a_follower_drains_the_stream_and_pushes_nothing(monkeypatch):
    adapter, server = _adapter(monkeypatch, 1)
    drawn = []

    def stream():
        for item in _plain():
            drawn.append(item[0])
            yield item

    asyncio.run(adapter.update_weights(stream(), global_steps=4))
    assert drawn == ["a", "b"] and server.pushed == []


def test_only_full_named_tensors(monkeypatch):
    adapter, _ = _adapter(monkeypatch, 0)
    with pytest.raises(NotImplementedError, match="named tensors"):
        asyncio.run(adapter.update_weights(_plain(), wire_format="delta_flush"))
