"""The process side of isolated scoring: a zygote that forks warm workers, and the workers' task loop.

``python -m verl_ext.reward.worker --zygote FD --parent PID`` starts the zygote: it imports math-verify and sympy
once, warms them up (grammar compilation, lazy imports), reports ready on its socket, and then forks one worker
per request, handing it the two pipe ends the parent sent along (``socket.recv_fds``). Forking a warm,
single-threaded zygote takes milliseconds, so a killed worker is replaced at once; the parent never forks itself
(it is typically a multi-threaded Ray actor, where ``fork`` is unsafe and ``spawn`` would re-import the actor's
``__main__``).

Lifetime: each process asks the kernel to SIGKILL it when its parent dies (``PR_SET_PDEATHSIG``): the zygote dies
with the parent's supervisor thread (so with the Ray actor), and workers die with the zygote. Workers also exit on
end-of-file from the parent, and run under an address-space limit (``RLIMIT_AS``) so a memory bomb raises
``MemoryError`` instead of exhausting the host.

Tasks (pickled tuples) and replies ``(status, value, worker_cpu_s)``; status is ``ok``, ``timeout`` (math-verify's
own timer fired; the worker survives) or ``error`` (``"Type: message"``):
- ``("equal", pred, gold, timeout_s, min_digits)`` -> ``(equal, how)`` from ``verify.answers_equal``;
- ``("call", target, kwargs)`` -> ``target(**kwargs)``; ``target`` is a picklable function or
  ``("path", module_path, name, extra_kwargs)`` loaded the way verl loads ``custom_reward_function``;
- ``("ping",)`` -> ``"pong"``.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import logging
import os
import resource
import signal
import socket
import sys
from typing import Any

from verl_ext.reward import channel

logger = logging.getLogger(__name__)

_PR_SET_PDEATHSIG = 1
_MODULES: dict[str, Any] = {}


def die_with_parent(expected_parent: int) -> None:
    """SIGKILL this process when its parent thread exits (Linux); exit now if the parent is already gone."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: workers still exit on end-of-file when idle
        logger.debug("PR_SET_PDEATHSIG unavailable")
    if os.getppid() != expected_parent:
        os._exit(1)


def _load(target: Any) -> Any:
    if not (isinstance(target, tuple) and target and target[0] == "path"):
        return target, {}
    _, module_path, name, extra = target
    module = _MODULES.get(module_path)
    if module is None:
        if module_path.startswith("pkg://"):
            module = importlib.import_module(module_path[len("pkg://"):].replace("/", "."))
        else:
            path = module_path[len("file://"):] if module_path.startswith("file://") else module_path
            spec = importlib.util.spec_from_file_location(f"custom_reward_{abs(hash(path))}", path)
            if spec is None or spec.loader is None:
                raise ImportError(f"cannot load a module from {path!r}")
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
        _MODULES[module_path] = module
    return getattr(module, name), dict(extra or {})


def handle(task: tuple) -> tuple[str, Any]:
    """Run one task; never raises for a task's own failure (it becomes an ``error``/``timeout`` reply)."""
    from verl_ext.reward.verify import ComparisonTimeout, answers_equal

    kind = task[0]
    try:
        if kind == "equal":
            _, pred, gold, timeout_s, min_digits = task
            return "ok", answers_equal(pred, gold, timeout_s, min_digits)
        if kind == "call":
            _, target, kwargs = task
            fn, extra = _load(target)
            return "ok", fn(**{**kwargs, **extra})
        if kind == "ping":
            return "ok", "pong"
        return "error", f"ValueError: unknown task kind {kind!r}"
    except ComparisonTimeout as exc:
        return "timeout", str(exc)
    except MemoryError:
        raise  # the worker's heap may be unusable: let serve() exit and the parent replace it
    except Exception as exc:  # noqa: BLE001 - reported to the parent, which counts and logs it
        return "error", f"{type(exc).__name__}: {exc}"


def serve(task_fd: int, result_fd: int, memory_limit_mb: int | None) -> None:
    """A worker's loop; exits the process on end-of-file or after a ``MemoryError``."""
    if memory_limit_mb:
        limit = int(memory_limit_mb) * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    while True:
        try:
            task = channel.recv(task_fd)
        except (EOFError, OSError):
            os._exit(0)
        try:
            status, value = handle(task)
        except MemoryError:
            status, value = "error", "MemoryError: the worker exceeded its memory limit"
            _reply(result_fd, status, value)
            os._exit(3)
        _reply(result_fd, status, value)


def _reply(result_fd: int, status: str, value: Any) -> None:
    times = os.times()
    try:
        frame = channel.encode((status, value, times.user + times.system))
    except Exception as exc:  # noqa: BLE001 - an unpicklable result becomes an error reply, counted by the parent
        frame = channel.encode(("error", f"reply not picklable: {type(value).__name__}: {exc}", 0.0))
    try:
        channel.write(result_fd, frame)
    except OSError:  # the parent is gone
        os._exit(0)


def warm_up() -> None:
    """Import and exercise math-verify once so forked workers start warm."""
    from verl_ext.reward.verify import answers_equal

    answers_equal("\\frac{1}{2}", "0.5", 5)
    answers_equal("x^2+2x+1", "(x+1)^2", 5)
    answers_equal("\\left(3, \\frac{\\pi}{2}\\right)", "(3,\\pi/2)", 5)


def zygote(sock_fd: int, parent: int, memory_limit_mb: int | None) -> None:
    """Fork workers on request until the parent closes the socket."""
    die_with_parent(parent)
    logging.getLogger("math_verify").setLevel(logging.ERROR)  # timeouts are counted by the parent
    sock = socket.socket(fileno=sock_fd)
    warm_up()
    sock.sendall(channel.READY)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the kernel reaps exited workers
    me = os.getpid()
    while True:
        try:
            msg, fds, _, _ = socket.recv_fds(sock, 1, 2)
        except OSError:
            break
        if not msg or len(fds) != 2:
            break
        pid = os.fork()
        if pid == 0:
            sock.close()
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            die_with_parent(me)
            serve(fds[0], fds[1], memory_limit_mb)
            os._exit(0)
        for fd in fds:
            os.close(fd)
        sock.sendall(channel.PID.pack(pid))
    os._exit(0)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="verl_ext reward worker zygote (started by WorkerPool)")
    parser.add_argument("--zygote", type=int, required=True, help="socket file descriptor shared with the parent")
    parser.add_argument("--parent", type=int, required=True, help="pid of the parent process")
    parser.add_argument("--memory-limit-mb", type=int, default=0)
    args = parser.parse_args(argv)
    zygote(args.zygote, args.parent, args.memory_limit_mb or None)


if __name__ == "__main__":
    main(sys.argv[1:])
