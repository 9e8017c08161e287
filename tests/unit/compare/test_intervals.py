"""Paired bootstrap intervals of method - baseline, and the words they allow."""

from __future__ import annotations

import math
import re
from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from verl_ext.compare.intervals import (Censored, against_baseline, markdown_against_baseline, paired,
                                        paired_bootstrap, paired_censored_log_ratio, reading)


def run(method, seed, final, at=None, to_target=None, censored_at=None):
    return SimpleNamespace(method=method, seed=str(seed), val_final=final, val_at_budget=at or {},
                           rollouts_to_target=to_target, target_censored_at=censored_at)


@given(st.lists(st.floats(-1, 1, allow_nan=False), min_size=2, max_size=12))
@settings(max_examples=60, deadline=None)
def test_interval_brackets_the_mean_and_lies_within_the_data(diffs):
    iv = paired_bootstrap(diffs, resamples=500)
    assert min(diffs) - 1e-12 <= iv.low <= iv.mean + 1e-12 <= iv.high + 2e-12 <= max(diffs) + 3e-12
    assert iv.n == len(diffs)


def test_seeded_and_reproducible():
    assert paired_bootstrap([0.1, -0.05, 0.02, 0.04]) == paired_bootstrap([0.1, -0.05, 0.02, 0.04])


def test_words_follow_the_interval():
    assert paired_bootstrap([0.02, 0.03, 0.025, 0.04]).words("higher", "lower") == "higher"
    assert paired_bootstrap([-0.02, -0.03, -0.025]).words("higher", "lower") == "lower"
    assert "no difference shown" in paired_bootstrap([0.03, -0.02, 0.01, -0.01]).words("higher", "lower")
    assert paired_bootstrap([0.5]).words("higher", "lower") == "one seed: no interval"
    assert paired_bootstrap([]).words("higher", "lower") == "no seed to compare (not reached)"
    two = paired_bootstrap([0.5, 0.5])  # two seeds that agree: a zero-width range, not an interval
    assert two.low == two.high == 0.5 and two.words("higher", "lower") == "2 seeds: too few for a verdict"


def test_pairs_only_shared_seeds_and_skips_missing_values():
    assert paired({"0": 0.3, "1": 0.2, "2": None}, {"0": 0.25, "1": 0.3, "3": 0.1}) == pytest.approx([0.05, -0.1])
    diffs, censored = paired_censored_log_ratio({"0": (700.0, False), "1": (None, False)},
                                                {"0": (1000.0, False), "1": (900.0, False)})
    assert diffs == pytest.approx([math.log(0.7)]) and censored == Censored()


def test_a_run_that_never_reached_the_target_counts_at_its_end():
    method = {"0": (700.0, False), "1": (900.0, False), "2": (1000.0, True), "3": (800.0, True), "4": (None, False)}
    baseline = {"0": (1000.0, False), "1": (1000.0, True), "2": (800.0, False), "3": (1000.0, True), "4": (5.0, False)}
    diffs, censored = paired_censored_log_ratio(method, baseline)
    # seed 3: neither reached it (no order), seed 4: the method has no validation at all; both left out
    assert diffs == pytest.approx([math.log(0.7), math.log(0.9), math.log(1000 / 800)])
    assert censored == Censored(method=1, baseline=1)


def test_censored_seeds_withhold_the_verdict_they_would_make():
    # the baseline never reached the target on seeds 0-2 (counted at 1,000); the method needs more on every seed
    runs = [run("grpo", s, 0.2, to_target=None if s < 3 else 1000, censored_at=1000 if s < 3 else None)
            for s in range(4)]
    runs += [run("heapa", s, 0.2, to_target=1500 + 10 * s) for s in range(4)]
    [row] = against_baseline(runs, "grpo", [], resamples=500)
    assert row["rollouts_to_target"].n == 4 and row["rollouts_to_target"].low > 0
    assert row["rollouts_to_target_censored"] == Censored(method=0, baseline=3)
    assert "rollouts to target: not shown: the baseline never reached it on 3 seed(s)" in reading(row)
    # the method short on every seed where the baseline reached: "fewer" is withheld the same way
    flipped = [run("grpo", s, 0.2, to_target=1500 + 10 * s) for s in range(4)]
    flipped += [run("heapa", s, 0.2, to_target=None, censored_at=1000) for s in range(4)]
    [row] = against_baseline(flipped, "grpo", [], resamples=500)
    assert row["rollouts_to_target"].high < 0 and "the method never reached it on 4 seed(s)" in reading(row)
    assert "(short: 4 | 0)" in markdown_against_baseline([row], [])


def test_table_against_baseline():
    runs = [run("grpo", s, 0.25 + 0.01 * s, {1280.0: 0.20}, 3000) for s in range(4)]
    runs += [run("heapa_grpo", s, 0.25 + 0.01 * s + d, {1280.0: 0.23 + d}, 2100 + 30 * s)
             for s, d in zip(range(4), (0.01, -0.012, 0.004, -0.002))]
    rows = against_baseline(runs, "grpo", [1280.0], resamples=2000)
    assert [r["method"] for r in rows] == ["heapa_grpo"]
    row = rows[0]
    assert row["at_budget"][1280.0].low > 0 and row["rollouts_to_target"].high < 0
    assert row["final"].contains_zero()
    text = reading(row)
    assert "accuracy at 1,280 rollouts: higher" in text and "rollouts to target: fewer" in text
    assert "final accuracy: no difference shown" in text
    table = re.sub(r" +", " ", markdown_against_baseline(rows, [1280.0]))  # cells, not padding
    assert "| heapa_grpo | grpo | 4 |" in table and "x [" in table


def test_unknown_baseline_is_an_error():
    with pytest.raises(ValueError, match="baseline 'dapo'"):
        against_baseline([run("grpo", 0, 0.2)], "dapo", [])


def test_seeds_needed_follows_the_paired_spread():
    # differences 0.00, 0.02, 0.04 (sd 0.02): a +-1 point interval needs ceil((1.96 * 2)^2) = 16 seeds
    iv = paired_bootstrap([0.0, 0.02, 0.04], resamples=200)
    assert iv.sd == pytest.approx(0.02)
    assert iv.seeds_needed(0.01) == 16
    assert iv.seeds_needed(0.02) == 4
    assert paired_bootstrap([0.01, 0.01, 0.0101]).seeds_needed(0.01) == 3  # never below the verdict minimum
    assert paired_bootstrap([0.3]).seeds_needed(0.01) is None  # one seed: no spread


def test_table_prints_seeds_for_one_point():
    runs = [run("grpo", s, 0.20 + 0.01 * s) for s in range(4)] + [
        run("heapa", s, 0.20 + 0.01 * s + d) for s, d in zip(range(4), (0.0, 0.02, 0.04, 0.02))]
    rows = against_baseline(runs, "grpo", [])
    text = markdown_against_baseline(rows, [])
    assert "seeds for ±1 pt" in text
    line = next(ln for ln in text.splitlines() if ln.startswith("| heapa"))
    expected = math.ceil((1.959964 * paired_bootstrap([0.0, 0.02, 0.04, 0.02]).sd / 0.01) ** 2)
    assert line.split("|")[-3].strip() == str(expected) == "11"
