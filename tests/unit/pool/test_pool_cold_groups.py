"""``cold_draw: signal``: group labels, the grouped queue's restore, the group draw's lean towards groups with signal,
and the pool's state round trip under it (the grouped queue's random operations: ``test_pool_cold_queue.py``)."""

import json
import logging

import numpy as np

from verl_ext.pool import PoolConfig, QueryPool
from verl_ext.pool.cold_groups import ColdGroupSignal, GroupedColdQueue, group_label
from verl_ext.selection.frontier import draw_batch


def test_group_label_reads_data_source_or_a_path_into_extra():
    extra = {"ability": "math", "extra_info": {"level": 3, "split": "train"}}
    assert group_label("arith", extra, "data_source") == "arith"
    assert group_label("arith", extra, "extra_info.level") == "3"
    assert group_label("arith", extra, "extra_info.topic") == ""
    assert group_label("arith", None, "extra_info.level") == ""
    assert group_label("arith", {"extra_info": "flat"}, "extra_info.level") == ""


def test_load_rebuilds_the_groups_from_the_saved_layout():
    queue = GroupedColdQueue(lambda rid: "even" if rid % 2 == 0 else "odd")
    for rid, arrival in ((4, 0), (3, 1), (8, 2), (5, -1)):
        queue.push(rid, arrival)
    twin = GroupedColdQueue(lambda rid: "even" if rid % 2 == 0 else "odd")
    twin.load([rid for rid, _ in queue.items()], [a for _, a in queue.items()])
    assert list(twin.items()) == list(queue.items())
    assert (twin.pop_group("odd"), twin.pop_group("even"), twin.pop_group("odd")) == (5, 4, 3)


def test_the_draw_leans_towards_the_group_that_reads_near_one_half():
    queue = GroupedColdQueue(lambda rid: "mid" if rid < 100 else "hopeless")
    for rid in range(200):
        queue.push(rid, rid)
    signal = ColdGroupSignal()
    assert signal.estimate("mid") == 0.5  # never measured: tried as if at 0.5
    for _ in range(10):
        signal.observe("mid", 0.5)
        signal.observe("hopeless", 0.0)
    drawn = signal.draw(queue, 40, np.random.default_rng(0))
    mid = sum(rid < 100 for rid in drawn)
    # weights 100 * (0.25 + 0.01) against 100 * (v(1-v) + 0.01) with v = 0.5 / 7.5 (decayed count 6.5)
    assert mid >= 30 and len(set(drawn)) == 40
    assert sorted(rid for rid in drawn if rid < 100) == list(range(mid))  # each group's earliest arrivals
    metrics = signal.metrics()
    assert metrics["pool/cold_group_signal_drawn"] > metrics["pool/cold_group_signal_queue"]
    assert len(signal.draw(queue, 500, np.random.default_rng(1))) == 160  # never more than the queue holds


def _pool(draw: str, key: str = "extra_info.level") -> QueryPool:
    cfg = PoolConfig(cold_draw=draw, cold_group_key=key, max_window_visits=1, boundary="progress")
    pool = QueryPool(cfg, seed=5)
    extras = [{"extra_info": {"level": "easy" if i % 4 else "hard"}} for i in range(400)]
    pool.add_seeds_bulk([f"q{i}" for i in range(400)], ["1"] * 400, "toy", extras=extras)
    return pool


def _train(pool: QueryPool, steps: range) -> list[list[int]]:
    batches = []
    for step in steps:
        ids = draw_batch(pool, 16, step)
        pool.feedback({rid: (0 if pool.get(rid).extra["extra_info"]["level"] == "hard" else 4, 8) for rid in ids},
                      step)
        pool.reinsert(step, 16)
        batches.append(ids)
    return batches


def test_pool_cold_seats_skip_the_hopeless_level_and_resume_identically():
    lean, fifo = _pool("signal"), _pool("arrival")
    hard = {}
    for name, pool in (("lean", lean), ("fifo", fifo)):
        trained = [rid for batch in _train(pool, range(12))[4:] for rid in batch]  # once both levels are measured
        hard[name] = np.mean([pool.get(rid).extra["extra_info"]["level"] == "hard" for rid in trained])
    assert hard["fifo"] > 0.2 and hard["lean"] < hard["fifo"] / 2, hard
    assert "pool/cold_group_signal_drawn" in lean.metrics()
    assert "pool/cold_group_signal_drawn" not in fifo.metrics()
    twin = _pool("signal")
    twin.load_state_dict(json.loads(json.dumps(lean.state_dict())))
    assert _train(twin, range(12, 18)) == _train(lean, range(12, 18))


def test_one_group_draws_the_batches_arrival_order_draws():
    single, fifo = _pool("signal", key="data_source"), _pool("arrival")
    assert _train(single, range(6)) == _train(fifo, range(6))
    assert single.rng.bit_generator.state == fifo.rng.bit_generator.state


def test_a_key_no_record_has_is_warned_once(caplog):
    with caplog.at_level(logging.WARNING, logger="verl_ext.pool.pool"):
        pool = _pool("signal", key="extra_info.topic")
        _train(pool, range(2))
    warned = [r for r in caplog.records if "cold_group_key" in r.getMessage()]
    assert len(warned) == 1 and "'extra_info.topic'" in warned[0].getMessage()
