"""``ValueBuckets``: the index matches a model under random operations; layout round trip; positions; bounds."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from verl_ext.pool import DuplicateRecordError, UnknownRecordError, ValueBuckets
from verl_ext.pool.buckets import median_bucket
from verl_ext.selection.frontier.draw import nearest, rank_window, sample_parts

OPS = st.lists(st.tuples(st.sampled_from(["insert", "remove", "move"]), st.integers(0, 30),
                         st.floats(0, 1), st.integers(0, 1)), max_size=80)


@settings(max_examples=60, deadline=None)
@given(ops=OPS, resolution=st.sampled_from([1, 3, 10, 1000]))
def test_matches_a_model(ops, resolution):
    b, model = ValueBuckets(resolution, groups=2), {}
    for op, item, value, group in ops:
        if op == "insert" and item not in model:
            b.insert(item, value, group)
            model[item] = (group, b.bucket_of_value(value))
        elif op == "remove" and item in model:
            assert b.remove(item) == model.pop(item)
        elif op == "move" and item in model:
            b.move(item, value)
            model[item] = (model[item][0], b.bucket_of_value(value))
        b.check()
        assert len(b) == len(model) and all(b.locate(i) == gb for i, gb in model.items())
        for g in (0, 1):
            in_group = [bk for gg, bk in model.values() if gg == g]
            assert b.lowest(g) == (min(in_group) if in_group else None)
            assert b.highest(g) == (max(in_group) if in_group else None)
    order = list(b)
    assert b.ids_at(list(range(len(order)))) == order
    again = ValueBuckets(resolution, groups=2)
    again.load(b.layout())
    assert list(again) == order and all(again.locate(i) == gb for i, gb in model.items())


def test_errors_and_edges():
    b = ValueBuckets(10)
    b.insert(1, 1.0)
    assert b.locate(1) == (0, 9)  # 1.0 falls in the last bucket
    with pytest.raises(DuplicateRecordError):
        b.insert(1, 0.5)
    with pytest.raises(ValueError):
        b.insert(2, float("nan"))
    with pytest.raises(ValueError):
        b.insert(2, 1.5)
    with pytest.raises(UnknownRecordError):
        b.remove(7)
    with pytest.raises(IndexError):
        b.ids_at([3])


def test_rank_window_and_median_follow_value_order():
    b = ValueBuckets(100, groups=2)
    for i in range(50):
        b.insert(i, i / 50, group=i % 2)
    rng = np.random.default_rng(0)
    assert sorted(rank_window(b, 10, 15, rng)) == list(range(10, 15))
    split, bucket = median_bucket(b, 0.5)
    assert split == 25 and bucket == b.bucket_of_value(25 / 50)
    assert sorted(nearest(b, b.bucket_of_value(0.5), 3, rng)) == [24, 25, 26]
    assert sorted(nearest(b, b.bucket_of_value(0.5), 3, rng, child_budget=0)) == [24, 26, 28]  # odd ids: group 1


def test_sample_parts_is_uniform_without_building_the_union():
    rng = np.random.default_rng(1)
    parts = [list(range(0, 5)), [], list(range(5, 20))]
    counts = np.zeros(20)
    for _ in range(4000):
        got = sample_parts(parts, 3, rng)
        assert len(set(got)) == 3
        counts[got] += 1
    assert counts.min() > 0.8 * counts.mean() and sample_parts(parts, 99, rng) == list(range(20))
