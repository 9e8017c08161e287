"""A signal to the whole job reaches the driver, not the Ray processes it starts.

Slurm's ``scancel`` and preemption, ``kill -- -PGID`` and Ctrl-C in a terminal signal every process of the job's
process group. ``ray.init`` without an address starts the local cluster (gcs, raylet, and through the raylet every
worker) as children of the driver, in the driver's process group: the same SIGTERM that asks the driver for a
checkpoint kills the workers the checkpoint needs, and the run ends as a crash (``ActorUnavailableError``).

Ray starts each of its processes through ``ray._private.services.ConsolePopen`` (a ``subprocess.Popen``). Before
``ray.init``, ``start_ray_in_own_session`` makes that class start each in a session of its own, so a job-wide signal
reaches the driver (which turns it into a checkpoint, ``ops/preemption.py``) and the cluster keeps running until
the driver shuts it down. Nothing else changes: Ray still ties those processes to the driver's life (on Linux
the kernel ends them when it dies: ``PR_SET_PDEATHSIG``, set in Ray's own ``preexec_fn``), and
``ops/ray_cleanup.py`` still finds them as the driver's descendants.
"""

from __future__ import annotations

import logging

logger = logging.getLogger(__name__)

PRIVATE_NAME = "ray._private.services.ConsolePopen"  # tests/integration/recipe/ops/test_ray_session.py checks it


def start_ray_in_own_session() -> bool:
    """Make the Ray processes this driver starts from now on leaders of their own sessions (idempotent). Returns
    False, with a warning, when this Ray has no ``ConsolePopen`` to adapt (a job-wide signal then ends the run)."""
    from ray._private import services

    base = getattr(services, "ConsolePopen", None)
    if base is None:
        logger.warning("%s not found in this Ray: a signal to the whole job will reach the Ray workers too", PRIVATE_NAME)
        return False
    if getattr(base, "own_session", False):
        return True

    class OwnSessionPopen(base):
        own_session = True

        def __init__(self, *args, **kwargs):
            kwargs.setdefault("start_new_session", True)
            super().__init__(*args, **kwargs)

    services.ConsolePopen = OwnSessionPopen
    return True
