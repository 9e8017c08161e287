"""A hard time limit for math-verify from any thread: run it in worker processes that can be killed.

math-verify's own timeout is ``signal.alarm`` (main thread only), and sympy can stall inside one C call that no
signal interrupts (``9^{9^{9}}``). The guard in ``math_score`` catches the known patterns; this sandbox bounds
everything else: each comparison runs in a child process, and a child that overruns ``timeout_s`` is killed
and replaced (counted). Opt in with ``compute_score(..., sandbox=MathVerifySandbox())``; the cost is one process
per worker (~1-2 s start-up to import sympy) and a pipe round trip per call.
"""

from __future__ import annotations

import logging
import multiprocessing
import queue
import threading
from collections import Counter
from multiprocessing.connection import Connection
from typing import Any

logger = logging.getLogger(__name__)

_READY = "ready"


def _serve(conn: Connection) -> None:
    """Child loop: answer (pred, gold) pairs until the parent closes the pipe."""
    from verl_ext.reward.math_score import math_verify_equal

    # Warm up (grammar compilation, lazy sympy imports) before reporting ready, so the first real call is not
    # mistaken for a stall by the per-call limit.
    math_verify_equal(r"\frac{1}{2}", "0.5")
    conn.send(_READY)
    while True:
        try:
            pred, gold = conn.recv()
        except (EOFError, OSError):
            return
        conn.send(bool(math_verify_equal(pred, gold)))


class _Worker:
    def __init__(self, ctx: Any, startup_timeout_s: float) -> None:
        parent, child = ctx.Pipe()
        self.conn: Connection = parent
        self.proc = ctx.Process(target=_serve, args=(child,), daemon=True, name="math-verify-sandbox")
        self.proc.start()
        child.close()
        if not self.conn.poll(startup_timeout_s) or self.conn.recv() != _READY:
            self.kill()
            raise RuntimeError(f"math-verify sandbox worker did not start within {startup_timeout_s} s")

    def kill(self) -> None:
        self.proc.kill()
        self.proc.join(timeout=5)
        self.conn.close()


class MathVerifySandbox:
    """Callable ``(pred, gold) -> bool`` with a hard per-call time limit; thread-safe.

    Up to ``workers`` comparisons run at once; further callers wait for a free worker. A timed-out or crashed
    comparison returns False and is counted in ``counts`` ('timeout', 'crashed').
    """

    def __init__(self, workers: int = 2, timeout_s: float = 5.0, startup_timeout_s: float = 120.0,
                 start_method: str = "spawn") -> None:
        if workers <= 0 or timeout_s <= 0:
            raise ValueError(f"MathVerifySandbox: workers ({workers}) and timeout_s ({timeout_s}) must be > 0")
        self.timeout_s = timeout_s
        self.startup_timeout_s = startup_timeout_s
        self._ctx = multiprocessing.get_context(start_method)
        self._slots: queue.Queue[_Worker | None] = queue.Queue()
        for _ in range(workers):
            self._slots.put(None)  # started lazily on first use
        self._lock = threading.Lock()
        self._closed = False
        self._live: set[_Worker] = set()
        self.counts: Counter[str] = Counter()

    def __call__(self, pred: str, gold: str) -> bool:
        worker = self._slots.get()
        try:
            if self._closed:
                raise RuntimeError("MathVerifySandbox is closed")
            if worker is None:
                worker = self._spawn()
            worker, result = self._ask(worker, pred, gold)
            return result
        finally:
            self._slots.put(worker)

    def _spawn(self) -> _Worker:
        worker = _Worker(self._ctx, self.startup_timeout_s)
        with self._lock:
            self._live.add(worker)
        return worker

    def _retire(self, worker: _Worker, reason: str) -> None:
        with self._lock:
            self.counts[reason] += 1
            self._live.discard(worker)
        worker.kill()

    def _ask(self, worker: _Worker, pred: str, gold: str) -> tuple[_Worker | None, bool]:
        try:
            worker.conn.send((pred, gold))
            if worker.conn.poll(self.timeout_s):
                with self._lock:
                    self.counts["ok"] += 1
                return worker, bool(worker.conn.recv())
        except (EOFError, OSError):
            logger.warning("math-verify sandbox worker died; replacing it")
            self._retire(worker, "crashed")
            return None, False
        logger.warning("math-verify comparison exceeded %.1f s; killing its worker", self.timeout_s)
        self._retire(worker, "timeout")
        return None, False

    def metrics(self) -> dict[str, float]:
        with self._lock:
            return {f"reward/sandbox_{k}": float(v) for k, v in self.counts.items()}

    def close(self) -> None:
        """Kill all workers; later calls raise."""
        with self._lock:
            self._closed = True
            live, self._live = list(self._live), set()
        for worker in live:
            worker.kill()
