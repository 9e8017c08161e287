"""``LineageRefresher``: the wiring between the lineage forest and the pool (a fake and the real ``QueryPool``)."""

import json
import random
from types import SimpleNamespace

import pytest

from verl_ext.pool.config import PoolConfig
from verl_ext.pool.lineage import LineageConfig, LineageError, LineageForest
from verl_ext.pool.pool import QueryPool
from verl_ext.pool.lineage.refresh import LineageRefresher
from verl_ext.selection.frontier import draw_batch


class FakePool:
    """The pool hooks the refresher uses, over plain dicts (override cleared when the base changes)."""

    def __init__(self):
        self.records, self.base, self.rank = {}, {}, {}
        self.evicted, self.changed = [], []
        self.config = SimpleNamespace(track_changes=True)

    def add(self, rid, value, parent=None, d=1.0):
        self.records[rid] = SimpleNamespace(parent_id=parent, difficulty_factor=d, last_trained_step=None)
        self.base[rid] = self.rank[rid] = value
        self.changed.append(rid)

    def update(self, rid, value):
        self.base[rid] = self.rank[rid] = value
        self.changed.append(rid)

    def evict(self, rid):
        for d in (self.records, self.base, self.rank):
            del d[rid]
        self.evicted.append(rid)

    def measured_value(self, rid):
        return self.base[rid]

    def set_ranking_value(self, rid, p):
        assert rid in self.records
        self.rank[rid] = p

    def drain_evicted(self):
        out, self.evicted = self.evicted, []
        return out

    def drain_changed(self):
        out, self.changed = self.changed, []
        return out

    def get(self, rid):
        return self.records[rid]

    def __contains__(self, rid):
        return rid in self.records


def family():
    pool = FakePool()
    pool.add(1, 0.6)
    pool.add(2, 0.9, parent=1, d=0.8)
    pool.add(3, 0.25, parent=1, d=1.2)
    ref = LineageRefresher(pool, LineageConfig(method="childagg"))
    ref.link(2)
    ref.link(3)
    return pool, ref


def test_refresh_writes_ranking_keys_from_base_values():
    pool, ref = family()
    metrics = ref.step(1)
    # m = mean(g(0.8, 0.8)=1.0, g(-0.5, 1.2)=-0.6) = 0.2; new = 0.5*0.2 + 0.5*0.2 = 0.2 -> p = 0.6
    assert pool.rank[1] == pytest.approx(0.6)
    pool.update(3, 0.0)  # r=-1 -> g=-1.2 -> clipped -1 -> m=0, new = 0.1 -> p=0.55
    ref.step(2)
    assert pool.rank[1] == pytest.approx(0.55) and pool.base[1] == 0.6
    assert metrics["lineage/edges"] == 2 and metrics["lineage/nodes"] == 3
    assert set(metrics) >= {"lineage/max_depth", "lineage/refreshed_nodes", "lineage/mean_abs_change",
                            "lineage/dropped"}


def test_eviction_is_synced_and_bounded():
    pool, ref = family()
    ref.step(1)
    pool.evict(2)
    pool.evict(3)
    ref.step(2)
    assert len(ref.forest) == 0 and ref.metrics()["lineage/dropped"] == 3
    assert pool.rank[1] == pytest.approx(0.6)  # back to its own value


def test_dangling_and_orphan_links_are_rejected():
    pool, ref = family()
    pool.add(4, 0.5, parent=99)
    with pytest.raises(LineageError, match="dangling parent: record 99"):
        ref.link(4)
    with pytest.raises(LineageError, match="dangling child"):
        ref.link(77)
    pool.add(5, 0.5)
    with pytest.raises(LineageError, match="no parent"):
        ref.link(5)


def test_cadence_disabled_and_track_changes():
    pool, ref = family()
    ref.config.cadence = 3
    ref.step(1)
    assert pool.rank[1] == 0.6 and ref.last_refresh_step is None
    ref.step(3)
    assert ref.last_refresh_step == 3
    off = LineageRefresher(FakePool(), LineageConfig(enabled=False))
    assert off.link(2) is False and off.step(1) == {}
    bad = FakePool()
    bad.config.track_changes = False
    with pytest.raises(LineageError, match="track_changes"):
        LineageRefresher(bad)


def test_state_round_trip_and_resync():
    pool, ref = family()
    ref.step(1)
    state = json.loads(json.dumps(ref.state_dict()))
    again = LineageRefresher(pool, LineageConfig(method="childagg"))
    again.load_state_dict(state)
    pool.base[3] = 0.0  # changed while nobody listened (e.g. restored from an older checkpoint)
    again.resync()
    again.refresh(full=True)
    assert pool.rank[1] == pytest.approx(0.55) and again.last_refresh_step == 1


@pytest.mark.parametrize("mode", ["incremental", "full"])
def test_with_query_pool(mode):
    rng = random.Random(0)
    pool = QueryPool(PoolConfig(max_pool_size=60), seed=0)
    pool.add_seeds_bulk([f"q{i}" for i in range(40)], ["1"] * 40, "toy", priors=[rng.random() for _ in range(40)])
    ref = LineageRefresher(pool, LineageConfig(mode=mode))
    for step in range(1, 16):
        batch = draw_batch(pool, 8, step)
        pool.feedback({rid: (rng.randint(0, 4), 4) for rid in batch}, step)
        for parent in batch[:3]:
            if parent in pool:
                child = pool.add_child("new q", "2", "toy", parent, rng.choice([0.75, 1.0, 1.33]), step)
                if child in pool:
                    ref.link(child)
        pool.reinsert(step, 8)
        ref.step(step)
        forest = ref.forest
        for rid in forest.ids():
            assert rid in pool or not forest.is_live(rid)
            if rid in pool and forest.children(rid) and forest.value(rid) is not None:
                # a record measured no earlier than its children keeps its own measurement
                own = ref._own_measurement_is_newest(rid)
                want = pool.measured_value(rid) if own else forest.value(rid)
                assert pool.ranking_value(rid) == pytest.approx(want)
        check = LineageForest(ref.config)
        check.load_state_dict(forest.state_dict())
        check.refresh(full=True)
        assert all(check.value(i) == pytest.approx(forest.value(i), abs=1e-12) for i in forest.ids()
                   if forest.value(i) is not None)
    m = ref.metrics()
    assert m["lineage/edges"] > 0 and m["lineage/dropped"] > 0


def test_a_freshly_measured_parent_keeps_its_own_value():
    """A parent measured after its children is not blended with their older outcomes (stale children once kept a
    solved parent at the frontier); a child measured later than the parent brings the blend back."""
    pool, ref = family()
    pool.records[2].last_trained_step = 3
    pool.records[3].last_trained_step = 3
    pool.records[1].last_trained_step = 5
    ref.refresh(full=True)
    assert pool.rank[1] == 0.6 and ref.forest.value(1) == pytest.approx(0.6)
    pool.records[1].last_trained_step = 5
    pool.update(1, 1.0)
    ref.refresh(full=True)
    assert pool.rank[1] == 1.0  # its own new measurement, not the blend with stale children
    pool.records[3].last_trained_step = 6
    pool.update(3, 0.25)
    ref.refresh(full=True)
    assert pool.rank[1] != 1.0  # a newer child outcome: the lineage estimate applies again
