"""The README's avg@16 figures for HeaPA-GRPO, HeaPA-DAPO and HeaPA-AR3PO regenerate from the kept runs alone
(`results/cpu_pinned80/*_avg16*`): the comparison CLI, paired by seed, over steps 40-80 and at equal rollouts."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from verl_ext.compare.cli import main

KEPT = Path(__file__).resolve().parents[2] / "results" / "cpu_pinned80"


def compare(tmp_path, methods, *extra, seeds: int = 8) -> dict:
    runs = [str(p) for m in methods for p in sorted(KEPT.glob(f"{m}_s[0-{seeds - 1}]"))]  # seeds 0 .. seeds-1
    assert len(runs) == seeds * len(methods), runs
    assert main([*runs, "--out", str(tmp_path), "--no-plots", *extra]) == 0
    return json.loads((tmp_path / "summary.json").read_text())


def at_budgets(row: dict, *budgets: str) -> tuple[list[float], list[dict]]:
    """A comparison row's mean differences at these budgets, in points to one decimal, and their intervals."""
    found = [row["at_budget"][b] for b in budgets]
    return [round(100 * a["mean"], 1) for a in found], found


def test_heapa_grpo_against_grpo_on_avg16(tmp_path):
    summary = compare(tmp_path, ["grpo_epyc_80_avg16", "heapa_grpo_epyc_80_avg16"], "--baseline",
                      "grpo_epyc_80_avg16", "--budgets", "1280", "--tail-from-step", "40", "--target", "auto")
    [row] = summary["against_baseline"]
    assert row["tail"]["n"] == 8
    assert 100 * row["tail"]["mean"] == pytest.approx(0.8, abs=0.05) and 100 * row["tail"]["low"] > 0
    assert row["seeds_for_one_point"] == 3
    ratio = row["rollouts_to_target_log_ratio"]  # 0.95x [0.79x, 1.12x]: fewer rollouts to GRPO's final not shown
    assert ratio["n"] == 8 and row["rollouts_to_target_censored"] == {"method": 0, "baseline": 2}
    assert math.exp(ratio["mean"]) == pytest.approx(0.95, abs=0.005) and ratio["high"] > 0
    assert {run["val_points"][0][2] for run in summary["runs"]} == {0.129638671875}  # step 0: the same samples


@pytest.mark.parametrize("window, expected, below_one", [(2, 0.85, True), (3, 0.90, False)])
def test_heapa_grpo_to_grpos_final_read_on_a_mean_of_validations(tmp_path, window, expected, below_one):
    # GRPO never reaches its own mean final on a mean of two or three validations on 4 of 8 seeds (counted at
    # their end): one of the three readings docs/cpu_learning.md quotes puts the interval below 1x
    summary = compare(tmp_path, ["grpo_epyc_80_avg16", "heapa_grpo_epyc_80_avg16"], "--baseline",
                      "grpo_epyc_80_avg16", "--target", "auto", "--target-window", str(window))
    [row] = summary["against_baseline"]
    ratio = row["rollouts_to_target_log_ratio"]
    assert ratio["n"] == 8 and row["rollouts_to_target_censored"] == {"method": 0, "baseline": 4}
    assert math.exp(ratio["mean"]) == pytest.approx(expected, abs=0.005) and (ratio["high"] < 0) == below_one


@pytest.mark.parametrize("method, seeds, expected", [("heapa_grpo_epyc_80_avg16", 8, 0.1),
                                                     ("heapa_grpo_colds_epyc_80_avg16", 8, 0.4)])  # cold_draw=signal
def test_heapa_grpo_against_target_at_1280_rollouts(tmp_path, method, seeds, expected):
    summary = compare(tmp_path, ["heapa_grpo_target_epyc_80_avg16", method], "--baseline",
                      "heapa_grpo_target_epyc_80_avg16", "--budgets", "1280", "--target", "none", seeds=seeds)
    [row] = summary["against_baseline"]
    at = row["at_budget"]["1280"]
    assert at["n"] == seeds and 100 * at["mean"] == pytest.approx(expected, abs=0.05) and 100 * at["low"] > -1


def test_heapa_dapo_against_dapo_on_avg16(tmp_path):
    summary = compare(tmp_path, ["dapo_epyc_80_avg16", "heapa_dapo_epyc_80_avg16"], "--baseline",
                      "dapo_epyc_80_avg16", "--budgets", "1280,2560,15360", "--tail-from-step", "40",
                      "--target", "auto", seeds=5)
    [row] = summary["against_baseline"]
    means, early = at_budgets(row, "1280", "2560")
    assert means == [0.3, 0.5] and all(a["low"] > 0 for a in early)
    assert 100 * row["at_budget"]["15360"]["low"] == pytest.approx(-1.4, abs=0.05)  # the lowest lower end
    tail = row["tail"]
    assert tail["n"] == 5 and 100 * tail["mean"] == pytest.approx(-0.3, abs=0.05) and 100 * tail["low"] > -1
    assert row["seeds_for_one_point"] == 3
    ratio = row["rollouts_to_target_log_ratio"]  # 0.98x [0.78x, 1.31x]: fewer rollouts to DAPO's final not shown
    assert ratio["n"] == 5 and ratio["low"] < 0 < ratio["high"]
    assert row["rollouts_to_target_censored"] == {"method": 1, "baseline": 1}
    assert {run["val_points"][0][2] for run in summary["runs"]} == {0.129638671875}  # GRPO's step 0 too


def test_heapa_dapo_against_its_target_draw_at_1280_rollouts(tmp_path):
    summary = compare(tmp_path, ["heapa_dapo_target_epyc_80_avg16", "heapa_dapo_epyc_80_avg16"], "--baseline",
                      "heapa_dapo_target_epyc_80_avg16", "--budgets", "1280", "--target", "none", seeds=5)
    [row] = summary["against_baseline"]
    at = row["at_budget"]["1280"]
    assert at["n"] == 5 and 100 * at["mean"] == pytest.approx(0.2, abs=0.05) and 100 * at["low"] > -1
    assert {run["val_points"][0][2] for run in summary["runs"]} == {0.129638671875}


def test_the_frontier_seat_changes_heapa_grpos_batch_not_its_validation(tmp_path):
    summary = compare(tmp_path, ["heapa_grpo_epyc_80_avg16", "heapa_grpo_seat_epyc_80_avg16"], "--baseline",
                      "heapa_grpo_epyc_80_avg16", "--budgets", "1280", "--tail-from-step", "40", "--target", "none")
    [row] = summary["against_baseline"]
    tail = row["tail"]
    assert tail["n"] == 8 and 100 * tail["mean"] == pytest.approx(0.2, abs=0.05) and tail["low"] < 0 < tail["high"]
    zero = {run["method"]: run["zero_signal_mean"] for run in summary["runs"] if run["seed"] == "0"}
    assert zero["heapa_grpo_seat_epyc_80_avg16"] < zero["heapa_grpo_epyc_80_avg16"] - 0.05


def test_heapa_dapos_frontier_seat_against_dapo(tmp_path):
    summary = compare(tmp_path, ["dapo_epyc_80_avg16", "heapa_dapo_seat_epyc_80_avg16"], "--baseline",
                      "dapo_epyc_80_avg16", "--budgets", "1280", "--tail-from-step", "40", "--target", "auto")
    [row] = summary["against_baseline"]
    tail, early = row["tail"], row["at_budget"]["1280"]
    assert tail["n"] == 8 and 100 * tail["mean"] == pytest.approx(0.2, abs=0.05) and 100 * tail["low"] > -1
    assert 100 * early["mean"] == pytest.approx(-0.1, abs=0.05) and 100 * early["low"] > -1
    ratio = row["rollouts_to_target_log_ratio"]  # 0.76x [0.66x, 0.89x]; DAPO never reached 25.8 % on one seed
    assert ratio["n"] == 8 and ratio["high"] < 0 and math.exp(ratio["mean"]) == pytest.approx(0.76, abs=0.005)
    assert row["rollouts_to_target_censored"] == {"method": 0, "baseline": 1} and "target: fewer" in row["reading"]
    totals = {run["method"]: run["total_rollouts"] for run in summary["runs"] if run["seed"] == "1"}
    assert totals["heapa_dapo_seat_epyc_80_avg16"] < 0.75 * totals["dapo_epyc_80_avg16"]


def test_heapa_dapos_frontier_seat_against_its_target_draw_at_1280_rollouts(tmp_path):
    summary = compare(tmp_path, ["heapa_dapo_target_epyc_80_avg16", "heapa_dapo_seat_epyc_80_avg16"], "--baseline",
                      "heapa_dapo_target_epyc_80_avg16", "--budgets", "1280", "--target", "none")
    [row] = summary["against_baseline"]
    at = row["at_budget"]["1280"]
    assert at["n"] == 8 and 100 * at["mean"] == pytest.approx(-0.2, abs=0.05) and 100 * at["low"] > -1
    assert {run["val_points"][0][2] for run in summary["runs"]} == {0.129638671875}


def test_heapa_dapos_frontier_seat_against_the_cold_seat(tmp_path):
    summary = compare(tmp_path, ["heapa_dapo_epyc_80_avg16", "heapa_dapo_seat_epyc_80_avg16"], "--baseline",
                      "heapa_dapo_epyc_80_avg16", "--budgets", "1280,2560", "--tail-from-step", "40", "--target",
                      "auto", seeds=6)
    [row] = summary["against_baseline"]
    early = [row["at_budget"][b] for b in ("1280", "2560")]
    assert [round(100 * a["mean"], 1) for a in early] == [-0.5, -0.9] and all(a["high"] < 0 for a in early)
    assert 100 * row["tail"]["mean"] == pytest.approx(0.4, abs=0.05)
    ratio = row["rollouts_to_target_log_ratio"]  # 0.77x [0.70x, 0.84x] the cold seat's rollouts to its final
    assert ratio["high"] < 0 and math.exp(ratio["mean"]) == pytest.approx(0.77, abs=0.005)


def test_heapa_ar3po_against_ar3po_on_avg16(tmp_path):
    summary = compare(tmp_path, ["ar3po_grpo_epyc_80_avg16", "heapa_ar3po_epyc_80_avg16"], "--baseline",
                      "ar3po_grpo_epyc_80_avg16", "--budgets", "640,1280,5120", "--tail-from-step", "40",
                      "--target", "auto", seeds=5)
    [row] = summary["against_baseline"]
    tail = row["tail"]  # the greedy reading's +3.5 shrinks, but the interval stays above 0
    assert tail["n"] == 5 and 100 * tail["mean"] == pytest.approx(1.4, abs=0.05) and tail["low"] > 0
    means, early = at_budgets(row, "640", "1280")  # where it still loses: below AR3PO early
    assert means == [-1.7, -2.3] and all(a["high"] < 0 for a in early)
    assert row["at_budget"]["5120"]["low"] > 0
    ratio = row["rollouts_to_target_log_ratio"]  # 0.84x [0.53x, 1.33x]: fewer rollouts to AR3PO's final not shown
    assert ratio["n"] == 5 and ratio["low"] < 0 < ratio["high"]
    assert row["rollouts_to_target_censored"] == {"method": 0, "baseline": 1}
    assert row["seeds_for_one_point"] == 4
    assert {run["val_points"][0][2] for run in summary["runs"]} == {0.129638671875}


def test_heapa_ar3po_with_ar3pos_stage_rule_against_ar3po_and_grpo(tmp_path):
    # the preset since: AR3PO's `mixed` rule in stages of 4, so it differs from ar3po_grpo in selection only
    summary = compare(tmp_path, ["heapa_ar3po_mixed_epyc_80_avg16", "ar3po_grpo_epyc_80_avg16", "grpo_epyc_80_avg16"],
                      "--baseline", "ar3po_grpo_epyc_80_avg16", "--budgets", "640,1280,2560,5120",
                      "--tail-from-step", "40", "--target", "auto")
    rows = {row["method"]: row for row in summary["against_baseline"]}
    mixed = rows["heapa_ar3po_mixed_epyc_80_avg16"]
    # against AR3PO: no difference shown at any budget or late; the early deficit of the paper's rule is gone
    assert at_budgets(mixed, "640", "1280")[0] == [0.1, 0.1]
    assert all(a["low"] < 0 < a["high"] for a in mixed["at_budget"].values())
    tail = mixed["tail"]
    assert 100 * tail["mean"] == pytest.approx(0.2, abs=0.05) and tail["low"] < 0 < tail["high"]
    grpo = rows["grpo_epyc_80_avg16"]  # AR3PO itself: below GRPO over steps 40-80 on 8 seeds
    assert 100 * grpo["tail"]["mean"] == pytest.approx(0.9, abs=0.05) and grpo["tail"]["low"] > 0
    assert {run["val_points"][0][2] for run in summary["runs"]} == {0.129638671875}


def test_heapa_ar3pos_stage_rule_early_and_late(tmp_path):
    # seeds 0-4, the only ones the paper's rule (the preset before) ran: `mixed` ahead early, no difference late
    summary = compare(tmp_path, ["heapa_ar3po_epyc_80_avg16", "heapa_ar3po_mixed_epyc_80_avg16"], "--baseline",
                      "heapa_ar3po_epyc_80_avg16", "--budgets", "640,1280,5120", "--tail-from-step", "40",
                      "--target", "none", seeds=5)
    [row] = summary["against_baseline"]
    means, early = at_budgets(row, "640", "1280")
    assert means == [1.5, 2.0] and all(a["low"] > 0 for a in early)
    tail = row["tail"]
    assert 100 * tail["mean"] == pytest.approx(-0.6, abs=0.05) and tail["low"] < 0 < tail["high"]


def test_heapa_ar3po_with_the_measured_rule_against_mixed(tmp_path):
    # extend: measured (the paper's rule for prompts the pool had measured, mixed for blind ones), seeds 0-4: the
    # runs match `mixed` while every prompt is blind (640 rollouts), then fall behind it; the preset keeps `mixed`
    summary = compare(tmp_path, ["heapa_ar3po_mixed_epyc_80_avg16", "heapa_ar3po_measured_epyc_80_avg16"],
                      "--baseline", "heapa_ar3po_mixed_epyc_80_avg16", "--budgets", "640,1280,5120",
                      "--tail-from-step", "40", "--target", "none", seeds=5)
    [row] = summary["against_baseline"]
    means, _ = at_budgets(row, "640", "1280")
    assert means == [0.0, -0.2]
    tail = row["tail"]
    assert tail["n"] == 5 and 100 * tail["mean"] == pytest.approx(-0.8, abs=0.05) and tail["high"] < 0
    assert {run["val_points"][0][2] for run in summary["runs"]} == {0.129638671875}


def test_heapa_grpos_cold_draw_by_level_against_arrival_and_grpo(tmp_path):
    # cold_draw: signal (its preset since), seeds 0-7: above arrival order over steps 40-80 (not at step 80 or any
    # budget), above GRPO over steps 40-80; fewer rollouts than GRPO to GRPO's final not shown on one validation
    summary = compare(tmp_path, ["grpo_epyc_80_avg16", "heapa_grpo_epyc_80_avg16", "heapa_grpo_colds_epyc_80_avg16"],
                      "--baseline", "heapa_grpo_epyc_80_avg16", "--budgets", "1280,2560,5120", "--at-steps", "80",
                      "--tail-from-step", "40", "--target", "none")
    rows = {row["method"]: row for row in summary["against_baseline"]}
    cold = rows["heapa_grpo_colds_epyc_80_avg16"]
    tail, last = cold["tail"], cold["at_step"]["80"]
    assert tail["n"] == 8 and 100 * tail["mean"] == pytest.approx(0.3, abs=0.05) and tail["low"] > 0
    assert 100 * last["mean"] == pytest.approx(0.3, abs=0.05) and last["low"] < 0 < last["high"]
    assert all(a["low"] < 0 < a["high"] for a in cold["at_budget"].values())
    zero = {run["method"]: [] for run in summary["runs"]}
    for run in summary["runs"]:
        zero[run["method"]].append(run["zero_signal_mean"])
    assert max(zero["heapa_grpo_colds_epyc_80_avg16"]) < min(zero["heapa_grpo_epyc_80_avg16"])  # 36 % against 46 %
    summary = compare(tmp_path / "grpo", ["grpo_epyc_80_avg16", "heapa_grpo_colds_epyc_80_avg16"], "--baseline",
                      "grpo_epyc_80_avg16", "--budgets", "1280", "--tail-from-step", "40", "--target", "auto")
    [row] = summary["against_baseline"]
    assert 100 * row["tail"]["mean"] == pytest.approx(1.1, abs=0.05) and 100 * row["tail"]["low"] > 0
    assert 100 * row["at_budget"]["1280"]["low"] > -1
    ratio = row["rollouts_to_target_log_ratio"]
    assert ratio["n"] == 8 and math.exp(ratio["mean"]) == pytest.approx(0.99, abs=0.005) and ratio["high"] > 0
    assert {run["val_points"][0][2] for run in summary["runs"]} == {0.129638671875}


@pytest.mark.parametrize("window, expected", [(2, 0.82), (3, 0.85)])
def test_heapa_grpos_cold_draw_reaches_grpos_final_sooner_on_a_mean_of_validations(tmp_path, window, expected):
    # GRPO never reaches its own mean final on a mean of two or three validations on 3 of 8 seeds (counted at their
    # end, a lower bound on its rollouts); the seed where neither does is left out
    summary = compare(tmp_path, ["grpo_epyc_80_avg16", "heapa_grpo_colds_epyc_80_avg16"], "--baseline",
                      "grpo_epyc_80_avg16", "--target", "auto", "--target-window", str(window))
    [row] = summary["against_baseline"]
    ratio = row["rollouts_to_target_log_ratio"]
    assert ratio["n"] == 7 and row["rollouts_to_target_censored"] == {"method": 0, "baseline": 3}
    assert math.exp(ratio["mean"]) == pytest.approx(expected, abs=0.005) and ratio["high"] < 0


def test_heapa_grpos_cold_draw_to_grpos_final_read_between_validations(tmp_path):
    # --target-crossing interpolated: the K = 1 miss is not the 1,280-rollout spacing of the validations
    summary = compare(tmp_path, ["grpo_epyc_80_avg16", "heapa_grpo_colds_epyc_80_avg16"], "--baseline",
                      "grpo_epyc_80_avg16", "--target", "auto", "--target-crossing", "interpolated")
    [row] = summary["against_baseline"]
    ratio = row["rollouts_to_target_log_ratio"]  # 0.94x [0.79x, 1.11x]
    assert ratio["n"] == 8 and row["rollouts_to_target_censored"] == {"method": 0, "baseline": 2}
    assert math.exp(ratio["mean"]) == pytest.approx(0.94, abs=0.005) and ratio["low"] < 0 < ratio["high"]


def test_heapa_dapos_cold_draw_by_level_reaches_the_presets_accuracy_sooner(tmp_path):
    # heapa_dapo with cold_draw=signal (its preset since), seeds 0-7: above arrival order from 1,280 to 5,120
    # rollouts, level with it over steps 40-80; fewer rollouts than DAPO to DAPO's final than arrival order needs
    summary = compare(tmp_path, ["heapa_dapo_seat_epyc_80_avg16", "heapa_dapo_colds_epyc_80_avg16"], "--baseline",
                      "heapa_dapo_seat_epyc_80_avg16", "--budgets", "1280,2560,5120", "--tail-from-step", "40",
                      "--target", "none")
    [row] = summary["against_baseline"]
    means, found = at_budgets(row, "1280", "2560", "5120")
    assert means == [1.2, 2.4, 1.4] and all(a["low"] > 0 for a in found)
    assert row["tail"]["n"] == 8 and 100 * row["tail"]["low"] > -1 and row["tail"]["low"] < 0 < row["tail"]["high"]
    summary = compare(tmp_path / "dapo", ["dapo_epyc_80_avg16", "heapa_dapo_colds_epyc_80_avg16",
                                          "heapa_dapo_seat_epyc_80_avg16"], "--baseline", "dapo_epyc_80_avg16",
                      "--target", "auto")
    ratios = {row["method"]: row["rollouts_to_target_log_ratio"] for row in summary["against_baseline"]}
    cold, seat = ratios["heapa_dapo_colds_epyc_80_avg16"], ratios["heapa_dapo_seat_epyc_80_avg16"]
    assert math.exp(cold["mean"]) == pytest.approx(0.63, abs=0.005) and cold["high"] < 0
    assert math.exp(seat["mean"]) == pytest.approx(0.76, abs=0.005) and cold["mean"] < seat["mean"]
    summary = compare(tmp_path / "target", ["heapa_dapo_target_epyc_80_avg16", "heapa_dapo_colds_epyc_80_avg16"],
                      "--baseline", "heapa_dapo_target_epyc_80_avg16", "--budgets", "1280", "--target", "none")
    [row] = summary["against_baseline"]
    at = row["at_budget"]["1280"]  # +1.0 [+0.6, +1.4] above its target draw
    assert at["n"] == 8 and 100 * at["mean"] == pytest.approx(1.0, abs=0.05) and at["low"] > 0


def test_heapa_ar3pos_cold_draw_by_level_against_arrival_and_ar3po(tmp_path):
    # heapa_ar3po with cold_draw=signal (its preset since), seeds 0-7: the rule written before seeds 2-7 were run
    # (late mean >= 0 with its lower end above -1 point, lower end above -1 at 1,280 rollouts against arrival order;
    # fewer rollouts to AR3PO's final than arrival order's)
    summary = compare(tmp_path, ["heapa_ar3po_mixed_epyc_80_avg16", "heapa_ar3po_colds_epyc_80_avg16"], "--baseline",
                      "heapa_ar3po_mixed_epyc_80_avg16", "--budgets", "1280", "--at-steps", "40",
                      "--tail-from-step", "40", "--target", "none")
    [row] = summary["against_baseline"]
    tail, early = row["tail"], row["at_budget"]["1280"]
    assert tail["n"] == 8 and 100 * tail["mean"] == pytest.approx(1.2, abs=0.05) and 100 * tail["low"] > -1
    assert 100 * early["low"] > -1 and 100 * row["at_step"]["40"]["low"] > 0  # +2.0 [+0.8, +3.6] at step 40
    summary = compare(tmp_path / "ar3po", ["ar3po_grpo_epyc_80_avg16", "heapa_ar3po_mixed_epyc_80_avg16",
                                           "heapa_ar3po_colds_epyc_80_avg16"], "--baseline",
                      "ar3po_grpo_epyc_80_avg16", "--tail-from-step", "40", "--target", "auto")
    rows = {row["method"]: row for row in summary["against_baseline"]}
    cold, arrival = rows["heapa_ar3po_colds_epyc_80_avg16"], rows["heapa_ar3po_mixed_epyc_80_avg16"]
    assert 100 * cold["tail"]["mean"] == pytest.approx(1.3, abs=0.05) and cold["tail"]["low"] > 0
    ratio = cold["rollouts_to_target_log_ratio"]  # 0.71x [0.53x, 0.96x]; arrival order 0.98x
    assert math.exp(ratio["mean"]) == pytest.approx(0.71, abs=0.005) and ratio["high"] < 0
    assert cold["rollouts_to_target_censored"] == {"method": 0, "baseline": 1}
    assert ratio["mean"] < arrival["rollouts_to_target_log_ratio"]["mean"]
    assert {run["val_points"][0][2] for run in summary["runs"]} == {0.129638671875}
