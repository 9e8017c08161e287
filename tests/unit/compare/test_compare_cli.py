"""`python -m verl_ext.compare` on launcher-shaped run folders: table, summary JSON and PNGs."""

from __future__ import annotations

import json
import math
import re

import pytest

from verl_ext.compare.cli import main
from verl_ext.compare.summary import mean_sd


def squash(text: str) -> str:
    """A tabulate table with its column padding collapsed, so cells read '| a | b |' whatever the widths."""
    return re.sub(r" +", " ", text)


def test_two_methods_three_seeds(tmp_path, make_run_dir, capsys):
    runs = []
    for seed, shift in enumerate((0.02, 0.03, 0.04)):
        runs.append(make_run_dir(f"heapa_dapo_s{seed}", val_shift=shift))
        runs.append(make_run_dir(f"grpo_s{seed}", grpo=True, val_shift=shift / 2))
    out = tmp_path / "cmp"
    assert main([*map(str, runs), "--out", str(out), "--target", "0.41"]) == 0
    table = (out / "table.md").read_text()
    assert table == capsys.readouterr().out
    summary = json.loads((out / "summary.json").read_text())
    # GRPO generates 128 rollouts in 4 steps, HeaPA-DAPO 520: the common budget is GRPO's last validation
    assert summary["budgets"] == [128.0]
    heapa, grpo = summary["methods"]["heapa_dapo"], summary["methods"]["grpo"]
    assert heapa["seeds"] == ["0", "1", "2"] and grpo["total_rollouts"]["mean"] == 128
    # heapa at 128 rollouts: between its step-0 (0 rollouts) and step-2 (260) validations
    base = 0.34375
    expected = [base + shift * 2 * 128 / 260 for shift in (0.02, 0.03, 0.04)]
    m, sd, n = mean_sd(expected)
    assert heapa["val_at_budget"]["128"] == {"mean": pytest.approx(m), "sd": pytest.approx(sd), "n": 3}
    assert grpo["val_final"]["mean"] == pytest.approx(base + 4 * 0.015)
    # target 0.41: every heapa seed crosses it (at step 2 or 4); of grpo (finals .384/.404/.424) only seed 2
    assert heapa["rollouts_to_target"]["n"] == 3 and grpo["rollouts_to_target"] == {"mean": 128, "sd": 0.0, "n": 1}
    table = squash(table)
    lines = table.splitlines()
    assert lines[0].startswith("| method | seeds | val acc @ 128 rollouts | final val acc |")
    assert lines[2].startswith("| heapa_dapo | 3 | ") and "128 ± 0 (1/3)" in lines[3]
    for png in ("val_vs_step.png", "val_vs_rollouts.png", "zero_signal.png", "pool.png"):
        assert (out / png).stat().st_size > 5000
    # against grpo (the automatic baseline), paired by seed: at 128 rollouts heapa (mid-way between validations)
    # is 2.0-4.1 points behind grpo (already at its final validation) on every seed
    [row] = summary["against_baseline"]
    assert row["method"] == "heapa_dapo" and row["baseline"] == "grpo" and row["at_budget"]["128"]["n"] == 3
    assert -0.045 < row["at_budget"]["128"]["low"] <= row["at_budget"]["128"]["mean"] < -0.015
    assert row["at_budget"]["128"]["high"] < 0 and "accuracy at 128 rollouts: lower" in row["reading"]
    assert "| heapa_dapo | grpo | 3 |" in table and "percentile bootstrap" in table
    # rollouts to 0.41: grpo never reached it on seeds 0 and 1, so they count at its last validation (128), a
    # lower bound; heapa (260-520) needs more on every seed, but "more" rests on those two, so it is withheld
    ratio, runs = row["rollouts_to_target_log_ratio"], summary["runs"]
    assert ratio["n"] == 3 and row["rollouts_to_target_censored"] == {"method": 0, "baseline": 2}
    heapa_x = {r["seed"]: r["rollouts_to_target"] for r in runs if r["method"] == "heapa_dapo"}
    grpo_x = {r["seed"]: r["rollouts_to_target"] or r["target_censored_at"] for r in runs if r["method"] == "grpo"}
    assert grpo_x == {"0": 128, "1": 128, "2": 128}
    assert ratio["mean"] == pytest.approx(sum(math.log(heapa_x[s] / 128) for s in "012") / 3)
    assert "rollouts to target: not shown: the baseline never reached it on 2 seed(s)" in row["reading"]
    assert "(short: 0 | 2)" in table


def test_auto_target_budgets_and_estimated_flag(tmp_path, make_run_dir):
    a = make_run_dir("grpo_s0", grpo=True, val_shift=0.01)
    b = make_run_dir("grpo_s1", grpo=True, val_shift=0.03, drop_steps=(1,))
    out = tmp_path / "cmp"
    assert main([str(a), str(b), "--out", str(out), "--budgets", "64,1_000", "--no-plots"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["target"] == pytest.approx(0.34375 + 4 * 0.02)  # the one method's mean final accuracy
    assert summary["methods"]["grpo"]["val_at_budget"]["1000"]["n"] == 0  # past every run's last validation
    assert summary["methods"]["grpo"]["rollouts_estimated"] is True
    table = squash((out / "table.md").read_text())
    assert "| grpo * | 2 |" in table and "estimated" in table
    assert not (out / "val_vs_step.png").exists()


def test_target_window_reads_the_crossing_on_a_mean_of_validations(tmp_path, make_run_dir):
    """--target-window 2: a run reaches the target where the mean of two consecutive validations does; the column
    says so; 0 is refused."""
    a = make_run_dir("grpo_s0", grpo=True, val_shift=0.01)
    out1, out2 = tmp_path / "w1", tmp_path / "w2"
    assert main([str(a), "--out", str(out1), "--target", "0.36", "--no-plots"]) == 0
    assert main([str(a), "--out", str(out2), "--target", "0.36", "--target-window", "2", "--no-plots"]) == 0
    one, two = (json.loads((o / "summary.json").read_text()) for o in (out1, out2))
    points = one["runs"][0]["val_points"]
    expected = next(r for i, (_, r, _) in enumerate(points[1:], 1)
                    if (points[i - 1][2] + points[i][2]) / 2 >= 0.36)
    assert two["runs"][0]["rollouts_to_target"] == expected > one["runs"][0]["rollouts_to_target"]
    assert two["target_window"] == 2 and "(mean of 2 validations)" in (out2 / "table.md").read_text()
    with pytest.raises(SystemExit, match="--target-window"):
        main([str(a), "--out", str(tmp_path / "o"), "--target-window", "0", "--no-plots"])


def test_target_crossing_interpolated_reads_between_validations(tmp_path, make_run_dir):
    """--target-crossing interpolated: the crossing lies on the line from the validation before, and the summary
    and the column say which reading it is."""
    a = make_run_dir("grpo_s0", grpo=True, val_shift=0.01)
    out1, out2 = tmp_path / "v", tmp_path / "i"
    assert main([str(a), "--out", str(out1), "--target", "0.36", "--no-plots"]) == 0
    assert main([str(a), "--out", str(out2), "--target", "0.36", "--target-crossing", "interpolated",
                 "--no-plots"]) == 0
    one, two = (json.loads((o / "summary.json").read_text()) for o in (out1, out2))
    points = one["runs"][0]["val_points"]
    i = next(i for i, (_, _, acc) in enumerate(points) if acc >= 0.36)
    assert i > 0 and points[i - 1][2] < 0.36
    (_, r0, y0), (_, r1, y1) = points[i - 1], points[i]
    assert one["runs"][0]["rollouts_to_target"] == r1
    assert two["runs"][0]["rollouts_to_target"] == pytest.approx(r0 + (0.36 - y0) / (y1 - y0) * (r1 - r0))
    assert (one["target_crossing"], two["target_crossing"]) == ("validation", "interpolated")
    assert "interpolated" in (out2 / "table.md").read_text().splitlines()[0]


def test_bad_arguments(tmp_path, make_run_dir):
    a = make_run_dir("grpo_s0")
    with pytest.raises(SystemExit, match="unique"):
        main([str(a), f"grpo_s0={a}", "--out", str(tmp_path / "o"), "--no-plots"])
    with pytest.raises(SystemExit, match="--baseline 'dapo'"):
        main([str(a), "--out", str(tmp_path / "o"), "--no-plots", "--baseline", "dapo"])
    with pytest.raises(SystemExit, match="--target"):
        main([str(a), "--out", str(tmp_path / "o"), "--target", "40", "--no-plots"])
    with pytest.raises(SystemExit, match="--budgets"):
        main([str(a), "--out", str(tmp_path / "o"), "--budgets", "lots", "--no-plots"])


def test_tail_mean_averages_the_late_validations_and_pairs_them(tmp_path, make_run_dir):
    """--tail-from R: the mean of each run's validations at or after R rollouts, and its paired difference."""
    runs = []
    for seed, shift in enumerate((0.02, 0.03, 0.04)):
        runs.append(make_run_dir(f"heapa_dapo_s{seed}", val_shift=shift))
        runs.append(make_run_dir(f"grpo_s{seed}", grpo=True, val_shift=shift / 2))
    out = tmp_path / "cmp"
    assert main([*map(str, runs), "--out", str(out), "--tail-from", "64", "--no-plots"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    base = 0.34375
    # validations at steps 2 and 4 (GRPO: 64 and 128 rollouts; HeaPA-DAPO: 260 and 520): mean = base + 3 * shift
    grpo = summary["methods"]["grpo"]
    assert grpo["val_tail"]["mean"] == pytest.approx(base + 3 * 0.015)
    assert grpo["val_tail_count"]["mean"] == 2
    [row] = summary["against_baseline"]
    assert row["tail"]["mean"] == pytest.approx(3 * 0.015) and row["tail"]["low"] > 0
    assert "mean of the late validations: higher" in row["reading"]
    table = squash((out / "table.md").read_text())
    assert "| mean val acc from 64 |" in table and "(of 2)" in table and "Δ late mean" in table


def test_max_step_reads_runs_as_if_they_had_stopped_there(tmp_path, make_run_dir):
    """--max-step 2: validations after step 2 and the rollouts they cost are gone (final = step 2's)."""
    a = make_run_dir("grpo_s0", grpo=True, val_shift=0.01)
    out = tmp_path / "cmp"
    assert main([str(a), "--out", str(out), "--max-step", "2", "--no-plots"]) == 0
    grpo = json.loads((out / "summary.json").read_text())["methods"]["grpo"]
    assert grpo["val_final"]["mean"] == pytest.approx(0.34375 + 2 * 0.01)
    assert grpo["total_rollouts"]["mean"] == 64  # 2 steps of 32, not 4
    with pytest.raises(SystemExit, match="--max-step"):
        main([str(a), "--out", str(out), "--max-step", "-1", "--no-plots"])


def test_tail_from_step_and_at_steps_pair_validations_by_training_step(tmp_path, make_run_dir):
    """--tail-from-step 2 --at-steps 2,3,4: the late mean from step 2 on and the validation at each asked step,
    paired by seed; step 3 was not validated, so it has no value; the tail by rollouts and by steps exclude each
    other."""
    runs, shifts = [], (0.02, 0.03, 0.05)
    for seed, shift in enumerate(shifts):
        runs.append(make_run_dir(f"heapa_dapo_s{seed}", val_shift=shift))
        runs.append(make_run_dir(f"grpo_s{seed}", grpo=True, val_shift=shift / 2))
    out = tmp_path / "cmp"
    assert main([*map(str, runs), "--out", str(out), "--tail-from-step", "2", "--at-steps", "2,3,4",
                 "--no-plots"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    base = 0.34375
    heapa = summary["methods"]["heapa_dapo"]
    # HeaPA-DAPO validates at steps 2 and 4 (260 and 520 rollouts): by step the tail is the same pair as GRPO's
    assert heapa["val_tail"]["mean"] == pytest.approx(base + 3 * sum(shifts) / 3)
    assert heapa["val_at_step"]["4"]["mean"] == pytest.approx(base + 4 * sum(shifts) / 3)
    assert heapa["val_at_step"]["3"]["n"] == 0
    [row] = summary["against_baseline"]
    diffs = [s / 2 for s in shifts]  # per seed: heapa - grpo = shift * step / 2
    assert row["at_step"]["2"]["mean"] == pytest.approx(2 * sum(diffs) / 3)
    assert row["at_step"]["2"]["low"] == pytest.approx(2 * min(diffs))
    assert row["at_step"]["2"]["high"] == pytest.approx(2 * max(diffs))
    assert row["at_step"]["3"]["n"] == 0
    assert row["tail"]["mean"] == pytest.approx(3 * sum(diffs) / 3)
    assert summary["tail_from_step"] == 2 and summary["at_steps"] == [2, 3, 4]
    table = squash((out / "table.md").read_text())
    assert "| val acc @ step 2 | val acc @ step 3 | val acc @ step 4 | final val acc | mean val acc from step 2 |" \
        in table
    assert "Δ acc @ step 4" in table and "| n/a |" in table
    with pytest.raises(SystemExit):
        main([str(runs[0]), "--out", str(out), "--tail-from", "64", "--tail-from-step", "2", "--no-plots"])
    with pytest.raises(SystemExit, match="--tail-from-step"):
        main([str(runs[0]), "--out", str(out), "--tail-from-step", "-1", "--no-plots"])
    with pytest.raises(SystemExit, match="--at-steps"):
        main([str(runs[0]), "--out", str(out), "--at-steps", "2.5", "--no-plots"])
