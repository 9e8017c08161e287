"""avg@k / pass@k: hand-computed cases and the estimator's properties (hypothesis)."""

from __future__ import annotations

import itertools
import math
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from verl_ext.evaluation.metrics import ProblemResult, pass_at_k, score_all, score_benchmark


def test_pass_at_k_hand_computed():
    # n=4, c=1: pass@1 = 1/4; pass@2 = 1 - C(3,2)/C(4,2) = 1 - 3/6; pass@4 = 1
    assert pass_at_k(4, 1, 1) == pytest.approx(0.25)
    assert pass_at_k(4, 1, 2) == pytest.approx(0.5)
    assert pass_at_k(4, 1, 4) == 1.0
    # n=16, c=3, k=4: 1 - C(13,4)/C(16,4) = 1 - 715/1820
    assert pass_at_k(16, 3, 4) == pytest.approx(1 - 715 / 1820)
    assert pass_at_k(5, 0, 3) == 0.0
    assert pass_at_k(5, 5, 1) == 1.0
    assert pass_at_k(5, 3, 3) == 1.0  # n - c < k: every 3-subset holds a correct sample


@pytest.mark.parametrize("n,c,k,err", [(4, 1, 5, "needs at least 5 samples"), (0, 0, 1, "n >= 1"),
                                       (4, 5, 1, "0 <= c <= n"), (4, 1, 0, "k >= 1")])
def test_pass_at_k_rejects_bad_input(n, c, k, err):
    with pytest.raises(ValueError, match=err):
        pass_at_k(n, c, k)


def test_pass_at_k_rejects_floats():
    with pytest.raises(TypeError):
        pass_at_k(4.0, 1, 1)


def test_benchmark_and_overall_hand_computed():
    probs = [ProblemResult("aime24", "0", (1, 0, 0, 0)), ProblemResult("aime24", "1", (1, 1, 1, 1)),
             ProblemResult("math500", "0", (0, 0, 0, 0)), ProblemResult("math500", "1", (1, 1, 0, 0)),
             ProblemResult("math500", "2", (1, 0, 1, 0))]
    out = score_all(probs, ks=[1, 2, 4])
    aime, math500 = out["benchmarks"]["aime24"], out["benchmarks"]["math500"]
    assert aime["avg"] == pytest.approx((0.25 + 1.0) / 2) and aime["avg@4"] == aime["avg"]
    assert aime["pass_at"]["2"] == pytest.approx((0.5 + 1.0) / 2)
    assert math500["avg"] == pytest.approx((0 + 0.5 + 0.5) / 3)
    # c=2 of 4, k=2: 1 - C(2,2)/C(4,2) = 5/6
    assert math500["pass_at"]["2"] == pytest.approx((0 + 5 / 6 + 5 / 6) / 3)
    assert math500["pass_at"]["4"] == pytest.approx(2 / 3)
    overall = out["overall"]
    assert overall["avg_macro"] == pytest.approx((aime["avg"] + math500["avg"]) / 2)
    assert overall["avg_micro"] == pytest.approx((0.25 + 1 + 0 + 0.5 + 0.5) / 5)
    assert overall["n_benchmarks"] == 2 and overall["n_problems"] == 5


def test_k_larger_than_samples_names_the_problem():
    with pytest.raises(ValueError, match="problem '7' has 2"):
        score_benchmark("aime24", [ProblemResult("aime24", "7", (1, 0))], ks=[4])


def test_empty_inputs_raise():
    with pytest.raises(ValueError, match="no scored problems"):
        score_all([], ks=[1])
    with pytest.raises(ValueError, match="no scored samples"):
        score_benchmark("x", [ProblemResult("x", "0", ())], ks=[1])


outcomes = st.lists(st.booleans(), min_size=1, max_size=12)


@given(outcomes)
def test_pass_at_1_is_the_mean_accuracy(sample):
    n, c = len(sample), sum(sample)
    assert pass_at_k(n, c, 1) == pytest.approx(c / n)


@given(outcomes)
def test_pass_at_k_is_monotone_in_k_and_bounded(sample):
    n, c = len(sample), sum(sample)
    values = [pass_at_k(n, c, k) for k in range(1, n + 1)]
    assert all(0.0 <= v <= 1.0 for v in values)
    assert all(a <= b + 1e-12 for a, b in zip(values, values[1:]))
    assert values[-1] == (1.0 if c else 0.0)


@settings(max_examples=60)
@given(st.lists(st.booleans(), min_size=1, max_size=9), st.integers(min_value=1, max_value=9))
def test_unbiased_estimator_matches_brute_force(sample, k):
    """pass@k = the share of k-subsets of the n samples that contain a correct one."""
    n = len(sample)
    k = min(k, n)
    subsets = list(itertools.combinations(range(n), k))
    brute = sum(any(sample[i] for i in s) for s in subsets) / len(subsets)
    assert pass_at_k(n, sum(sample), k) == pytest.approx(brute, abs=1e-12)


@given(st.lists(outcomes, min_size=1, max_size=6))
def test_benchmark_pass_at_1_equals_avg(problems):
    n_min = min(len(p) for p in problems)
    probs = [ProblemResult("b", str(i), tuple(float(x) for x in p)) for i, p in enumerate(problems)]
    out = score_benchmark("b", probs, ks=[1, n_min])
    assert out.pass_at[1] == pytest.approx(out.avg)
    assert out.pass_at[n_min] >= out.pass_at[1] - 1e-12


def test_large_n_is_stable():
    value = pass_at_k(1024, 1, 512)
    assert value == pytest.approx(0.5)
    assert math.isfinite(pass_at_k(4096, 7, 100))


def test_pure_modules_import_no_heavy_frameworks():
    import subprocess

    code = ("import sys, verl_ext.evaluation, verl_ext.evaluation.cli, verl_ext.compare, verl_ext.compare.cli; "
            "print(sorted(m for m in ('torch','verl','ray','vllm','transformers','matplotlib','wandb') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout.strip() == "[]"
