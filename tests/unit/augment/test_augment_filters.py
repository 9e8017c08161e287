"""Pre-teacher filters and the bounded hash set."""

from __future__ import annotations

import json

import pytest

from verl_ext.augment.filters import CandidateFilter, SeenHashes, normalise, text_hash


def test_normalise_and_hash() -> None:
    assert normalise("  What IS\n 3 +  4? ") == "what is 3 + 4?"
    assert text_hash("What is 3 + 4?") == text_hash("what  is 3 + 4?  ")
    assert text_hash("a") != text_hash("b")
    assert -(2**63) <= text_hash("x") < 2**63


def test_filter_counts_every_reason() -> None:
    seen = SeenHashes(capacity=100)
    seen.add_text("What is 1 + 1?")  # a record already in the pool
    f = CandidateFilter(max_chars=30, seen=seen)
    gens = [
        "no tags at all",  # unparsable
        "<NEW>  <END>",  # empty
        "<NEW> " + "x" * 31 + " <END>",  # too long
        "<NEW> what is 2 + 2? <END>",  # copy of the parent (normalised)
        "<NEW> What is 1 + 1? <END>",  # duplicate of a pool record
        "<NEW> What is 5 + 5? <DIFFICULTY> 1.2 <END>",  # passes
        "<NEW> What is 5 + 5?  <END>",  # duplicate of the one just passed
    ]
    passed = f.filter(gens, parent_id=9, parent_text="What is 2 + 2?")
    assert [c.text for c in passed] == ["What is 5 + 5?"]
    assert passed[0].difficulty == 1.2 and passed[0].parent_id == 9
    assert dict(f.counts) == {"unparsable": 1, "empty": 1, "too_long": 1, "copy_of_parent": 1, "duplicate": 2,
                              "passed": 1}
    m = f.metrics()
    assert m["augment/filter/duplicate"] == 2.0 and m["augment/seen_hashes"] == 2.0


def test_seen_hashes_is_bounded_fifo() -> None:
    seen = SeenHashes(capacity=3)
    for h in range(5):
        seen.add(h)
    seen.add(4)  # re-adding is a no-op
    assert len(seen) == 3 and 0 not in seen and 1 not in seen and 4 in seen
    assert seen.evicted == 2


def test_seen_state_round_trip_is_json_safe() -> None:
    seen = SeenHashes(capacity=10)
    for t in ("a", "b", "c"):
        seen.add_text(t)
    state = json.loads(json.dumps(seen.state_dict()))
    other = SeenHashes(capacity=10)
    other.load_state_dict(state)
    assert other.contains_text("b") and len(other) == 3
    with pytest.raises(ValueError, match="schema"):
        other.load_state_dict({"schema": 99, "hashes": []})


def test_filter_state_round_trip() -> None:
    f = CandidateFilter(max_chars=10)
    f.filter(["junk"], parent_id=1)
    g = CandidateFilter(max_chars=10)
    g.load_state_dict(json.loads(json.dumps(f.state_dict())))
    assert g.counts == f.counts


def test_bad_capacity_names_the_field() -> None:
    with pytest.raises(ValueError, match="capacity"):
        SeenHashes(capacity=0)
    with pytest.raises(ValueError, match="max_chars"):
        CandidateFilter(max_chars=0)
