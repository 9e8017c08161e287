"""Property: incremental refresh == full refresh == a naive reference, on random forests and update sequences.

Two forests receive the same operations; one refreshes incrementally, the other fully. Each writes its results
into an emulated pool ranking (the pool clears an override when the base value changes, like ``QueryPool``).
After every refresh the stored values, the rankings and a straightforward reference implementation agree.
"""

import math
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from verl_ext.pool.lineage import LineageConfig, LineageError, LineageForest

IDS = st.integers(0, 11)  # few ids: edges collide, nodes get many children and updates
VALUES = st.one_of(st.none(), st.sampled_from([0.0, 0.25, 0.5, 1.0]), st.floats(0, 1))
SET_VALUES = st.one_of(st.sampled_from([0.0, 0.5, 1.0]), st.floats(0, 1))  # a measured value never goes back to None
DIFFS = st.one_of(st.none(), st.sampled_from([0.75, 1.0, 1.33]), st.floats(0.5, 2.0))
ADD = st.tuples(st.just("add"), IDS, IDS, DIFFS)
SET = st.tuples(st.just("set"), IDS, SET_VALUES)
OPS = st.lists(st.one_of(
    ADD, ADD, SET, SET, st.tuples(st.just("remove"), IDS), st.tuples(st.just("refresh")),
), min_size=5, max_size=60)
CONFIGS = st.builds(
    LineageConfig,
    method=st.sampled_from(["pathagg", "childagg"]),
    blend=st.sampled_from([0.0, 0.5, 0.8]),
    tau=st.sampled_from([1.0, 0.5, 3.0]),
    weighting=st.sampled_from(["softmax", "linear"]),
    max_depth=st.sampled_from([None, None, 1, 2]),
)


def clip(x):
    return max(-1.0, min(1.0, x))


def reference(f: LineageForest, cfg: LineageConfig) -> dict[int, float | None]:
    """Spec §6 written as plainly as possible, reading only the public queries of the forest."""
    nodes = sorted(f.ids(), key=f.depth, reverse=True)
    kids = {u: f.children(u) for u in nodes}
    leaves = {}
    for u in nodes:
        leaves[u] = sum(max(1, leaves[c]) for c in kids[u]) if kids[u] else 1
        assert f.leaf_count(u) == leaves[u]
        assert all(f.depth(c) == f.depth(u) + 1 and f.parent(c) == u for c in kids[u])
    a = {u: None if f.base(u) is None else 2 * f.base(u) - 1 for u in nodes}

    def agg(u, vals):
        num = den = 0.0
        for c in kids[u]:
            v = vals[c]
            if v is None:
                continue
            d = f.difficulty(c)
            g = clip(v / d if v >= 0 else v * d)
            if cfg.method == "childagg":
                w = 1.0
            elif cfg.weighting == "linear":
                w = float(leaves[c])
            else:
                w = float(leaves[c]) ** (1 / cfg.tau)
            num, den = num + w * g, den + w
        if den == 0:
            return a[u]
        m = num / den
        return m if a[u] is None else clip(cfg.blend * a[u] + (1 - cfg.blend) * m)

    if cfg.max_depth is None:
        vals = {}
        for u in nodes:
            vals[u] = agg(u, vals) if kids[u] else a[u]
        return vals
    vals = dict(a)
    for _ in range(cfg.max_depth):
        vals = {u: agg(u, vals) if kids[u] else a[u] for u in nodes}
    return vals


def close(x, y):
    return (x is None and y is None) or (x is not None and y is not None and math.isclose(x, y, abs_tol=1e-12))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cfg=CONFIGS, ops=OPS, seed_values=st.lists(VALUES, min_size=12, max_size=12))
def test_incremental_equals_full_equals_reference(cfg, ops, seed_values):
    inc, full = LineageForest(cfg), LineageForest(cfg)
    base: dict[int, float | None] = {}  # the emulated pool: held ids and their base values
    rank_inc: dict[int, float | None] = {}
    rank_full: dict[int, float | None] = {}

    def hold(i):
        if i not in base:
            base[i] = rank_inc[i] = rank_full[i] = seed_values[i]

    for op in ops + [("refresh",)]:
        if op[0] == "add":
            _, parent, child, d = op
            hold(parent)
            hold(child)
            outcome = []
            for f in (inc, full):
                try:
                    f.add_child(parent, child, d, parent_value=base[parent], child_value=base[child])
                    outcome.append("ok")
                except LineageError as e:
                    outcome.append(str(e))
            assert outcome[0] == outcome[1]
        elif op[0] == "set" and op[1] in base:
            base[op[1]] = rank_inc[op[1]] = rank_full[op[1]] = op[2]
            inc.set_base(op[1], op[2])
            full.set_base(op[1], op[2])
        elif op[0] == "remove" and op[1] in base:
            for d in (base, rank_inc, rank_full):
                del d[op[1]]
            assert inc.remove(op[1]) == full.remove(op[1])
        elif op[0] == "refresh":
            for f, rank, mode in ((inc, rank_inc, False), (full, rank_full, True)):
                values, _ = f.refresh(full=mode)
                assert set(values) <= set(base), "only held records are written"
                rank.update(values)
            ref = reference(full, cfg)
            for u in full.ids():
                r = ref[u]
                assert close(full.value(u), None if r is None else (r + 1) / 2), u
                assert close(inc.value(u), full.value(u)), u
            assert all(close(rank_inc[i], rank_full[i]) for i in base)
    assert sorted(inc.ids()) == sorted(full.ids())
    structural = ("lineage/edges", "lineage/nodes", "lineage/max_depth", "lineage/dropped")
    assert [inc.metrics()[k] for k in structural] == [full.metrics()[k] for k in structural]


def _assert_same_as_full(f: LineageForest, cfg: LineageConfig) -> dict[int, float]:
    values = f.refresh(full=False).values
    ref = LineageForest(cfg)
    ref.load_state_dict(f.state_dict())
    ref.refresh(full=True)
    for u in f.ids():
        assert close(f.value(u), ref.value(u)), u
    return values


def test_leaf_count_change_reaches_ancestors_beyond_the_depth_cap():
    cfg = LineageConfig(max_depth=1)
    f = LineageForest(cfg)
    for parent, child, p in [(1, 2, 0.9), (2, 3, 0.2), (3, 4, 0.4), (1, 5, 0.1)]:
        f.add_child(parent, child, 1.2, parent_value=0.5, child_value=p)
    f.refresh()
    f.add_child(3, 6, 0.8, child_value=0.7)  # L(3), L(2), L(1) grow; 1 weighs 2 differently at depth 1
    values = _assert_same_as_full(f, cfg)
    assert 1 in values


def test_parent_that_loses_its_last_child_falls_back_to_its_own_value():
    cfg = LineageConfig()
    f = LineageForest(cfg)
    f.add_child(1, 2, 1.0, parent_value=0.5, child_value=0.3)
    f.add_child(2, 3, 0.8, child_value=0.9)
    assert f.refresh().values[2] != 0.3
    f.remove(3)
    values = _assert_same_as_full(f, cfg)
    assert values[2] == pytest.approx(0.3) and f.value(2) == pytest.approx(0.3)


def test_root_that_loses_its_last_child_gets_its_own_value_back():
    f = LineageForest()
    f.add_child(1, 2, 1.0, parent_value=0.2, child_value=0.9)
    assert f.refresh().values[1] > 0.3
    f.set_base(1, 0.4)  # a change while it is still in the forest
    f.remove(2)
    assert 1 not in f
    f.set_base(1, 0.1)  # and one after it left: the pending reset follows it
    values, stats = f.refresh()
    assert values == pytest.approx({1: 0.1}) and stats["mean_abs_change"] > 0


@pytest.mark.parametrize("max_depth", [None, 2])
def test_wide_forest_with_vectorised_levels(max_depth):
    """Large enough that both the numpy paths (levels of >= 48 edges, >= 16 sibling lists) and Python run."""
    rng = random.Random(1)
    cfg = LineageConfig(max_depth=max_depth, tau=0.5)
    f = LineageForest(cfg)
    for child in range(1, 600):
        parent = rng.randrange(0, min(child, 40)) if child < 300 else rng.randrange(0, child)
        f.add_child(parent, child, rng.uniform(0.75, 1.33), parent_value=0.5, child_value=rng.random())
    f.refresh()
    for _ in range(3):
        for node in rng.sample(range(600), 60):
            f.set_base(node, rng.random())
        for node in rng.sample(range(600), 10):
            f.remove(node)
        _assert_same_as_full(f, cfg)
    ref = reference(f, cfg)
    for u in f.ids():
        assert close(f.value(u), None if ref[u] is None else (ref[u] + 1) / 2)
