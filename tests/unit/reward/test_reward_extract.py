"""Answer extraction: boxes (balanced, nested, escaped braces, short form), Answer: lines, caps, long responses."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from verl_ext.reward.extract import ANSWER_LINE, BOXED, extract_answer, last_answer_line, last_boxed


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (r"so \boxed{42}.", "42"),
        (r"\boxed{1} then \boxed{2}", "2"),
        (r"\boxed{\frac{1}{2}}", r"\frac{1}{2}"),
        (r"\fbox{7}", "7"),
        (r"\boxed{1} and \fbox{3}", "3"),
        (r"\boxed{\{1,2\}}", r"\{1,2\}"),
        (r"\boxed {5}", "5"),
        (r"$\boxed 9$", "9"),
        (r"\boxed{3} then truncated \boxed{\frac{1", "3"),
        (r"no box here", None),
        (r"\boxedtext{4}", None),
        (r"\boxed{}", ""),
        ("\\boxed{5} then a last box too long to be an answer \\boxed{" + "1" * 2000 + "}.", None),
        ("\\boxed{5} then a last box cut off past the cap \\boxed{" + "1" * 2000, None),
    ],
)
def test_last_boxed(text: str, expected: str | None) -> None:
    assert last_boxed(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("work\nAnswer: 42", "42"),
        ("Answer: 1\nmore\nanswer: $\\frac{1}{2}$", r"\frac{1}{2}"),
        ("Answer: \\boxed{7}.", "7"),
        ("Answer: 12.", "12"),
        ("nothing", None),
    ],
)
def test_last_answer_line(text: str, expected: str | None) -> None:
    assert last_answer_line(text) == expected


def test_order_is_respected() -> None:
    text = "Answer: 5\n\\boxed{6}"
    assert extract_answer(text, (BOXED, ANSWER_LINE)) == ("6", BOXED)
    assert extract_answer(text, (ANSWER_LINE, BOXED)) == ("5", ANSWER_LINE)
    assert extract_answer("Answer: 5", (BOXED,)) == (None, None)


def test_unknown_method_names_itself() -> None:
    with pytest.raises(ValueError, match="'latex'"):
        extract_answer(r"\boxed{1}", ("latex",))


def test_overlong_answer_is_not_found() -> None:
    assert extract_answer("\\boxed{" + "1" * 5000 + "}") == (None, None)


def test_box_at_the_start_of_a_very_long_response_is_found() -> None:
    """No blind tail window: the only box sits before 200k characters of rambling."""
    text = "So \\boxed{17}." + " and then the model keeps talking" * 6_000
    assert len(text) > 190_000
    assert extract_answer(text) == ("17", BOXED)
    assert extract_answer("Answer: 17\n" + "x" * 200_000, (ANSWER_LINE,)) == ("17", ANSWER_LINE)


def test_empty_box_is_no_answer() -> None:
    assert extract_answer(r"\boxed{}") == (None, None)


def test_huge_garbage_finds_nothing() -> None:
    garbage = ("{\\boxed{" * 50_000 + "x") * 3  # ~1.2 MB of unbalanced boxes: at most MAX_BOX_TRIES are examined
    assert extract_answer(garbage) == (None, None)


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("\\boxedfAnsw:{}$ 12\n")), max_size=200))
def test_extraction_never_raises(text: str) -> None:
    pred, method = extract_answer(text)
    assert (pred is None) == (method is None)
