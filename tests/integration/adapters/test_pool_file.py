"""The pool's checkpoint file at scale: a 10^5-record pool mid-run round-trips through ``pool_state.pkl`` and draws
the same next batches; a torn write leaves the previous file in place (the 10^6 timing is the benchmark's job:
``python -m verl_ext.bench.pool_checkpoint``)."""

import os

import numpy as np
import pytest

from verl_ext.adapters import pool_file
from verl_ext.pool import PoolConfig, QueryPool
from verl_ext.selection.frontier import draw_batch

N = 100_000


def _pool_mid_run() -> QueryPool:
    rng = np.random.default_rng(0)
    pool = QueryPool(PoolConfig(max_pool_size=N + 1000), seed=1)
    pool.add_seeds_bulk([[{"role": "user", "content": f"problem {i}"}] for i in range(N)], [str(i) for i in range(N)],
                        "math", priors=rng.uniform(size=N).tolist())
    for step in range(5):
        ids = draw_batch(pool, 512, step)
        pool.feedback({i: (int(rng.integers(0, 9)), 8) for i in ids}, step)
        for parent in ids[:64]:
            pool.add_child(f"child of {parent}", "1", "math", parent, 1.1, step)
        pool.reinsert(step, 512)
    return pool


def test_round_trip_at_1e5_records_continues_identically(tmp_path):
    pool = _pool_mid_run()
    ref = pool_file.write_pool_file(str(tmp_path), pool.state_dict())
    assert ref["records"] == len(pool) and os.path.getsize(tmp_path / pool_file.FILE_NAME) > 0
    restored = QueryPool(PoolConfig(max_pool_size=N + 1000), seed=99)
    restored.load_state_dict(pool_file.read_pool_file(ref, str(tmp_path)))
    for step in (5, 6):
        a, b = draw_batch(pool, 512, step), draw_batch(restored, 512, step)
        assert a == b
        outcome = {i: (3, 8) for i in a}
        pool.feedback(outcome, step)
        restored.feedback(outcome, step)
    assert restored.metrics() == pool.metrics()


def test_a_failed_write_keeps_the_previous_file(tmp_path, monkeypatch):
    small = QueryPool(PoolConfig(max_pool_size=10), seed=0)
    small.add_seed("q", "a", "s")
    ref = pool_file.write_pool_file(str(tmp_path), small.state_dict())

    def boom(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(pool_file.pickle, "dump", boom)
    with pytest.raises(OSError, match="disk full"):
        pool_file.write_pool_file(str(tmp_path), small.state_dict())
    assert pool_file.read_pool_file(ref, str(tmp_path))["records"]  # the previous, complete file still loads
    assert sorted(os.listdir(tmp_path)) == [pool_file.FILE_NAME]  # no partial file left behind
    with pytest.raises(ValueError, match="not a verl-heapa pool file"):
        (tmp_path / pool_file.FILE_NAME).write_bytes(b"\x80\x05N.")  # pickle of None
        pool_file.read_pool_file(ref, str(tmp_path))
