"""Nothing left running: the local Ray cluster a run started is gone within seconds of the run's end.

``ray.init`` without an address starts a cluster whose processes (gcs, raylet, workers, actors) are the driver's
descendants. ``ray.shutdown`` stops the raylet, which normally takes its workers with it, but a worker busy in a
blocking call can outlive it: it is re-parented to init and stays (measured: a ``ray::AgentLoopWorkerTQ`` with
590 MB resident after ``run_heapa_dapo_qwen.sh`` returned). So when the run ends (normally, on an error, on
SIGTERM/SIGINT turned into an exception or an exit), the driver lists its descendants while they are still
attached to it, shuts Ray down, waits up to ``grace_s`` for them and kills whatever remains.

Only a cluster this driver started is cleaned: one it attached to (``ray start`` on the nodes, a Slurm or
Kubernetes cluster) belongs to someone else.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager

import psutil

logger = logging.getLogger(__name__)

GRACE_S = 10.0  # with the kill, well inside the 15 s a launcher's user waits


def descendants() -> list[psutil.Process]:
    try:
        return psutil.Process().children(recursive=True)
    except psutil.Error:  # the process table changed under us: nothing listable is nothing to clean
        return []


def stop_local_cluster(grace_s: float = GRACE_S) -> list[str]:
    """Shut Ray down and end every process this driver started; returns 'pid:name' of those it had to kill."""
    import ray

    procs = descendants()  # before shutdown: afterwards the workers may already hang off init
    if ray.is_initialized():
        ray.shutdown()
    _, alive = psutil.wait_procs(procs, timeout=grace_s)
    killed = []
    for proc in alive:
        try:
            name = " ".join(proc.cmdline()[:2]) or proc.name()
            proc.kill()
            killed.append(f"{proc.pid}:{name}")
        except psutil.NoSuchProcess:
            continue
    if killed:
        psutil.wait_procs(alive, timeout=5.0)
        logger.warning("killed %d process(es) the run left behind after ray.shutdown: %s", len(killed), killed)
    return killed


@contextmanager
def local_cluster_cleanup(local: bool, grace_s: float = GRACE_S) -> Iterator[None]:
    """Around a run: on any exit (return, exception, ``SystemExit``, ``KeyboardInterrupt``) stop the local
    cluster when ``local``; an attached cluster is left alone."""
    try:
        yield
    finally:
        if local:
            stop_local_cluster(grace_s)
