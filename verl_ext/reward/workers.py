"""A pool of warm scoring processes with a hard deadline per task (process isolation with kill).

``WorkerPool.run(task, deadline)`` hands the task to an idle worker and waits for its reply until ``deadline``.
A worker that has not replied by then is killed (SIGKILL, so nothing running inside it, not even code that holds
the GIL in one C call, can delay the answer), and a replacement is forked from the warm zygote in the background
(see ``worker``): a stall costs its own item the deadline and nothing more. Workers are forked by a supervisor
thread that lives as long as the pool, which owns the zygote (``PR_SET_PDEATHSIG`` ties the zygote to that
thread, so the processes go away with the pool's process, e.g. a Ray actor that dies).

Thread-safe; ``run`` blocks the calling thread (use ``loop.run_in_executor`` from asyncio).
"""

from __future__ import annotations

import atexit
import logging
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import verl_ext.reward.channel as channel
from verl_ext.reward.channel import PID, READY

logger = logging.getLogger(__name__)

_PROJECT_ROOT = str(Path(__file__).resolve().parents[2])
_CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


@dataclass(frozen=True)
class Outcome:
    """What became of one task: ``ok`` (``value`` holds the result), ``timeout`` or ``error`` (``detail`` says)."""

    status: str
    value: Any = None
    detail: str = ""


class _Worker:
    def __init__(self, pid: int, task_fd: int, result_fd: int) -> None:
        self.pid, self.task_fd, self.result_fd = pid, task_fd, result_fd
        self.cpu_s = 0.0
        try:  # a pidfd names this very process even if its pid is reused later
            self.pidfd: int | None = os.pidfd_open(pid)
        except (AttributeError, OSError):
            self.pidfd = None

    def proc_cpu_s(self) -> float:
        """CPU seconds used so far (from /proc while alive, else the last reported figure)."""
        try:
            fields = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / _CLK_TCK
        except (OSError, IndexError, ValueError):
            return self.cpu_s

    def kill(self) -> None:
        try:
            if self.pidfd is not None:
                signal.pidfd_send_signal(self.pidfd, signal.SIGKILL)
            else:
                os.kill(self.pid, signal.SIGKILL)
        except (ProcessLookupError, OSError):
            pass  # already gone
        for fd in (self.task_fd, self.result_fd, self.pidfd):
            if fd is not None:
                try:
                    os.close(fd)
                except OSError:
                    pass


class WorkerPool:
    """``workers`` warm processes; see the module docstring. ``counts`` tallies ok/timeout/error and replacements."""

    def __init__(self, workers: int = 2, memory_limit_mb: int | None = 2048, startup_timeout_s: float = 120.0) -> None:
        if not isinstance(workers, int) or workers < 1:
            raise ValueError(f"WorkerPool: workers must be a positive int, got {workers!r}")
        if memory_limit_mb is not None and (not isinstance(memory_limit_mb, int) or memory_limit_mb < 256):
            raise ValueError(f"WorkerPool: memory_limit_mb must be null or an int >= 256, got {memory_limit_mb!r}")
        self.workers, self.memory_limit_mb, self.startup_timeout_s = workers, memory_limit_mb, startup_timeout_s
        self.counts: Counter[str] = Counter()
        self._idle: queue.Queue[_Worker] = queue.Queue()
        self._requests: queue.Queue[int | None] = queue.Queue()
        self._lock = threading.Lock()
        self._live: set[_Worker] = set()
        self._retired_cpu_s = 0.0
        self._closed = False
        self._ready = threading.Event()
        self._zygote: subprocess.Popen | None = None
        self._sock: socket.socket | None = None
        self._thread = threading.Thread(target=self._supervise, name="reward-worker-supervisor", daemon=True)
        self._thread.start()
        self._requests.put(workers)
        _LIVE_POOLS.add(self)

    # -- public -------------------------------------------------------------------------------------------------
    def wait_ready(self, timeout_s: float | None = None) -> bool:
        """Block until all workers are up (the zygote has imported and warmed math-verify, then forked them)."""
        return self._ready.wait(self.startup_timeout_s if timeout_s is None else timeout_s)

    def run(self, task: tuple, deadline: float, max_run_s: float | None = None) -> Outcome:
        """Run ``task`` on a worker; never later than ``deadline`` (``time.monotonic()``) plus a few milliseconds.

        ``max_run_s`` also cuts the task that long after it got its worker (waiting for a free worker counts
        against ``deadline`` only).
        """
        frame = channel.encode(task)  # an unpicklable task is the caller's bug: raise before taking a worker
        if self._closed:
            raise RuntimeError("WorkerPool is closed")
        try:
            worker = self._idle.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            self._count("timeout")
            self._count("no_free_worker")
            return Outcome("timeout", detail="no free worker before the deadline")
        if max_run_s is not None:
            deadline = min(deadline, time.monotonic() + max_run_s)
        try:
            channel.write(worker.task_fd, frame)
            status, value, cpu_s = channel.recv(worker.result_fd, deadline)
        except TimeoutError:
            self._replace(worker, "killed")
            self._count("timeout")
            return Outcome("timeout", detail="killed at the deadline")
        except (EOFError, OSError) as exc:
            self._replace(worker, "crashed")
            self._count("error")
            return Outcome("error", detail=f"worker died: {exc!r}")
        worker.cpu_s = cpu_s
        self._count(status)
        if status == "error" and str(value).startswith("MemoryError"):
            self._replace(worker, "out_of_memory")  # it exits after replying
        else:
            self._idle.put(worker)
        return Outcome("ok", value) if status == "ok" else Outcome(status, detail=str(value))

    def pids(self) -> tuple[int | None, list[int]]:
        """(zygote pid, live worker pids), for diagnostics and tests."""
        with self._lock:
            workers = sorted(w.pid for w in self._live)
        return (self._zygote.pid if self._zygote is not None else None), workers

    def cpu_seconds(self) -> float:
        """CPU seconds used by workers so far (live and retired; the zygote's start-up excluded)."""
        with self._lock:
            return self._retired_cpu_s + sum(w.proc_cpu_s() for w in self._live)

    def close(self) -> None:
        """Stop the workers and the zygote; later ``run`` calls raise."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            live, self._live = list(self._live), set()
        for worker in live:
            worker.kill()
        self._requests.put(None)
        self._thread.join(timeout=10)
        _LIVE_POOLS.discard(self)

    # -- internals ----------------------------------------------------------------------------------------------
    def _count(self, key: str, n: int = 1) -> None:
        with self._lock:
            self.counts[key] += n

    def _replace(self, worker: _Worker, reason: str) -> None:
        with self._lock:
            self.counts[reason] += 1
            self._live.discard(worker)
            self._retired_cpu_s += worker.proc_cpu_s()
        worker.kill()
        if reason != "killed":
            logger.warning("reward worker %d %s; replacing it", worker.pid, reason)
        self._requests.put(1)

    def _supervise(self) -> None:
        """Fork workers on request; this thread owns the zygote for the pool's lifetime."""
        while True:
            n = self._requests.get()
            if n is None:
                break
            for _ in range(n):
                if self._closed:
                    break
                try:
                    worker = self._fork()
                except (OSError, EOFError, RuntimeError, subprocess.SubprocessError) as exc:
                    self._count("spawn_failed")
                    logger.error("could not start a reward worker (%r); retrying in 1 s", exc)
                    self._stop_zygote()
                    time.sleep(1.0)
                    self._requests.put(1)
                    continue
                with self._lock:
                    if self._closed:
                        worker.kill()
                        break
                    self._live.add(worker)
                self._idle.put(worker)
                if len(self._live) >= self.workers:
                    self._ready.set()
        self._stop_zygote()

    def _start_zygote(self) -> None:
        parent_sock, child_sock = socket.socketpair()
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (_PROJECT_ROOT, env.get("PYTHONPATH")) if p)
        cmd = [sys.executable, "-m", "verl_ext.reward.worker", "--zygote", str(child_sock.fileno()),
               "--parent", str(os.getpid()), "--memory-limit-mb", str(self.memory_limit_mb or 0)]
        self._zygote = subprocess.Popen(cmd, pass_fds=[child_sock.fileno()], stdin=subprocess.DEVNULL, stdout=2,
                                        env=env, close_fds=True)
        child_sock.close()
        self._sock = parent_sock
        parent_sock.settimeout(self.startup_timeout_s)
        if parent_sock.recv(1) != READY:
            raise RuntimeError(f"reward worker zygote exited during start-up (code {self._zygote.poll()})")
        parent_sock.settimeout(30.0)
        self.counts["zygote_started"] += 1

    def _fork(self) -> _Worker:
        if self._sock is None or self._zygote is None or self._zygote.poll() is not None:
            self._stop_zygote()
            self._start_zygote()
        assert self._sock is not None
        task_r, task_w = os.pipe()
        result_r, result_w = os.pipe()
        try:
            socket.send_fds(self._sock, [b"F"], [task_r, result_w])
            reply = b""
            while len(reply) < PID.size:
                chunk = self._sock.recv(PID.size - len(reply))
                if not chunk:
                    raise EOFError("the zygote closed its socket")
                reply += chunk
        except BaseException:
            for fd in (task_w, result_r):
                os.close(fd)
            raise
        finally:
            os.close(task_r)
            os.close(result_w)
        return _Worker(PID.unpack(reply)[0], task_w, result_r)

    def _stop_zygote(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        if self._zygote is not None:
            try:
                self._zygote.wait(timeout=2)
            except subprocess.TimeoutExpired:
                self._zygote.kill()
                self._zygote.wait(timeout=5)
            self._zygote = None


_LIVE_POOLS: set[WorkerPool] = set()
_SHARED: dict[tuple[int, int | None], WorkerPool] = {}
_SHARED_LOCK = threading.Lock()


def shared_pool(workers: int = 2, memory_limit_mb: int | None = 2048) -> WorkerPool:
    """One pool per (workers, memory limit) per process: reward managers and scorers built alike share it."""
    key = (workers, memory_limit_mb)
    with _SHARED_LOCK:
        pool = _SHARED.get(key)
        if pool is None or pool._closed:
            pool = _SHARED[key] = WorkerPool(workers, memory_limit_mb)
        return pool


@atexit.register
def _close_all() -> None:
    for pool in list(_LIVE_POOLS):
        pool.close()


def _forget_parent_pools() -> None:
    """In a forked child the parent's pools are not ours (their threads did not survive the fork, their pipes are
    the parent's): forget them, so the child starts its own on first use."""
    global _SHARED_LOCK
    _SHARED.clear()
    _LIVE_POOLS.clear()
    _SHARED_LOCK = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_parent_pools)
