"""compute_score, equivalence layers, the sympy guard and DAPO's overlong penalty."""

from __future__ import annotations

import threading
import time

import pytest

from verl_ext.reward.math_score import (
    as_number,
    compute_score,
    fast_compare,
    is_equivalent,
    is_risky,
    overlong_penalty,
)


def test_boxed_correct_and_wrong() -> None:
    assert compute_score("x", r"thus \boxed{42}", "42") == {"score": 1.0, "acc": 1.0, "pred": "42"}
    assert compute_score("x", r"thus \boxed{41}", "42") == {"score": 0.0, "acc": 0.0, "pred": "41"}
    assert compute_score("x", "no answer", "42") == {"score": 0.0, "acc": 0.0, "pred": ""}


def test_dapo_scores_plus_minus_one() -> None:
    assert compute_score("x", "Answer: 42", 42, format="dapo")["score"] == 1.0
    wrong = compute_score("x", "Answer: 7", 42, format="dapo")
    assert wrong["score"] == -1.0 and wrong["acc"] == 0.0
    assert compute_score("x", "nothing", 42, format="dapo")["score"] == -1.0


def test_auto_falls_back_to_answer_line() -> None:
    assert compute_score("x", "Answer: 3", "3", format="auto")["acc"] == 1.0
    assert compute_score("x", "Answer: 3", "3", format="boxed")["acc"] == 0.0


def test_unknown_format_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="format='latex'"):
        compute_score("x", "", "1", format="latex")


def test_verl_extra_kwargs_are_accepted() -> None:
    out = compute_score(data_source="x", solution_str=r"\boxed{1}", ground_truth="1", extra_info={},
                        reward_router_address=None)
    assert out["acc"] == 1.0


@pytest.mark.parametrize(
    ("pred", "gold"),
    [("10.0", "10"), ("1,000", "1000"), (r"10,\!080", "10080"), (r"90^\circ", "90"), (r"\dfrac{1}{2}", r"\frac{1}{2}"),
     (r"\text{(C)}", r"\text{(C)}"), (r"\$18.90", "18.90")],
)
def test_fast_path_accepts(pred: str, gold: str) -> None:
    assert fast_compare(pred, gold) is True


def test_fast_path_defers_and_rejects() -> None:
    assert fast_compare("3", "4") is False
    assert fast_compare(r"\frac12", "0.5") is None
    assert as_number("1,2") is None and as_number("1e400") is None


@pytest.mark.parametrize(("pred", "gold"), [(r"\frac12", "0.5"), (r"\sqrt{4}", "2"), (r"2\pi", r"\pi \cdot 2")])
def test_math_verify_equivalences(pred: str, gold: str) -> None:
    assert is_equivalent(pred, gold)


@pytest.mark.parametrize("text", [r"9^{9^{9}}", r"2**2**100", r"3^{99999999}", r"1000000!", r"(10^{9})!",
                                  r"\binom{1000000000}{500000000}", "1" * 600])
def test_guard_refuses_sympy_stalls(text: str) -> None:
    assert is_risky(text)
    start = time.perf_counter()
    assert compute_score("x", "\\boxed{" + text + "}", "7")["score"] == 0.0
    assert time.perf_counter() - start < 1.0


@pytest.mark.parametrize(
    "text",
    [r"\frac{1}{2}", r"2^{10}", r"x^2+3x", r"x^2+y^2", r"e^{-x^2}", r"2^{2x^2}", r"(n-1)!", r"10^{9}", "120",
     r"11,\! 111,\! 111,\! 100", r"3! \cdot 2"],
)
def test_guard_lets_normal_answers_through(text: str) -> None:
    assert not is_risky(text)


def test_huge_garbage_scores_zero_fast() -> None:
    garbage = "Answer: " + "(" * 1_000_000
    start = time.perf_counter()
    assert compute_score("x", garbage, "1", format="auto")["score"] == 0.0
    assert compute_score("x", "\\boxed{" * 200_000, "1")["score"] == 0.0
    assert time.perf_counter() - start < 1.0


def test_works_off_the_main_thread() -> None:
    results: list[dict] = []
    t = threading.Thread(target=lambda: results.append(compute_score("x", r"\boxed{\frac{2}{4}}", "0.5")))
    t.start()
    t.join(30)
    assert results == [{"score": 1.0, "acc": 1.0, "pred": r"\frac{2}{4}"}]


@pytest.mark.parametrize(
    ("length", "expected"),
    [(0, 0.0), (80, 0.0), (90, -0.5), (100, -1.0), (150, -1.0)],
)
def test_overlong_penalty(length: int, expected: float) -> None:
    assert overlong_penalty(length, max_len=100, buffer_len=20, penalty_factor=1.0) == pytest.approx(expected)


def test_overlong_penalty_scales_and_validates() -> None:
    assert overlong_penalty(95, 100, 10, penalty_factor=0.5) == pytest.approx(-0.25)
    assert overlong_penalty(101, 100, 0) == -1.0
    with pytest.raises(ValueError, match="buffer_len"):
        overlong_penalty(1, 10, 20)
