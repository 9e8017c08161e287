"""The one-slot mailbox of the ``ray_store`` checkpoint engine (``checkpoint_engine.py``), in a module of its own so
that its actor's process imports Ray only, not verl."""

from __future__ import annotations

import asyncio

import ray


@ray.remote(num_cpus=0)
class WeightMailbox:
    """One slot: the sender puts a (boxed) object reference, readers wait for it, ``clear`` empties it."""

    def __init__(self) -> None:
        self._slot: list | None = None
        self._filled = asyncio.Event()

    async def put(self, boxed: list) -> None:
        self._slot = boxed
        self._filled.set()

    async def get(self) -> list:
        await self._filled.wait()
        return self._slot

    async def clear(self) -> None:
        self._slot, self._filled = None, asyncio.Event()
