"""The worker pool: a hard deadline for any task (even one holding the GIL), kill and replace, no pool exhaustion,
errors as counted outcomes, a memory cap, and processes that die with their owner."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from verl_ext.reward.workers import WorkerPool, shared_pool

TASKS = '''
import time

def ok(x=1, **_):
    return {"score": float(x), "acc": float(x), "pred": str(x)}

def spin(**_):
    while True:  # pure bytecode, never sleeps: holds the GIL
        pass

def big_int(**_):
    return len(str(9 ** (9 ** 9)))  # one C call that signals cannot interrupt

def boom(**_):
    raise ZeroDivisionError("scorer bug")

def hog(**_):
    return len(bytearray(8 * 1024 ** 3))

def unpicklable(**_):
    return lambda: None
'''


@pytest.fixture(scope="module")
def tasks(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("tasks") / "tasks.py"
    path.write_text(TASKS)
    return path


@pytest.fixture(scope="module")
def pool():
    p = shared_pool()  # the pool the scorer tests use too: one zygote start per session
    assert p.wait_ready(120)
    return p


def _call(pool: WorkerPool, tasks: Path, name: str, limit_s: float, **kwargs):
    start = time.monotonic()
    out = pool.run(("call", ("path", str(tasks), name, {}), kwargs), start + limit_s)
    return out, time.monotonic() - start


@pytest.mark.parametrize("name", ["spin", "big_int"])
def test_a_stall_is_killed_at_the_deadline_and_replaced(pool, tasks, name) -> None:
    killed = pool.counts["killed"]
    out, took = _call(pool, tasks, name, 0.5)
    assert out.status == "timeout" and took < 0.5 + 0.25
    assert pool.counts["killed"] == killed + 1
    out, took = _call(pool, tasks, "ok", 5.0, x=3)  # the replacement serves the next task
    assert out.status == "ok" and out.value["pred"] == "3"


def test_stalls_do_not_exhaust_the_pool_for_normal_items(pool, tasks) -> None:
    results: dict[str, object] = {}

    def stall(i: int) -> None:
        results[f"stall{i}"] = _call(pool, tasks, "spin", 0.6)[0].status

    threads = [threading.Thread(target=stall, args=(i,)) for i in range(2)]  # both workers stall
    for t in threads:
        t.start()
    time.sleep(0.1)
    out, took = _call(pool, tasks, "ok", 3.0)  # waits for a worker, then is served by a replacement
    for t in threads:
        t.join(5)
    assert results == {"stall0": "timeout", "stall1": "timeout"}
    assert out.status == "ok" and took < 2.0


def test_errors_are_outcomes_not_exceptions(pool, tasks) -> None:
    out, _ = _call(pool, tasks, "boom", 5.0)
    assert out.status == "error" and "ZeroDivisionError: scorer bug" in out.detail
    out, _ = _call(pool, tasks, "unpicklable", 5.0)
    assert out.status == "error" and "not picklable" in out.detail
    out, _ = _call(pool, tasks, "no_such_function", 5.0)
    assert out.status == "error" and "AttributeError" in out.detail
    assert _call(pool, tasks, "ok", 5.0)[0].status == "ok"


def test_memory_cap_turns_a_memory_bomb_into_an_error(pool, tasks) -> None:
    out, _ = _call(pool, tasks, "hog", 10.0)
    assert out.status == "error" and out.detail.startswith("MemoryError")
    assert pool.counts["out_of_memory"] >= 1
    assert _call(pool, tasks, "ok", 5.0)[0].status == "ok"


def test_closed_pool_refuses_work() -> None:
    p = WorkerPool(workers=1)
    p.close()
    with pytest.raises(RuntimeError, match="closed"):
        p.run(("ping",), time.monotonic() + 1)


def test_bad_settings_are_rejected() -> None:
    with pytest.raises(ValueError, match="workers"):
        WorkerPool(workers=0)
    with pytest.raises(ValueError, match="memory_limit_mb"):
        WorkerPool(memory_limit_mb=10)


_OWNER = """
import sys, time
from verl_ext.reward.workers import WorkerPool, shared_pool
pool = WorkerPool(workers=2)
assert pool.wait_ready(120)
while len(pool.pids()[1]) < 2:
    time.sleep(0.01)
zygote, workers = pool.pids()
print(zygote, *workers, flush=True)
time.sleep(600)
"""


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux-only")
def test_processes_die_with_their_owner(repo_root) -> None:
    """A SIGKILLed owner (e.g. a Ray actor that dies) takes its zygote and workers with it."""
    owner = subprocess.Popen([sys.executable, "-c", _OWNER], stdout=subprocess.PIPE, text=True, cwd=repo_root,
                             env={**os.environ, "PYTHONPATH": str(repo_root)})
    try:
        pids = [int(p) for p in owner.stdout.readline().split()]
        assert len(pids) == 3 and all(_alive(p) for p in pids)
    finally:
        owner.send_signal(signal.SIGKILL)
        owner.wait(10)
    deadline = time.monotonic() + 10
    while any(_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(_alive(p) for p in pids)
