"""``InFlight``: groups handed to the rollout, heard back once, with the delay from selection to feedback."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from recipe.heapa.step.in_flight import InFlight


def test_delay_is_the_steps_from_selection_to_feedback():
    f = InFlight()
    f.handed_out(["a", "b"], [10, 11], step=1)  # a warm-up batch
    f.handed_out(["c"], [12], step=2)
    # a group's rows name its uid once each: heard once; each record with the step that selected it
    assert f.heard(["a", "a", "c"], step=2) == {10: 1, 12: 2}
    assert f.flow == [[10, 1], [11, 1], [12, 1], [10, -1], [12, -1]]
    assert f.metrics() == {"feedback/in_flight_groups": 1.0, "feedback/delay_mean": 0.5, "feedback/delay_max": 1.0}
    assert f.metrics() == {"feedback/in_flight_groups": 1.0}  # the step's delays were reported and reset
    assert f.flow == []
    assert f.heard(["a", "zz"], step=3) == {}  # heard already, or never handed out: nothing
    assert f.clear() == [11] and len(f) == 0


def test_a_uid_handed_out_twice_is_an_error():
    f = InFlight()
    f.handed_out(["a"], [1], step=1)
    with pytest.raises(ValueError, match="handed out twice"):
        f.handed_out(["a"], [2], step=2)
    with pytest.raises(ValueError, match="2 uids for 1 records"):
        f.handed_out(["b", "c"], [3], step=2)


@given(st.lists(st.tuples(st.integers(0, 50), st.integers(0, 9)), unique_by=lambda t: t[0], max_size=30),
       st.integers(0, 30))
def test_state_round_trips_through_json(groups, heard_count):
    f = InFlight()
    for rid, step in groups:
        f.handed_out([f"u{rid}"], [rid], step)
    f.heard([f"u{rid}" for rid, _ in groups[:heard_count]], step=10)
    f.metrics()  # the step closes before verl checkpoints it: its delays are reported, not saved
    g = InFlight()
    g.load_state_dict(json.loads(json.dumps(f.state_dict())))
    assert g.state_dict() == f.state_dict() and len(g) == len(groups) - min(heard_count, len(groups))
    rest = [f"u{rid}" for rid, _ in groups[heard_count:]]
    assert g.heard(rest, step=12) == f.heard(rest, step=12)
    assert g.metrics() == f.metrics()
