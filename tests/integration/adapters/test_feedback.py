"""Per-trajectory ``index``/``acc`` -> ``{record_id: (passes, n)}``: keyed by id, tolerant of verl's array types."""

from __future__ import annotations

import numpy as np
import pytest

from verl_ext.adapters.feedback import FeedbackError, group_outcomes, outcomes_from_fields


def test_groups_by_id_not_by_position():
    # n=3 rollouts of records 7 and 2, interleaved and out of order (as after balancing / filtering)
    index = np.array([7, 2, 7, 2, 2, 7], dtype=object)
    acc = np.array([1.0, 0.0, 1.0, 1.0, 0.0, 0.0])
    assert group_outcomes(index, acc) == {7: (2, 3), 2: (1, 3)}


def test_id_and_acc_types():
    index = np.array([np.int64(3), "3", 3.0, np.array(5)], dtype=object)
    acc = [True, np.float32(0.7), 0.5, np.bool_(True)]  # 0.5 is not > 0.5
    assert group_outcomes(index, acc) == {3: (2, 3), 5: (1, 1)}
    assert group_outcomes([1, 1], [1.0, -1.0]) == {1: (1, 2)}  # DAPO +-1 scores read as pass/fail


def test_reads_fields_from_index_or_extra_info():
    fields = {"index": np.array([4, 4]), "acc": np.array([1.0, 0.0])}
    assert outcomes_from_fields(fields) == {4: (1, 2)}
    fields = {"extra_info": np.array([{"index": 9}, {"index": 9}], dtype=object), "acc": np.array([1, 1])}
    assert outcomes_from_fields(fields) == {9: (2, 2)}


@pytest.mark.parametrize(
    ("index", "acc", "message"),
    [
        ([1], None, "field 'acc' missing"),
        (None, [1.0], "field 'index'"),
        ([1, 2], [1.0], "'index' has 2 entries but 'acc' has 1"),
        (["x"], [1.0], r"index\[0\]: record id 'x' is not an integer"),
        ([True], [1.0], "record ids are integers"),
        ([-1], [1.0], "negative"),
        ([1], [float("nan")], r"acc\[0\]: acc is NaN"),
        ([1], ["yes"], r"acc\[0\]: acc 'yes'"),
    ],
)
def test_errors_name_the_field(index, acc, message):
    with pytest.raises(FeedbackError, match=message):
        group_outcomes(index, acc)


def test_missing_fields_in_a_batch_are_named():
    with pytest.raises(FeedbackError, match=r"field 'acc' missing \(fields: \['index', 'score'\]\)"):
        outcomes_from_fields({"index": [1], "score": [1.0]})
    with pytest.raises(FeedbackError, match="neither 'index' nor 'extra_info'"):
        outcomes_from_fields({"acc": [1.0]})
    with pytest.raises(FeedbackError, match=r"extra_info\[0\] has no 'index'"):
        outcomes_from_fields({"extra_info": [{}], "acc": [1.0]})
