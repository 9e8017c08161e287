"""Hand-computed ChildAgg / PathAgg values on small trees (spec §6), on the reward scale r = 2p - 1.

Tree used throughout (pass rate p, reward r, difficulty d of the edge into the node):
    R (p=0.6, r=0.2)
    +- A   leaf  p=0.9  r=0.8  d=0.8  -> g = 0.8/0.8 = 1.0
    +- B   p=0.25 r=-0.5 d=1.2
    |  +- B1 leaf p=1.0 r=1.0  d=0.75 -> g = 1.333 clipped to 1.0
    |  +- B2 leaf p=0.0 r=-1.0 d=1.25 -> g = -1.25 clipped to -1.0
    +- C   leaf, never measured (skipped)
"""

import math

import pytest

from verl_ext.pool.lineage import LineageConfig, LineageForest

R, A, B, B1, B2, C = 1, 2, 3, 4, 5, 6


def tree(**cfg) -> LineageForest:
    f = LineageForest(LineageConfig(**cfg))
    f.add_child(R, A, 0.8, parent_value=0.6, child_value=0.9)
    f.add_child(R, B, 1.2, child_value=0.25)
    f.add_child(B, B1, 0.75, child_value=1.0)
    f.add_child(B, B2, 1.25, child_value=0.0)
    f.add_child(R, C, None, child_value=None)
    return f


def p(r: float) -> float:
    return (r + 1) / 2


# B: children g = 1.0 and -1.0 with equal leaves -> m_B = 0 for both methods; new_B = 0.5*(-0.5) = -0.25.
# B as a child of R: v = -0.25 (refreshed), d = 1.2, negative -> g = -0.25 * 1.2 = -0.3.
B_NEW = -0.25
G_B = -0.3


@pytest.mark.parametrize("full", [True, False])
def test_childagg(full):
    values, stats = tree(method="childagg").refresh(full=full)
    m_r = (1.0 + G_B) / 2  # C skipped
    assert values[B] == pytest.approx(p(B_NEW))
    assert values[R] == pytest.approx(p(0.5 * 0.2 + 0.5 * m_r))  # 0.6375
    assert values[R] == pytest.approx(0.6375)
    assert stats["refreshed_nodes"] == 2
    assert C not in values  # no value at all: nothing to write


@pytest.mark.parametrize("full", [True, False])
def test_pathagg_tau1_weights_by_leaves(full):
    values, _ = tree().refresh(full=full)
    m_r = (1 * 1.0 + 2 * G_B) / 3  # L(A)=1, L(B)=2, C has no value
    assert values[R] == pytest.approx(p(0.1 + 0.5 * m_r))
    assert values[R] == pytest.approx(0.58333333333)
    assert values[B] == pytest.approx(p(B_NEW))


@pytest.mark.parametrize("tau, expected_m", [
    (0.5, (1.0 + 4 * G_B) / 5),                                  # L^2 weights: 1 and 4
    (2.0, (1.0 + math.sqrt(2) * G_B) / (1 + math.sqrt(2))),     # L^0.5 weights
])
def test_pathagg_tau(tau, expected_m):
    values, _ = tree(tau=tau).refresh()
    assert values[R] == pytest.approx(p(0.1 + 0.5 * expected_m))


def test_linear_weighting_ignores_tau():
    assert tree(weighting="linear", tau=0.5).refresh().values[R] == pytest.approx(0.58333333333)


def test_missing_parent_value_takes_children_mean():
    f = LineageForest(LineageConfig(method="childagg"))
    f.add_child(10, 11, 1.0, parent_value=None, child_value=0.75)  # r = 0.5
    f.add_child(10, 12, 2.0, child_value=0.2)  # r = -0.6, d=2 -> -1.2 -> clipped -1
    values, _ = f.refresh()
    assert values[10] == pytest.approx(p((0.5 - 1.0) / 2))


def test_no_valued_child_keeps_own_value():
    f = LineageForest()
    f.add_child(10, 11, 1.0, parent_value=0.3, child_value=None)
    values, stats = f.refresh(full=True)
    assert values[10] == pytest.approx(0.3)
    assert stats["refreshed_nodes"] == 0


def test_positive_reward_easier_child_is_clipped_and_blend_extremes():
    f = LineageForest(LineageConfig(blend=0.0))
    f.add_child(1, 2, 0.75, parent_value=0.0, child_value=0.95)  # r=0.9 -> 1.2 -> 1.0
    assert f.refresh().values[1] == pytest.approx(1.0)
    g = LineageForest(LineageConfig(blend=1.0))
    g.add_child(1, 2, 0.75, parent_value=0.1, child_value=0.95)
    assert g.refresh().values[1] == pytest.approx(0.1)


def test_max_depth_one_uses_childrens_own_values():
    values, _ = tree(method="childagg", max_depth=1).refresh()
    m_r = (1.0 + (-0.5 * 1.2)) / 2  # B contributes a(B) = -0.5, not its refreshed -0.25
    assert values[R] == pytest.approx(p(0.1 + 0.5 * m_r))
    assert values[B] == pytest.approx(p(B_NEW))  # B's children are leaves: depth 1 is its whole subtree


def test_max_depth_at_least_height_equals_uncapped():
    ref = tree().refresh().values
    for k in (2, 3, 5):
        got = tree(max_depth=k).refresh().values
        assert got.keys() == ref.keys()
        assert all(got[i] == pytest.approx(ref[i], abs=1e-12) for i in ref)


def test_refresh_is_idempotent_and_reads_base_values():
    f = tree()
    first = f.refresh(full=True).values
    second, stats = f.refresh(full=True)
    assert second == pytest.approx({k: first[k] for k in second})  # first also wrote the new leaves
    assert stats["mean_abs_change"] == 0.0
    assert f.base(R) == pytest.approx(0.6)  # the base is never overwritten by the refresh


def test_dead_internal_node_still_carries_information_but_is_not_written():
    f = tree()
    f.remove(B)  # evicted, but B1/B2 are live: B stays as an inner node
    assert B in f and not f.is_live(B)
    values, _ = f.refresh(full=True)
    assert B not in values
    assert values[R] == pytest.approx(0.58333333333)
