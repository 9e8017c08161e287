"""``recipe/heapa/ops/ray_session.py``: a SIGTERM to the driver's whole process group (Slurm's ``scancel``, ``kill --
-PGID``) reaches the driver, and the local Ray cluster it started keeps serving. A real ``ray.init`` in a child
process of its own session, so the signal reaches nothing of the test's."""

from __future__ import annotations

import json
import subprocess
import sys

DRIVER = """
import json, os, signal, sys, time
import psutil, ray
from recipe.heapa.ops.ray_session import start_ray_in_own_session
assert start_ray_in_own_session() and start_ray_in_own_session()  # idempotent
ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)

@ray.remote
class Worker:  # verl's workers are actors: a SIGTERM ends an actor's process
    def ping(self):
        return os.getpid()

actor = Worker.remote()
worker = ray.get(actor.ping.remote())
cluster = psutil.Process().children(recursive=True)  # gcs, raylet, the actor's worker, ...
sessions = {p.pid: os.getsid(p.pid) for p in cluster}
got = []
signal.signal(signal.SIGTERM, lambda *_: got.append(1))
os.killpg(os.getpgrp(), signal.SIGTERM)  # every process of the job's process group
time.sleep(5)  # unprotected, the raylet is gone within this
ended = [p.name() for p in cluster if not p.is_running() or p.status() == psutil.STATUS_ZOMBIE]
after = ray.get(actor.ping.remote(), timeout=60)
fresh = ray.get(Worker.remote().ping.remote(), timeout=60)  # a new actor needs the raylet
print(json.dumps({"got": got, "sid": os.getsid(0), "sessions": sessions, "worker": worker, "after": after,
                  "ended": ended, "fresh": fresh}))
ray.shutdown()
"""


def test_a_job_wide_sigterm_reaches_the_driver_and_spares_its_ray_cluster(repo_root):
    proc = subprocess.run([sys.executable, "-c", DRIVER], cwd=repo_root, capture_output=True, text=True, timeout=180,
                          start_new_session=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["got"] == [1]  # the driver heard it (and would checkpoint) ...
    assert report["ended"] == [] and report["after"] == report["worker"]  # ... and every Ray process still runs
    assert report["fresh"] > 0
    assert report["sessions"] and report["sid"] not in report["sessions"].values()  # gcs, raylet, workers
