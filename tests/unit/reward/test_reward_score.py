"""compute_score / Scorer end to end (worker processes included): the issue's inputs as regression tests, the public
API's contract, and DAPO's overlong penalty."""

from __future__ import annotations

import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from verl_ext.reward import RESULT_KEYS, Scorer, ScorerConfig, compute_score, is_equivalent, overlong_penalty
from verl_ext.reward import scorer as scorer_module

LIMIT_S = 1.0
SLACK_S = 0.35  # thread hand-off, pipe round trip and the kill, on a loaded 2-core machine


@pytest.fixture(scope="module")
def short() -> Scorer:
    s = Scorer(ScorerConfig(timeout_s=LIMIT_S))
    assert s.warm_up(120)
    return s


def test_result_keys_and_scores() -> None:
    assert compute_score("x", r"thus \boxed{42}", "42") == {"score": 1.0, "acc": 1.0, "pred": "42", "timeout": 0.0,
                                                          "error": 0.0}
    assert compute_score("x", r"thus \boxed{41}", "42")["acc"] == 0.0
    assert compute_score("x", "no answer", "42") == dict(zip(RESULT_KEYS, (0.0, 0.0, "", 0.0, 0.0)))


def test_dapo_scores_plus_minus_one() -> None:
    assert compute_score("x", "Answer: 42", 42, format="dapo")["score"] == 1.0
    wrong = compute_score("x", "Answer: 7", 42, format="dapo")
    assert wrong["score"] == -1.0 and wrong["acc"] == 0.0
    assert compute_score("x", "nothing", 42, format="dapo")["score"] == -1.0


def test_auto_falls_back_to_answer_line() -> None:
    assert compute_score("x", "Answer: 3", "3", format="auto")["acc"] == 1.0
    assert compute_score("x", "Answer: 3", "3", format="boxed")["acc"] == 0.0


def test_bad_settings_are_clear_errors() -> None:
    with pytest.raises(ValueError, match="format='latex'"):
        compute_score("x", "", "1", format="latex")
    with pytest.raises(ValueError, match="timeout_s"):
        ScorerConfig(timeout_s=0)
    with pytest.raises(ValueError, match="choices"):
        ScorerConfig(choices="sometimes")


def test_verl_extra_kwargs_are_accepted() -> None:
    out = compute_score(data_source="x", solution_str=r"\boxed{1}", ground_truth="1", extra_info={},
                        reward_router_address=None, reward_model_tokenizer=None)
    assert out["acc"] == 1.0


ISSUE_STALLS = ("9!!!", "10^{9}!", r"\binom{999999}{499999}", r"\Gamma(10^{9})", r"\sum_{k=1}^{300} k^k",
                "{" * 20 + "1" + "}" * 20, r"9^{9^{9}}")


@pytest.mark.parametrize("answer", ISSUE_STALLS)
def test_stalls_score_zero_within_the_limit(short: Scorer, answer: str) -> None:
    start = time.monotonic()
    out = short.score("x", f"so the answer is \\boxed{{{answer}}}", "7")
    took = time.monotonic() - start
    assert out["score"] == 0.0 and out["acc"] == 0.0 and took <= LIMIT_S + SLACK_S


def test_stalls_in_a_batch_leave_the_other_items_scored() -> None:
    """Two stalls take both workers; the batch's other items (numeric and symbolic) are still scored right.

    An 8 s limit: the stalls hold both workers for 4 s (half the limit), then the queued items have 4 s, in which
    the replacement workers start (importing sympy) and score them. With a 2 s limit, 1 s was too short for the
    replacements to start while two training runs shared the 2 cores, and a normal item scored as a timeout."""
    limit = 8.0
    scorer = Scorer(ScorerConfig(timeout_s=limit))
    assert scorer.warm_up(120)
    stalls = [(r"\boxed{9^{9^{9}}}", "x^2+1"), (r"\boxed{10^{10^{10}}}", "7")]
    normal = [(r"\boxed{\frac{\sqrt{3}}{3}}", r"\frac{1}{\sqrt{3}}"), (r"\boxed{(x+1)^2}", "x^2+2x+1"),
              (r"\boxed{1.24e-8}", r"1.24\times10^{-8}"), (r"\boxed{42}", "42")] * 3
    batch = stalls + normal
    start = time.monotonic()
    with ThreadPoolExecutor(max_workers=len(batch)) as ex:
        outs = list(ex.map(lambda it: (scorer.score("x", *it), time.monotonic() - start), batch))
    assert all(took <= limit + SLACK_S for _, took in outs)
    assert [o["acc"] for o, _ in outs] == [0.0, 0.0] + [1.0] * len(normal)
    assert sum(o["timeout"] for o, _ in outs) == 2


def test_a_c_level_stall_is_a_counted_timeout(short: Scorer) -> None:
    before = short.pool.counts["killed"]
    out = short.score("x", r"\boxed{9^{9^{9}}}", "x^2+1")
    assert out["timeout"] == 1.0 and out["error"] == 0.0 and out["acc"] == 0.0
    assert short.pool.counts["killed"] == before + 1
    assert short.metrics()["reward/timeouts"] >= 1
    assert short.score("x", r"\boxed{(x+1)^2}", "x^2+2x+1")["acc"] == 1.0  # the replacement worker scores


@pytest.mark.parametrize(
    ("answer", "gold"),
    [("0", "2.88e-19"), ("-2.88e-19", "2.88e-19"), ("5.76e-19", "2.88e-19"), ("11111111101", "11111111100"),
     (r"\text{2-methylpropane}", "2"), (r"\text{3-methylpentane}", r"\text{2-methylpropane}"), ("52_9", "52_8"),
     (r"x^2 + 1 \text{ where } x = 2", "5"), ("0.333", r"\frac{1}{3}")],
)
def test_never_pays_for_a_wrong_answer(answer: str, gold: str) -> None:
    assert compute_score("x", f"\\boxed{{{answer}}}", gold)["acc"] == 0.0


@pytest.mark.parametrize(
    ("answer", "gold"),
    [("1.24e-8", "1.24e-8"), (r"1.24 \times 10^{-8}", "1.24e-8"), (r"1.24\cdot10^{-8}", "1.24e-8"),
     ("1.24e-8", r"1.24 \times 10^{-8}"), ("2.876e-19", "2.88e-19"), ("11,111,111,100", r"11,\! 111,\! 111,\! 100"),
     (r"5.4 \text{ cents}", "5.4"), ("864", r"864 \mbox{ inches}^2"), (r"90^\circ", "90"), ("0.333333", r"\frac13")],
)
def test_accepts_right_answers_in_other_notations(answer: str, gold: str) -> None:
    assert compute_score("x", f"\\boxed{{{answer}}}", gold)["acc"] == 1.0


def test_box_at_the_start_of_a_very_long_response() -> None:
    text = r"The answer is \boxed{1.24e-8}." + " Let me double-check this once more." * 4_000
    assert compute_score("x", text, r"1.24 \times 10^{-8}")["acc"] == 1.0


@pytest.mark.parametrize("answer", ["B", "(B)", "B)", r"\text{B}", "B) 4.5 m/s"])
def test_multiple_choice_letters(answer: str) -> None:
    assert compute_score("gpqa_diamond", f"\\boxed{{{answer}}}", "B")["acc"] == 1.0
    assert compute_score("gpqa_diamond", f"Answer: {answer}", "B", format="dapo")["score"] == 1.0
    assert compute_score("gpqa_diamond", f"\\boxed{{{answer}}}", "C")["acc"] == 0.0


def test_choice_letters_are_not_read_from_prose() -> None:
    assert compute_score("gpqa_diamond", "I think (B) is right, so \\boxed{4.5}", "B")["acc"] == 0.0
    assert compute_score("gpqa_diamond", "Both options fail", "B", format="auto")["acc"] == 0.0


def test_list_ground_truth_accepts_any() -> None:
    assert compute_score("x", r"\boxed{3}", ["2", "3"])["acc"] == 1.0
    assert compute_score("x", r"\boxed{4}", ["2", "3"])["acc"] == 0.0


def test_an_in_process_bug_is_a_counted_error(monkeypatch: pytest.MonkeyPatch, caplog) -> None:
    s = Scorer(ScorerConfig(format="dapo"))

    def broken(*_a, **_k):
        raise RuntimeError("extraction bug")

    monkeypatch.setattr(scorer_module, "extract_answer", broken)
    out = s.score("x", r"\boxed{1}", "1")
    assert out == {"score": -1.0, "acc": 0.0, "pred": "", "timeout": 0.0, "error": 1.0}
    assert s.metrics()["reward/errors"] == 1.0
    assert "extraction bug" in caplog.text


def test_works_off_the_main_thread_and_in_batches() -> None:
    results: list[dict] = []
    t = threading.Thread(target=lambda: results.append(compute_score("x", r"\boxed{\frac{2}{4}}", "0.5")))
    t.start()
    t.join(30)
    assert results[0]["acc"] == 1.0
    s = Scorer()
    items = [{"data_source": "x", "solution_str": f"\\boxed{{{i}}}", "ground_truth": str(i % 3)} for i in range(6)]
    assert [o["acc"] for o in s.score_many(items)] == [1.0, 1.0, 1.0, 0.0, 0.0, 0.0]


def test_is_equivalent_on_extracted_answers() -> None:
    assert is_equivalent(r"\frac12", "0.5") and not is_equivalent("0", "2.88e-19")


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


def test_a_forked_child_forgets_the_parents_pools() -> None:
    """Evaluation may fan out with a fork-based process pool after scoring in the parent: the child must start its
    own workers on first use, never write to the parent's worker pipes."""
    from verl_ext.reward import math_score, workers

    assert compute_score("x", r"\boxed{x^2+2x+1}", "(x+1)^2")["acc"] == 1.0  # the parent's pool is up
    assert workers._SHARED and math_score._SCORERS
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child reports what it still knows of the parent's pools
        os.write(w, b"%d %d" % (len(workers._SHARED) + len(workers._LIVE_POOLS), len(math_score._SCORERS)))
        os._exit(0)
    os.close(w)
    os.waitpid(pid, 0)
    assert os.read(r, 64) == b"0 0"
    os.close(r)
    assert compute_score("x", r"\boxed{\sqrt{2}}", r"\frac{2}{\sqrt{2}}")["acc"] == 1.0  # the parent's still works
