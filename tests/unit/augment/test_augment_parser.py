"""Candidate parsing: golden cases and fuzzing (never raises, difficulty in range, no tag in the text)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from verl_ext.augment.parser import Candidate, Rejection, parse_candidate, parse_difficulty
from verl_ext.augment.protocol import ALL_TAGS, DIFFICULTY_MAX, DIFFICULTY_MIN, format_answer


@pytest.mark.parametrize(
    ("raw", "text", "difficulty"),
    [
        ("<NEW> What is 3 + 4? <DIFFICULTY> 1.1 <END>", "What is 3 + 4?", 1.1),
        ("<NEW>What is 3 + 4?<DIFFICULTY>2.5<END>", "What is 3 + 4?", DIFFICULTY_MAX),
        ("<NEW>What is 3 + 4?<DIFFICULTY>-1<END>", "What is 3 + 4?", DIFFICULTY_MIN),
        ("<NEW>What is 3 + 4?<DIFFICULTY> about hard <END>", "What is 3 + 4?", 1.0),
        ("<NEW>What is 3 + 4?", "What is 3 + 4?", 1.0),
        ("chatter <NEW> A <NEW> B <DIFFICULTY> 0.8", "A", 1.0),
        ("<NEW> A <END> <DIFFICULTY> 0.9", "A", 0.9),
        ("<NEW> cost $5 {x} <DIFFICULTY> .9e0 <END>", "cost $5 {x}", 0.9),
        ("<NEW> A <DIFFICULTY> 1e999 <END>", "A", DIFFICULTY_MAX),
    ],
)
def test_golden(raw: str, text: str, difficulty: float) -> None:
    out = parse_candidate(raw, parent_id=7, parent_text="P")
    assert isinstance(out, Candidate)
    assert (out.text, out.difficulty, out.parent_id, out.parent_text, out.raw) == (text, difficulty, 7, "P", raw)


def test_round_trip_with_protocol_formatter() -> None:
    out = parse_candidate(format_answer("  What is 9 * 2?  ", 1.234), parent_id="a")
    assert isinstance(out, Candidate) and out.text == "What is 9 * 2?" and out.difficulty == 1.23


@pytest.mark.parametrize(("raw", "reason"), [("no tags", "unparsable"), ("<NEW>   <DIFFICULTY> 1", "empty"),
                                             ("<NEW><END>", "empty")])
def test_rejections(raw: str, reason: str) -> None:
    assert parse_candidate(raw, parent_id=1) == Rejection(1, reason)


def test_non_string_is_unparsable() -> None:
    assert parse_candidate(None, parent_id=1) == Rejection(1, "unparsable")  # type: ignore[arg-type]


def test_difficulty_window_is_local() -> None:
    assert parse_difficulty("<DIFFICULTY>" + " " * 100 + "0.8") == 1.0


def test_candidate_dict_round_trip() -> None:
    cand = Candidate(parent_id=3, text="t", difficulty=0.9, raw="r", parent_text="p")
    assert Candidate.from_dict(cand.to_dict()) == cand
    with pytest.raises(KeyError, match="'text'"):
        Candidate.from_dict({"parent_id": 1, "difficulty": 1.0})


_PIECES = st.one_of(
    st.sampled_from(list(ALL_TAGS) + ["<NEW", "NEW>", "<", ">", "0.9", "-3", "1e400", "nan", " ", "\n", "$", "{"]),
    st.text(max_size=12),
)


@settings(max_examples=400, deadline=None)
@given(st.lists(_PIECES, max_size=20).map("".join))
def test_fuzz(raw: str) -> None:
    out = parse_candidate(raw, parent_id=0)
    if isinstance(out, Candidate):
        assert out.text and out.text == out.text.strip()
        assert DIFFICULTY_MIN <= out.difficulty <= DIFFICULTY_MAX
        assert not any(tag in out.text for tag in ALL_TAGS)
    else:
        assert out.reason in {"unparsable", "empty"}
