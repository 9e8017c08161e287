"""Reading plain numbers exactly, and the relative, precision-aware agreement rule (no absolute tolerance)."""

from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from verl_ext.reward.numbers import DECIMAL, EXACT, IRRATIONAL, MEASURED, Number, numbers_agree, read_number


@pytest.mark.parametrize(
    ("text", "value", "kind"),
    [
        ("12", Fraction(12), EXACT),
        ("-12", Fraction(-12), EXACT),
        ("1,234", Fraction(1234), EXACT),
        ("1,234.5", Fraction(24690, 20), DECIMAL),
        (".0000672", Fraction(672, 10**7), DECIMAL),
        ("1.24e-8", Fraction(124, 10**10), MEASURED),
        ("1.24E-8", Fraction(124, 10**10), MEASURED),
        (r"1.24\times10^{-8}", Fraction(124, 10**10), MEASURED),
        (r"1.24\cdot10^{-8}", Fraction(124, 10**10), MEASURED),
        (r"10^{-8}", Fraction(1, 10**8), EXACT),
        ("3e5", Fraction(300000), EXACT),
        (r"\frac{3}{4}", Fraction(3, 4), EXACT),
        (r"\frac34", Fraction(3, 4), EXACT),
        (r"\frac9{19}", Fraction(9, 19), EXACT),
        (r"\frac{270}7", Fraction(270, 7), EXACT),
        (r"-\frac{1}{3}", Fraction(-1, 3), EXACT),
        (r"\frac{-1}{3}", Fraction(-1, 3), EXACT),
        ("3/4", Fraction(3, 4), EXACT),
        (r"1\frac{4}{5}", Fraction(9, 5), EXACT),  # a mixed number, as MATH writes them
        (r"-137\frac{1}{2}", Fraction(-275, 2), EXACT),
    ],
)
def test_reads_plain_numbers_exactly(text: str, value: Fraction, kind: str) -> None:
    n = read_number(text)
    assert n is not None and n.value == value and n.kind == kind


@pytest.mark.parametrize("text", ["", "x", "2^{3}", "1e99999", "1,2", r"\frac{1}{0}", r"2\frac{4}{2}", "1..2",
                                  r"\sqrt{2}", "1" * 900, "(1)"])
def test_not_plain_numbers(text: str) -> None:
    assert read_number(text) is None


def _agree(pred: str, gold: str) -> bool:
    p, g = read_number(pred), read_number(gold)
    assert p is not None and g is not None
    return numbers_agree(p, g)


@pytest.mark.parametrize(
    ("pred", "gold", "expected"),
    [
        # the cases: tiny ground truths, huge integers
        ("0", "2.88e-19", False), ("-2.88e-19", "2.88e-19", False), ("5.76e-19", "2.88e-19", False),
        ("2.88e-19", "2.88e-19", True), ("2.876e-19", "2.88e-19", True), ("2.9e-19", "2.88e-19", False),
        (r"2.88\times10^{-19}", "2.88e-19", True), ("0.000000000000000000288", "2.88e-19", True),
        ("11111111101", "11111111100", False), ("11111111100", "11,111,111,100", True),
        ("1.24e-8", r"1.24\times10^{-8}", True), (r"1.24\cdot10^{-8}", "1.24e-8", True),
        # exact values must be equal
        ("0.5", r"\frac12", True), ("0.46", "0.5", False), ("1.254", "1.25", False), ("1.250", "1.25", True),
        ("12.0", "12", True), ("99.9999999", "100", False),
        # a decimal stands for a non-terminating value only with enough digits, correctly rounded
        ("0.333333", r"\frac13", True), ("0.3333333", r"\frac13", True), ("0.333", r"\frac13", False),
        ("0.333334", r"\frac13", False), ("0.666667", r"\frac23", True),
        # a plain decimal ground truth is a rounding of a non-terminating answer
        (r"\frac13", "0.33", True), (r"\frac23", "0.67", True), (r"\frac23", "0.66", False),
    ],
)
def test_agreement_rule(pred: str, gold: str, expected: bool) -> None:
    assert _agree(pred, gold) is expected


def test_irrational_values() -> None:
    sqrt2 = Number(Fraction("1.4142135623730950488016887242096980785696718753769"), IRRATIONAL)
    assert numbers_agree(read_number("1.414214"), sqrt2)
    assert not numbers_agree(read_number("1.414"), sqrt2)  # too few digits to stand for sqrt(2)
    assert numbers_agree(sqrt2, read_number("1.41"))  # a rounded ground truth of an irrational answer
    assert not numbers_agree(sqrt2, read_number("1.42"))
    assert not numbers_agree(sqrt2, read_number("1"))


@settings(max_examples=150, deadline=None)
@given(st.integers(min_value=-(10**30), max_value=10**30), st.integers(min_value=1, max_value=10**6))
def test_distinct_integers_never_agree(n: int, k: int) -> None:
    assert _agree(str(n), str(n))
    assert not _agree(str(n + k), str(n))
    assert not _agree(str(n), str(n + k))


@settings(max_examples=150, deadline=None)
@given(st.integers(min_value=100, max_value=999), st.integers(min_value=-300, max_value=300))
def test_measured_gold_rejects_sign_flips_doubling_and_zero(mantissa: int, exp: int) -> None:
    gold = f"{mantissa / 100:.2f}e{exp}"
    value = Fraction(mantissa, 100) * Fraction(10) ** exp
    assert _agree(gold, gold)
    for wrong in (-value, 2 * value, Fraction(0), value + Fraction(1, 100) * Fraction(10) ** exp):
        assert not numbers_agree(Number(wrong), read_number(gold))
    # one more digit: agrees when it rounds to the ground truth's 3 significant digits
    assert _agree(f"{(10 * mantissa + 4) / 1000:.3f}e{exp}", gold)
    assert not _agree(f"{(10 * mantissa + 6) / 1000:.3f}e{exp}", gold)
