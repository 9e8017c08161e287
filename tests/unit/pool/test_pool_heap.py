"""IndexedHeap: invariants under random operation sequences, tie-breaks, errors."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from verl_ext.pool import DuplicateRecordError, IndexedHeap, UnknownRecordError

KEYS = st.sampled_from([0.0, 0.25, 0.5, 0.75, 1.0]) | st.floats(0, 1)
OPS = st.lists(
    st.tuples(st.sampled_from(["push", "pop", "remove", "update"]), st.integers(0, 30), KEYS), max_size=80
)


@settings(max_examples=60, deadline=None)
@given(ops=OPS, max_heap=st.booleans())
def test_random_ops_match_model(ops, max_heap):
    heap, model = IndexedHeap(max_heap=max_heap), {}
    best = max if max_heap else min
    for op, item, key in ops:
        if op == "push" and item not in model:
            heap.push(item, key)
            model[item] = key
        elif op == "pop" and model:
            expected = best(model.items(), key=lambda kv: (kv[1], kv[0]))
            assert heap.peek() == expected
            assert heap.pop() == expected
            del model[expected[0]]
        elif op == "remove" and item in model:
            assert heap.remove(item) == model.pop(item)
        elif op == "update" and item in model:
            heap.update(item, key)
            model[item] = key
        heap.check()
        assert len(heap) == len(model)
        assert all(heap.key(i) == k and i in heap for i, k in model.items())
    ranked = sorted(model.items(), key=lambda kv: (kv[1], kv[0]), reverse=max_heap)
    assert heap.top(len(model) + 3) == [i for i, _ in ranked]
    assert heap.top(2) == [i for i, _ in ranked[:2]]


def test_tie_break_by_id_both_directions():
    lo, hi = IndexedHeap(), IndexedHeap(max_heap=True)
    for i in (5, 3, 9, 1):
        lo.push(i, 0.5)
        hi.push(i, 0.5)
    assert [lo.pop()[0] for _ in range(4)] == [1, 3, 5, 9]
    assert [hi.pop()[0] for _ in range(4)] == [9, 5, 3, 1]


def test_errors():
    heap = IndexedHeap()
    heap.push(1, 0.1)
    with pytest.raises(DuplicateRecordError):
        heap.push(1, 0.2)
    with pytest.raises(UnknownRecordError):
        heap.remove(2)
    with pytest.raises(UnknownRecordError):
        heap.update(2, 0.3)
    with pytest.raises(UnknownRecordError):
        heap.key(2)
    with pytest.raises(ValueError, match="NaN"):
        heap.push(3, float("nan"))
    heap.pop()
    with pytest.raises(IndexError):
        heap.pop()
    with pytest.raises(IndexError):
        heap.peek()


def test_load_sorted_is_a_heap():
    heap = IndexedHeap(max_heap=True)
    heap.load_sorted([4, 3, 2, 1], [0.9, 0.5, 0.5, 0.1])
    heap.check()
    assert heap.pop() == (4, 0.9)
    with pytest.raises(DuplicateRecordError):
        heap.load_sorted([1, 1], [0.1, 0.2])
