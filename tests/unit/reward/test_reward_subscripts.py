"""Issue 22: subscripted names such as ``E_{1}`` and letters the LaTeX parser reads as constants (``E``/``e`` as
Euler's number, ``I`` as the imaginary unit).

The issue's answer ``-(\\frac{1}{3}E_{1}+\\frac{2}{3}E_{2})`` was accepted for ``\\frac{1}{3}E_{1}+\\frac{2}{3}E_{2}``:
math-verify's parser rejects ``E_{1}``, and in its default ``any_match`` mode it then read a fragment, the last
``\\frac{2}{3}``, as the answer, on both sides (2/3 = 2/3). Each case below states the right answers that must be
accepted and the wrong ones (negated, swapped, subscript changed or dropped, a fragment) that must be rejected,
through the math-verify path in this (main) thread, and the issue's own strings end to end through the workers.
"""

from __future__ import annotations

import pytest

from verl_ext.reward import Scorer, ScorerConfig
from verl_ext.reward.compare import fast_equal, read_based
from verl_ext.reward.verify import answers_equal, parse_answer, subscripted_names

ISSUE_GOLD = r"\frac{1}{3}E_{1}+\frac{2}{3}E_{2}"

# (ground truth, right answers, wrong answers)
CASES = [
    (ISSUE_GOLD,
     [ISSUE_GOLD, r"\frac{2}{3}E_{2}+\frac{1}{3}E_{1}", r"\frac{E_{1}+2E_{2}}{3}", r"\frac{1}{3}E_1+\frac{2}{3}E_2",
      r"\dfrac{1}{3} E_{1} + \dfrac{2}{3} E_{2}", "(E_{1}+2E_{2})/3"],
     [r"-(\frac{1}{3}E_{1}+\frac{2}{3}E_{2})", r"-\frac{1}{3}E_{1}-\frac{2}{3}E_{2}",
      r"\frac{1}{3}E_{1}-\frac{2}{3}E_{2}", r"\frac{2}{3}E_{1}+\frac{1}{3}E_{2}", r"\frac{2}{3}", "E_{1}+E_{2}",
      r"\frac{1}{3}e+\frac{2}{3}e^{2}"]),
    # the same shape with other letters, which were always read as names
    (r"\frac{1}{3}x_{1}+\frac{2}{3}x_{2}", [r"\frac{x_1+2x_2}{3}"], [r"-(\frac{1}{3}x_{1}+\frac{2}{3}x_{2})"]),
    (r"\frac{1}{3}A_{1}+\frac{2}{3}A_{2}", [r"\frac{A_1+2A_2}{3}"], [r"-(\frac{1}{3}A_{1}+\frac{2}{3}A_{2})"]),
    # other subscripted capitals, braced or not
    ("B_1-B_2", ["-B_2+B_1", "B_{1}-B_{2}"], ["B_2-B_1", "-(B_1-B_2)", "0"]),
    ("N_{1}+N_{2}", ["N_2+N_1"], ["-(N_{1}+N_{2})", "N_1-N_2"]),
    ("E_1", ["E_{1}"], ["-E_1", "E_2", "E", "e", "2E_1", "1"]),
    ("E_{1}^{2}", ["E_1^2", r"E_{1}\cdot E_{1}"], ["-E_{1}^{2}", "E_{1}^{3}", "E_{2}^{2}"]),
    ("E_{n+1}", ["E_{n+1}"], ["E_{n}", "-E_{n+1}"]),
    # I with a subscript is a name (the parser read I_{1} as the imaginary unit, dropping the subscript)
    ("I_{1}+I_{2}", ["I_{2}+I_{1}", "I_1+I_2"], ["-(I_{1}+I_{2})", "2I_{1}", "I_{1}-I_{2}", "2I", "2i", "I_{1}+I_{3}"]),
    ("I_{2}", ["I_2"], ["I_{1}", "I", "-I_{2}", "i"]),
    # I alone is still the imaginary unit, e alone Euler's number
    ("1+I", ["I+1"], ["1-I", "-(1+I)"]),
    ("3+4i", ["4i+3"], ["3-4i", "-(3+4i)", "7"]),
    ("e^{2}", ["e^2", r"e\cdot e", r"\exp(2)"], ["-e^{2}", "e^{3}", "2e", "7.38905"]),
    ("e_{1}+e_{2}", ["e_2+e_1"], ["-(e_{1}+e_{2})", "e_1-e_2", "2e"]),
    # a subscript that could be read as a base: x_{2} is a name, not the number "x" in base 2
    ("x_{1}", ["x_1"], ["x", "-x_{1}", "1"]),
    ("x_{2}", ["x_2"], ["x", "-x_{2}", "2"]),
    ("I_{2}+1", ["1+I_2"], ["I+1", "-(I_{2}+1)"]),
]


def _pairs(expected: bool) -> list[tuple[str, str]]:
    return [(answer, gold) for gold, right, wrong in CASES for answer in (right if expected else wrong)]


def _equal(pred: str, gold: str) -> bool:
    """The scorer's judgement: the fast path when it decides, else the math-verify path (as in a worker)."""
    fast = fast_equal(pred, gold)
    return fast if fast is not None else answers_equal(pred, gold, timeout_s=2)[0]


@pytest.mark.parametrize(("pred", "gold"), _pairs(True))
def test_right_answers_are_accepted(pred: str, gold: str) -> None:
    assert _equal(pred, gold) is True


@pytest.mark.parametrize(("pred", "gold"), _pairs(False))
def test_wrong_answers_are_rejected(pred: str, gold: str) -> None:
    assert _equal(pred, gold) is False


def test_the_issue_answer_is_not_read_as_a_number() -> None:
    """The root cause: the whole answer is parsed, never a fragment of it (the 2/3 of the last \\frac{2}{3})."""
    gold = parse_answer(ISSUE_GOLD, 2)
    negated = parse_answer(r"-(\frac{1}{3}E_{1}+\frac{2}{3}E_{2})", 2)
    assert {str(s) for s in gold.free_symbols} == {"e_1", "e_2"}
    assert (gold + negated).simplify() == 0
    assert answers_equal(r"-(\frac{1}{3}E_{1}+\frac{2}{3}E_{2})", ISSUE_GOLD, timeout_s=2) == (False, "math-verify")


def test_an_unparsable_answer_is_not_replaced_by_a_fragment() -> None:
    """An answer math-verify's parser rejects stays unparsed (a string), whatever numbers it contains."""
    for answer, fragment in ((r"\frac{1}{2}\frac{1}{3}\frac{1}{4}\text{(", r"\frac{1}{4}"),
                             (r"3 + \frac{2}{3}\unknowncommand{", r"\frac{2}{3}")):
        assert isinstance(parse_answer(answer, 2), (str, type(None)))
        assert answers_equal(answer, fragment, timeout_s=2)[0] is False


@pytest.mark.parametrize(
    ("raw", "passed"),
    [("E_{1}", r"\mathrm{E}_{1}"), ("e_1", r"\mathrm{e}_1"), ("I_{2}", r"\mathrm{I}_{2}"), ("2E _1", r"2\mathrm{E} _1"),
     ("E^{2}_{1}", r"\mathrm{E}^{2}_{1}"), ("E_{1}E_{2}", r"\mathrm{E}_{1}\mathrm{E}_{2}"),
     # untouched: no subscript, or not a lone letter
     ("E", "E"), ("e^{2}", "e^{2}"), ("1+I", "1+I"), ("A_{1}", "A_{1}"), (r"\mathbb{E}_{1}", r"\mathbb{E}_{1}"),
     (r"\mathrm{E}_{1}", r"\mathrm{E}_{1}"), (r"\Theta_{1}", r"\Theta_{1}"), (r"\sum_{i=1}^{n} i", r"\sum_{i=1}^{n} i"),
     (r"\vec{e}_1", r"\vec{e}_1"), ("1.5E3", "1.5E3")],
)
def test_subscripted_constant_letters_are_passed_as_names(raw: str, passed: str) -> None:
    assert subscripted_names(raw) == passed


def test_base_subscripts_need_digits_of_that_base() -> None:
    assert read_based("52_8") == ("52", 8) and read_based("FF_{16}") == ("FF", 16) and read_based("1011_{2}")
    assert read_based("x_{2}") is None and read_based("I_{2}") is None and read_based("E_2") is None
    assert read_based("58_8") is None  # 8 is no digit of base 8
    assert fast_equal("52", "52_8") is True and fast_equal("101010_2", "52_8") is True
    assert fast_equal("4_2", "52_8") is not True  # int("4_2") would read 42, the value of 52_8


@pytest.fixture(scope="module")
def scorer() -> Scorer:
    s = Scorer(ScorerConfig(timeout_s=5.0))
    assert s.warm_up(120)
    return s


@pytest.mark.parametrize(
    ("answer", "acc"),
    [(ISSUE_GOLD, 1.0), (r"\frac{E_{1}+2E_{2}}{3}", 1.0), (r"-(\frac{1}{3}E_{1}+\frac{2}{3}E_{2})", 0.0),
     (r"\frac{2}{3}", 0.0)],
)
def test_issue_end_to_end(scorer: Scorer, answer: str, acc: float) -> None:
    out = scorer.score("issue22", "So the final answer is $\\boxed{" + answer + "}$.", ISSUE_GOLD)
    assert (out["acc"], out["timeout"], out["error"]) == (acc, 0.0, 0.0)
