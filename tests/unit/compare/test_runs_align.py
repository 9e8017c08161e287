"""Reading verl file-logger runs and aligning them by step and by rollouts generated."""

from __future__ import annotations

import json
import os
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from verl_ext.compare.align import (AlignError, first_reaching, interpolate, rollout_axis, step_rollouts, val_keys,
                                    val_series, zero_signal_series)
from verl_ext.compare.runs import Run, RunError, add_scalars, load_runs, method_and_seed


def test_probe_log_reads_as_one_run(tmp_path, make_run_dir):
    folder = make_run_dir("heapa_dapo_s3")
    [run] = load_runs(str(folder))
    assert (run.name, run.method, run.seed) == ("heapa_dapo_s3", "heapa_dapo", "3")
    assert run.sorted_steps() == [0, 1, 2, 3, 4]
    assert val_series(run) == [(0, 0.34375), (2, 0.34375), (4, 0.34375)]


def test_names_methods_and_seeds():
    assert method_and_seed("heapa_grpo_s12") == ("heapa_grpo", "12")
    assert method_and_seed("dapo-seed2") == ("dapo", "2")
    assert method_and_seed("grpo") == ("grpo", None)
    assert method_and_seed("r1", re.compile(r"^(?P<method>r)(?P<seed>\d)$")) == ("r", "1")


def test_explicit_name_file_path_and_missing_source(tmp_path, make_run_dir):
    folder = make_run_dir("x")
    [run] = load_runs(f"ps_s1={folder / 'metrics.jsonl'}")
    assert (run.method, run.seed) == ("ps", "1")
    other = tmp_path / "grpo_s0.jsonl"
    other.write_text((folder / "metrics.jsonl").read_text())
    assert load_runs(str(other))[0].name == "grpo_s0"
    with pytest.raises(FileNotFoundError):
        load_runs(str(tmp_path / "nope"))
    with pytest.raises(RunError, match="no metrics"):
        load_runs(str(tmp_path))


def test_restart_files_merge_and_bad_lines(tmp_path, caplog, probe_file):
    folder = tmp_path / "grpo_s0"
    folder.mkdir()
    lines = probe_file.read_text().splitlines()
    # attempt 1 logged steps 0-3 with other values; the resumed attempt re-ran 3 and went on to 4
    first = [json.dumps({"step": s, "data": {"val-core/arith/acc/mean@1": 0.0, "x": 1.0}}) for s in range(4)]
    (folder / "metrics.attempt-1.jsonl").write_text("\n".join(first) + "\n")
    (folder / "metrics.jsonl").write_text("\n".join(lines[3:]) + '\n{"step": 5, "da')  # killed mid-write
    os.utime(folder / "metrics.attempt-1.jsonl", ns=(2**62, 2**62))  # mtime must not decide the order
    with caplog.at_level("WARNING"):
        [run] = load_runs(str(folder))
    assert run.sorted_steps() == [0, 1, 2, 3, 4] and "incomplete last line" in caplog.text
    assert run.steps[2] == {"val-core/arith/acc/mean@1": 0.0, "x": 1.0}  # only attempt 1 logged step 2
    assert run.steps[3]["feedback/n_records"] == 8.0 and "x" not in run.steps[3]  # re-run step 3: the later attempt
    (folder / "metrics.jsonl").write_text('{"step": 5, "da\n{"step": 6, "data": {}}\n')
    with pytest.raises(RunError, match=r"metrics\.jsonl line 1: not valid JSON"):
        load_runs(str(folder))
    (folder / "metrics.jsonl").write_text('{"step": "5", "data": {}}\n')
    with pytest.raises(RunError, match="line 1: expected"):
        load_runs(str(folder))


def test_non_numeric_values_are_skipped_and_counted():
    run = Run("r", "r", None, "mem")
    add_scalars(run, 1, {"a": 1, "b": {"0.0": 3}, "c": True, "d": float("nan"), "e": 2.5})
    assert run.steps[1] == {"a": 1.0, "e": 2.5} and run.skipped_values == 2


def test_rollouts_per_step_match_the_probe_by_hand(tmp_path, make_run_dir):
    [run] = load_runs(str(make_run_dir("heapa_dapo_s0")))
    # (trained 8 + evicted + surplus groups) x 4 responses: steps 1-4 evicted 25/21/17/27, surplus 1/2/1/4
    axis = rollout_axis(run)
    assert [axis.at(s) for s in range(5)] == [0, 136, 260, 364, 520]
    assert not axis.estimated_steps
    [grpo] = load_runs(str(make_run_dir("grpo_s0", grpo=True)))
    assert [rollout_axis(grpo).at(s) for s in range(5)] == [0, 32, 64, 96, 128]


def test_recipe_counters_win_and_fallbacks(tmp_path, make_run_dir):
    extra = {1: {"rollout/gen_responses": 40.0}, 2: {"rollout/gen_responses": 40.0},
             3: {"rollout/gen_responses_cum": 500.0}}
    [run] = load_runs(str(make_run_dir("a_s0", extra=extra)))
    axis = rollout_axis(run)
    assert [axis.at(s) for s in range(5)] == [0, 40, 80, 500, 656]  # step 4: feedback formula (39 groups x 4)
    plain = Run("plain", "plain", None, "mem")
    add_scalars(plain, 0, {"val-core/x/acc/mean@1": 0.1})
    add_scalars(plain, 1, {"actor/loss": 0.2})
    with pytest.raises(AlignError, match="--rollouts-per-step"):
        rollout_axis(plain)
    assert rollout_axis(plain, rollouts_per_step=64).at(1) == 64
    assert step_rollouts({}, None) is None


def test_missing_steps_are_estimated_and_flagged(tmp_path, make_run_dir):
    [run] = load_runs(str(make_run_dir("grpo_s0", grpo=True, drop_steps=(1, 2))))
    axis = rollout_axis(run)
    assert axis.estimated_steps == [1, 2] and axis.at(4) == 128


def test_val_series_over_several_sources_and_one_source():
    run = Run("r", "r", None, "mem")
    add_scalars(run, 0, {"val-core/aime24/acc/mean@16": 0.1, "val-core/math500/acc/mean@16": 0.5,
                         "val-core/HuggingFaceH4/MATH-500/reward/mean@4": 0.3, "val-aux/aime24/acc/mean@4": 0.9})
    add_scalars(run, 5, {"val-core/aime24/acc/mean@16": 0.2})  # math500 not validated here: step left out
    assert val_keys(run) == {"HuggingFaceH4/MATH-500": "val-core/HuggingFaceH4/MATH-500/reward/mean@4",
                             "aime24": "val-core/aime24/acc/mean@16", "math500": "val-core/math500/acc/mean@16"}
    assert val_series(run) == [(0, pytest.approx(0.3))]
    assert val_series(run, "aime24") == [(0, 0.1), (5, 0.2)]
    with pytest.raises(AlignError, match="no val-core metric for data source 'gsm8k'"):
        val_series(run, "gsm8k")
    with pytest.raises(AlignError, match="val_before_train"):
        val_series(Run("empty", "e", None, "mem"))


def test_interpolation_and_first_reaching():
    pts = [(0.0, 0.2), (100.0, 0.4), (300.0, 0.5)]
    assert interpolate(pts, 50) == pytest.approx(0.3) and interpolate(pts, 300) == 0.5
    assert interpolate(pts, 301) is None and interpolate([], 1) is None
    assert first_reaching(pts, 0.4) == 100.0 and first_reaching(pts, 0.6) is None


def test_first_reaching_on_a_window_of_validations():
    """One lucky validation crosses on its own, not in a mean of two; a level the run holds crosses in both."""
    pts = [(0.0, 0.30), (100.0, 0.38), (200.0, 0.33), (300.0, 0.36), (400.0, 0.37)]
    assert first_reaching(pts, 0.36) == 100.0  # the one lucky validation
    assert first_reaching(pts, 0.36, window=2) == 400.0  # means 0.34, 0.355, 0.345, 0.365
    assert first_reaching(pts, 0.35, window=3) == 300.0  # means 0.3367, 0.3567
    assert first_reaching(pts, 0.36, window=3) is None and first_reaching(pts[:1], 0.2, window=2) is None
    with pytest.raises(ValueError, match="window"):
        first_reaching(pts, 0.36, window=0)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(0.0, 1.0), min_size=1, max_size=12), st.floats(0.0, 1.0), st.integers(1, 4))
def test_a_window_never_crosses_before_its_last_validation_reaches_the_mean(ys, target, window):
    """The crossing is the last point of the first window whose mean reaches the target: never earlier than the
    window's end, and with window 1 the first single validation."""
    pts = [(float(100 * i), y) for i, y in enumerate(ys)]
    got = first_reaching(pts, target, window)
    means = [(pts[i][0], sum(ys[i - window + 1: i + 1]) / window) for i in range(window - 1, len(ys))]
    assert got == next((x for x, m in means if m >= target), None)
    assert got is None or got >= pts[window - 1][0]


def test_an_interpolated_crossing_lies_on_the_line_from_the_validation_before():
    pts = [(0.0, 0.30), (100.0, 0.34), (200.0, 0.38), (300.0, 0.40)]
    assert first_reaching(pts, 0.36) == 200.0
    assert first_reaching(pts, 0.36, interpolated=True) == pytest.approx(150.0)
    assert first_reaching(pts, 0.29, interpolated=True) == 0.0  # the first validation has no line before it
    assert first_reaching(pts, 0.37, window=2, interpolated=True) == pytest.approx(700 / 3)  # means .32, .36, .39
    assert first_reaching(pts, 0.41, interpolated=True) is None


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(0.0, 1.0), min_size=1, max_size=12), st.floats(0.0, 1.0), st.integers(1, 4))
def test_an_interpolated_crossing_lies_between_the_validation_and_the_one_before(ys, target, window):
    """Never after the validation that reached the target, never before the window's previous end, and reached
    exactly when the validation reading reaches it."""
    pts = [(float(100 * i), y) for i, y in enumerate(ys)]
    at, inside = first_reaching(pts, target, window), first_reaching(pts, target, window, interpolated=True)
    assert (at is None) == (inside is None)
    if at is not None:
        assert max(at - 100.0, pts[window - 1][0]) <= inside <= at


def test_zero_signal_share(tmp_path, make_run_dir):
    extra = {1: {"feedback/frac_all_correct": 0.25, "feedback/frac_all_wrong": 0.5}}
    [run] = load_runs(str(make_run_dir("a_s0", extra=extra)))
    assert zero_signal_series(run)[0] == (1, 0.75) and len(zero_signal_series(run)) == 4


def test_fixture_is_the_launchers_format(probe_file):
    for line in probe_file.read_text().splitlines():
        obj = json.loads(line)
        assert set(obj) == {"step", "data"} and isinstance(obj["step"], int)
