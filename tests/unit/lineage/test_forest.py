"""Structure of the lineage forest: queries, rejection of bad edges, eviction cleanup, capacity, state, config."""

import json

import pytest

from verl_ext.pool.errors import ConfigError
from verl_ext.pool.lineage import LineageConfig, LineageError, LineageForest


def small() -> LineageForest:
    """1 -> {2, 3}, 2 -> {4, 5}, 4 -> {6}."""
    f = LineageForest()
    for parent, child in [(1, 2), (1, 3), (2, 4), (2, 5), (4, 6)]:
        assert f.add_child(parent, child, 1.1, parent_value=0.5, child_value=0.5)
    return f


def test_queries():
    f = small()
    assert len(f) == 6 and f.num_edges == 5
    assert f.parent(1) is None and f.parent(6) == 4
    assert f.children(1) == [2, 3] and f.children(6) == []
    assert [f.depth(i) for i in range(1, 7)] == [0, 1, 1, 2, 2, 3]
    assert [f.height(i) for i in range(1, 7)] == [3, 2, 0, 1, 0, 0]
    assert [f.leaf_count(i) for i in range(1, 7)] == [3, 2, 1, 1, 1, 1]
    assert f.difficulty(2) == 1.1 and f.difficulty(1) == 1.0
    m = f.metrics()
    assert m["lineage/edges"] == 5 and m["lineage/nodes"] == 6 and m["lineage/max_depth"] == 3
    with pytest.raises(LineageError, match="not in the lineage forest"):
        f.depth(99)


def test_rejects_cycles_second_parents_and_dangling_references():
    f = small()
    with pytest.raises(LineageError, match="own parent"):
        f.add_child(7, 7)
    with pytest.raises(LineageError, match="cycle"):
        f.add_child(6, 1)  # 1 is an ancestor of 6
    with pytest.raises(LineageError, match="already has parent 2"):
        f.add_child(3, 4)
    f.remove(2)  # evicted but kept: it has live descendants
    with pytest.raises(LineageError, match="dangling parent"):
        f.add_child(2, 8)
    with pytest.raises(LineageError, match="dangling child"):
        f.add_child(9, 2)
    with pytest.raises(LineageError, match="difficulty"):
        f.add_child(3, 8, 0.0)
    with pytest.raises(LineageError, match="pass rate"):
        f.add_child(30, 8, 1.0, parent_value=0.5, child_value=1.5)
    with pytest.raises(LineageError, match="record id"):
        f.add_child(3, "8")
    assert f.num_edges == 5 and 8 not in f and 30 not in f  # nothing half-applied


def test_linking_an_existing_root_shifts_its_subtree():
    f = small()
    f.add_child(0, 1)
    assert f.depth(6) == 4 and f.leaf_count(0) == 3 and f.height(0) == 4


def test_long_chain_is_iterative():
    n = 100_000
    f = LineageForest()
    for i in range(n - 1):
        f.add_child(i, i + 1, 1.0, parent_value=0.5, child_value=0.5 if i % 2 else 0.25)
    assert f.depth(n - 1) == n - 1 and f.height(0) == n - 1 and f.leaf_count(0) == 1
    with pytest.raises(LineageError, match="cycle"):
        f.add_child(n - 1, 0)
    assert len(f.refresh(full=True).values) == n  # every live node
    f.set_base(n - 1, 0.9)
    inc = f.refresh().values
    assert len(inc) == n  # the leaf's change reaches every ancestor
    check = LineageForest()
    check.load_state_dict(json.loads(json.dumps(f.state_dict())))
    reloaded = check.refresh(full=True).values  # every internal node
    assert len(reloaded) == n - 1 and reloaded == pytest.approx({k: inc[k] for k in reloaded})
    for i in range(n):  # evict the whole chain from the top: nothing can go until the leaf goes
        f.remove(i)
    assert len(f) == 0 and f.dropped == n


def test_eviction_cleanup_and_counters():
    f = small()
    assert f.remove(4) == 0  # 4 has a live child: kept as an inner node
    assert f.remove(6) == 2  # 6 goes, then its evicted parent 4
    assert 4 not in f and f.leaf_count(2) == 1 and f.leaf_count(1) == 2
    assert f.remove(12345) == 0  # most records have no lineage
    f.remove(5)
    assert f.children(2) == [] and f.leaf_count(2) == 1
    f.remove(3)
    f.remove(2)  # 2 goes; the live root 1 has no children left and leaves the forest
    assert len(f) == 0 and f.dropped == 6
    values, _ = f.refresh()
    assert values == {1: 0.5}  # its ranking key falls back to its own value
    assert f.metrics()["lineage/dropped"] == 6


def test_whole_evicted_subtree_is_removed_in_any_order():
    f = small()
    for i in (2, 6, 4, 5):
        f.remove(i)
    assert sorted(f.ids()) == [1, 3] and f.leaf_count(1) == 1


def test_capacity_refuses_and_counts():
    f = LineageForest(LineageConfig(max_nodes=3))
    assert f.add_child(1, 2) and f.add_child(1, 3)
    assert not f.add_child(1, 4)
    assert f.refused == 1 and len(f) == 3 and f.metrics()["lineage/refused"] == 1


def test_state_round_trip_is_json_safe():
    f = small()
    f.set_base(6, 0.1)
    f.remove(4)
    state = json.loads(json.dumps(f.state_dict()))
    g = LineageForest()
    g.load_state_dict(state)
    assert sorted(g.ids()) == sorted(f.ids())
    for i in f.ids():
        assert (g.parent(i), g.depth(i), g.leaf_count(i), g.is_live(i), g.base(i)) == \
               (f.parent(i), f.depth(i), f.leaf_count(i), f.is_live(i), f.base(i))
    assert g.refresh().values == pytest.approx(f.refresh().values)  # same pending changes
    with pytest.raises(LineageError, match="schema_version"):
        g.load_state_dict({**state, "schema_version": 99})
    bad = {**state, "ids": state["ids"][::-1], "parents": state["parents"][::-1]}
    with pytest.raises(LineageError, match="not listed before"):
        g.load_state_dict(bad)


@pytest.mark.parametrize("field, value", [
    ("method", "mean"), ("blend", 1.5), ("tau", 0.0), ("weighting", "exp"), ("max_depth", 0),
    ("cadence", 0), ("mode", "lazy"), ("max_nodes", 1), ("enabled", "yes"),
])
def test_config_validation(field, value):
    with pytest.raises(ConfigError, match=f"lineage.{field}"):
        LineageConfig(**{field: value})
