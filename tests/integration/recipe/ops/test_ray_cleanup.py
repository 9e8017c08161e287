"""``recipe/heapa/ops/ray_cleanup.py``: what a run started ends with it, even a process that ignores SIGTERM."""

from __future__ import annotations

import subprocess
import sys
import time

import psutil
import pytest

from recipe.heapa.ops import ray_cleanup

# a grandchild (like a Ray worker under its raylet) that ignores SIGTERM and would outlive its parent
TREE = ("import signal, subprocess, sys, time\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "subprocess.Popen([sys.executable, '-c', 'import signal, time; signal.signal(signal.SIGTERM, "
        "signal.SIG_IGN); time.sleep(120)'])\n"
        "time.sleep(120)\n")


def _tree():
    child = subprocess.Popen([sys.executable, "-c", TREE])
    deadline = time.time() + 20
    while time.time() < deadline and len(psutil.Process(child.pid).children()) < 1:
        time.sleep(0.1)
    procs = [psutil.Process(child.pid)] + psutil.Process(child.pid).children()
    assert len(procs) == 2
    return child, procs


@pytest.fixture
def tree(monkeypatch):
    """The test's own process tree stands in for the driver's descendants (pytest's other children, e.g. a
    session's teacher server, must not be touched)."""
    child, procs = _tree()
    monkeypatch.setattr(ray_cleanup, "descendants", lambda: list(procs))
    yield child, procs
    for p in procs:
        if p.is_running():
            p.kill()
    child.wait(timeout=10)


def test_descendants_are_ended_whatever_they_do_with_sigterm(tree):
    child, procs = tree
    killed = ray_cleanup.stop_local_cluster(grace_s=0.5)
    child.wait(timeout=10)
    assert sorted(int(k.split(":")[0]) for k in killed) == sorted(p.pid for p in procs)
    assert not any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in procs)


@pytest.mark.parametrize("local", [True, False])
def test_the_context_cleans_on_an_error_only_a_cluster_it_started(tree, local):
    _, procs = tree
    with pytest.raises(RuntimeError, match="boom"), ray_cleanup.local_cluster_cleanup(local, grace_s=0.5):
        raise RuntimeError("boom")
    alive = [p for p in procs if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    assert alive == ([] if local else procs)
