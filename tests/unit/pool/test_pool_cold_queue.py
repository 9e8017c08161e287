"""ColdQueue: arrival order under random push/pop/remove sequences, the array layout a checkpoint keeps, errors."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from verl_ext.pool import ColdQueue, DuplicateRecordError, UnknownRecordError
from verl_ext.pool.cold_groups import GroupedColdQueue

OPS = st.lists(st.tuples(st.sampled_from(["back", "front", "pop", "remove", "group"]), st.integers(0, 30)),
               max_size=80)


def _group(rid: int) -> str:
    return str(rid % 3)


@pytest.mark.parametrize("grouped", [False, True])
@settings(max_examples=60, deadline=None)
@given(ops=OPS)
def test_random_ops_serve_in_arrival_order(grouped, ops):
    """Either queue serves in arrival order; the grouped one (``cold_draw: signal``) also serves each group's
    earliest arrival and keeps its per-group sizes in step."""
    queue, model, front, back = (GroupedColdQueue(_group) if grouped else ColdQueue()), {}, 0, 0
    for op, item in ops:
        if op in ("back", "front") and item not in model:
            if op == "back":
                arrival, back = back, back + 1
            else:
                front -= 1
                arrival = front
            queue.push(item, arrival)
            model[item] = arrival
        elif op == "pop" and model:
            expected = min(model.items(), key=lambda kv: kv[1])
            assert queue.pop() == expected
            del model[expected[0]]
        elif op == "remove" and item in model:
            assert queue.remove(item) == model.pop(item)
        elif op == "group" and grouped and queue.sizes().get(_group(item)):
            members = {rid: a for rid, a in model.items() if _group(rid) == _group(item)}
            expected = min(members, key=members.get)
            assert queue.pop_group(_group(item)) == expected
            del model[expected]
        if grouped:
            assert queue.sizes() == {g: sum(_group(rid) == g for rid in model) for g in queue.sizes()}
            assert {_group(rid) for rid in model} <= set(queue.sizes())
        assert len(queue) == len(model) and sorted(queue) == sorted(model)
        assert all(i in queue for i in model) and dict(queue.items()) == model
        assert [queue.id_at(p) for p in range(len(queue))] == list(queue)


def test_load_restores_the_array_layout():
    queue = ColdQueue()
    for i, arrival in ((7, 0), (3, 1), (9, 2), (1, -1)):
        queue.push(i, arrival)
    twin = ColdQueue()
    twin.load(*map(list, zip(*queue.items())))
    assert list(twin) == list(queue)
    assert [twin.pop() for _ in range(4)] == [queue.pop() for _ in range(4)] == [(1, -1), (7, 0), (3, 1), (9, 2)]
    with pytest.raises(DuplicateRecordError):
        twin.load([1, 1], [0, 1])


def test_errors():
    queue = ColdQueue()
    queue.push(1, 0)
    with pytest.raises(DuplicateRecordError):
        queue.push(1, 1)
    with pytest.raises(UnknownRecordError):
        queue.remove(2)
    queue.pop()
    with pytest.raises(IndexError):
        queue.pop()
