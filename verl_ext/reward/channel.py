"""Length-prefixed pickle frames over pipe file descriptors, with a deadline on the reading side.

The scorer and its worker processes talk through two pipes per worker. Only the parent reads with a deadline
(a worker that overruns it is killed, so a half-read frame is never resumed); the worker reads blocking.
"""

from __future__ import annotations

import os
import pickle
import select
import struct
import time
from typing import Any

_HEADER = struct.Struct("!I")
MAX_FRAME_BYTES = 256 * 1024 * 1024
# The zygote's socket protocol (see ``worker``): one READY byte after warm-up, then one pid per forked worker.
READY = b"R"
PID = struct.Struct("!q")


def encode(obj: Any) -> bytes:
    """One frame holding ``obj``; raises what pickling raises, or ``ValueError`` for an oversized frame."""
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    if len(data) > MAX_FRAME_BYTES:
        raise ValueError(f"frame of {len(data)} bytes exceeds {MAX_FRAME_BYTES}")
    return _HEADER.pack(len(data)) + data


def write(fd: int, frame: bytes) -> None:
    """Write an encoded frame; raises ``OSError`` (e.g. ``BrokenPipeError``) when the other end is gone."""
    view = memoryview(frame)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def send(fd: int, obj: Any) -> None:
    """``write(fd, encode(obj))``."""
    write(fd, encode(obj))


def _read_exact(fd: int, n: int, deadline: float | None) -> bytes:
    chunks = []
    poller = select.poll() if deadline is not None else None
    if poller is not None:
        poller.register(fd, select.POLLIN | select.POLLHUP | select.POLLERR)
    while n > 0:
        if poller is not None:
            remaining_ms = (deadline - time.monotonic()) * 1000.0
            if remaining_ms <= 0 or not poller.poll(max(1, int(remaining_ms))):
                raise TimeoutError("no reply before the deadline")
        chunk = os.read(fd, min(n, 1 << 20))
        if not chunk:
            raise EOFError("the other end closed the pipe")
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def recv(fd: int, deadline: float | None = None) -> Any:
    """Read one frame; ``deadline`` is a ``time.monotonic()`` instant (None: wait forever).

    Raises ``TimeoutError`` past the deadline and ``EOFError`` when the writer is gone.
    """
    (size,) = _HEADER.unpack(_read_exact(fd, _HEADER.size, deadline))
    if size > MAX_FRAME_BYTES:
        raise EOFError(f"corrupt frame header ({size} bytes)")
    return pickle.loads(_read_exact(fd, size, deadline))
