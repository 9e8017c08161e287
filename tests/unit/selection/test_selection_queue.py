"""``SelectionQueue``: the one-selection-at-a-time hand-out that the recipe's sampler and the simulator's DAPO share."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from verl_ext.selection.queue import SelectionQueue


class Pool:
    def __init__(self) -> None:
        self.reinserts: list[tuple[int, int]] = []

    def reinsert(self, step: int, k: int) -> None:
        self.reinserts.append((step, k))


class Stock:
    """A strategy that selects the first ``k`` ids left in a fixed stock; ``fail_at`` makes that call raise."""

    def __init__(self, ids, fail_at: int | None = None) -> None:
        self.left, self.calls, self.fail_at = list(ids), [], fail_at

    def select(self, pool, k, step):
        self.calls.append((k, step))
        if len(self.calls) == self.fail_at:
            raise RuntimeError("strategy failed")
        out, self.left = self.left[:k], self.left[k:]
        return out


def test_selects_k_at_a_time_and_carries_leftovers_into_the_next_step():
    pool, strat, queue = Pool(), Stock(range(10)), SelectionQueue(4)
    assert queue.take(pool, strat, 1, step=0) == [0]  # one selection of k, three left queued
    assert queue.take(pool, strat, 5, step=0) == [1, 2, 3, 4, 5]  # the queue, then a second selection
    assert strat.calls == [(4, 0), (4, 0)] and pool.reinserts == [(0, 4), (0, 4)] and queue.ids == [6, 7]
    assert queue.take(pool, strat, 4, step=1) == [6, 7, 8, 9]  # step 0's leftovers first, then a step-1 selection
    assert strat.calls[-1] == (4, 1) and queue.short_selections == 1  # only 2 of 4 were left to select
    # an empty selection hands out nothing and is not counted
    assert queue.take(pool, strat, 3, step=1) == [] and queue.selections == 3 and queue.short_selections == 1


def test_the_selection_hook_hears_each_selection_before_it_is_handed_out():
    heard: list[list[int]] = []
    queue = SelectionQueue(3, on_selected=heard.append)
    strat = Stock(range(5))
    assert queue.take(Pool(), strat, 2, step=0) == [0, 1] and heard == [[0, 1, 2]]
    assert queue.take(Pool(), strat, 2, step=0) == [2, 3] and heard == [[0, 1, 2], [3, 4]]


def test_without_reinsert_the_pool_is_left_alone():
    pool = Pool()
    SelectionQueue(2, reinsert=False).take(pool, Stock(range(4)), 4, step=0)
    assert pool.reinserts == []


def test_a_failing_selection_puts_the_ids_already_taken_back_in_front():
    queue, strat = SelectionQueue(2), Stock(range(6), fail_at=2)
    queue.take(Pool(), strat, 1, step=0)  # [1] stays queued
    with pytest.raises(RuntimeError, match="strategy failed"):
        queue.take(Pool(), strat, 3, step=0)  # takes 1, then the second selection raises
    assert queue.ids == [1]
    assert queue.take(Pool(), strat, 3, step=0) == [1, 2, 3]


@pytest.mark.parametrize("k", [0, -1, 1.5, True])
def test_k_must_be_a_positive_int(k):
    with pytest.raises(ValueError, match="k must be a positive int"):
        SelectionQueue(k)


@settings(max_examples=60, deadline=None)
@given(k=st.integers(1, 6), asks=st.lists(st.integers(0, 7), min_size=1, max_size=12), cut=st.integers(0, 12))
def test_a_restored_queue_hands_out_what_the_uninterrupted_one_would(k, asks, cut):
    def run(restore_at):
        strat, queue, out = Stock(range(40)), SelectionQueue(k), []
        for i, m in enumerate(asks):
            if i == restore_at:
                state = queue.state_dict()
                queue = SelectionQueue(k)
                queue.load_state_dict(state)
            out.append(queue.take(Pool(), strat, m, step=i))
        return out, queue.selections, queue.short_selections, queue.ids

    assert run(restore_at=cut) == run(restore_at=None)
