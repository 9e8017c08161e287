"""The pure parts of ``verl_ext.evaluation curve``: names, checkpoint discovery, metrics rewriting, caching."""

from __future__ import annotations

import json

import pytest

from verl_ext.evaluation.curve import checkpoint_steps, curve_metrics, curve_name, evaluate_curve, write_curve_run


def test_curve_name_keeps_the_seed_last():
    assert curve_name("grpo_epyc_80_s3", "_avg16") == "grpo_epyc_80_avg16_s3"
    assert curve_name("heapa_grpo_s12", "_x") == "heapa_grpo_x_s12"
    assert curve_name("my_run", "_avg16") == "my_run_avg16"
    assert curve_name("run_sx", "_avg16") == "run_sx_avg16"


def test_checkpoint_steps_are_the_global_step_folders_in_order(tmp_path):
    for name in ("global_step_20", "global_step_3", "global_step_x", "other"):
        (tmp_path / name).mkdir()
    (tmp_path / "global_step_7").write_text("a file, not a checkpoint")
    assert list(checkpoint_steps(tmp_path)) == [3, 20]
    assert checkpoint_steps(tmp_path / "missing") == {}


def test_curve_metrics_replace_validation_and_keep_training_lines():
    rows = [{"step": 0, "data": {"val-core/arith/acc/mean@1": 0.3}},
            {"step": 1, "data": {"rollout/gen_responses_cum": 128.0, "actor/entropy": 0.7}},
            {"step": 2, "data": {"rollout/gen_responses_cum": 256.0, "val-core/arith/acc/mean@1": 0.31,
                                 "val-aux/arith/score/mean@1": 0.31}}]
    out = curve_metrics(rows, {0: {"arith": 0.2}, 2: {"arith": 0.25}}, 16)
    assert out == [{"step": 0, "data": {"val-core/arith/acc/mean@16": 0.2}},
                   {"step": 1, "data": {"rollout/gen_responses_cum": 128.0, "actor/entropy": 0.7}},
                   {"step": 2, "data": {"rollout/gen_responses_cum": 256.0, "val-core/arith/acc/mean@16": 0.25}}]
    # a step evaluated but never logged (no val_before_train: no step-0 line) gets a line of its own
    assert curve_metrics(rows[1:], {0: {"arith": 0.2}}, 4)[0] == {"step": 0,
                                                                   "data": {"val-core/arith/acc/mean@4": 0.2}}


def test_evaluate_curve_skips_steps_scored_with_the_same_sampling(tmp_path):
    calls = []

    def evaluate(model, folder):
        calls.append(model)
        folder.mkdir(parents=True, exist_ok=True)
        result = {"sampling": {"n": 2, "temperature": 1.0}, "benchmarks": {"arith": {"avg": len(calls) / 10}}}
        (folder / "result.json").write_text(json.dumps(result))
        return result

    models = {0: "init", 10: "ckpt10"}
    first = evaluate_curve(models, tmp_path, {"n": 2, "temperature": 1.0}, evaluate)
    assert first == {0: {"arith": 0.1}, 10: {"arith": 0.2}} and calls == ["init", "ckpt10"]
    assert evaluate_curve(models, tmp_path, {"n": 2, "temperature": 1.0}, evaluate) == first
    assert len(calls) == 2  # both kept
    again = evaluate_curve(models, tmp_path, {"n": 4, "temperature": 1.0}, evaluate)  # other sampling: redone
    assert len(calls) == 4 and again == {0: {"arith": 0.3}, 10: {"arith": 0.4}}


def _lines(path, rows):
    path.write_text("".join(json.dumps({"step": s, "data": d}) + "\n" for s, d in rows))


def test_a_resumed_run_is_read_over_all_its_attempts(tmp_path):
    # attempt 1 trained steps 1-3 (checkpoint at 2) and was killed; the resumed attempt trained 3-4 again
    run = tmp_path / "grpo_s0"
    for step in (2, 4):
        (run / "ckpt" / f"global_step_{step}").mkdir(parents=True)
    _lines(run / "metrics.attempt-1.jsonl", [(s, {"rollout/gen_responses_cum": 8.0 * s, "x": 1.0})
                                             for s in (1, 2, 3)] + [(2, {"val-core/arith/acc/mean@1": 0.5})])
    _lines(run / "metrics.jsonl", [(s, {"rollout/gen_responses_cum": 8.0 * s, "x": 2.0}) for s in (3, 4)])

    def evaluate(model, folder):
        folder.mkdir(parents=True, exist_ok=True)
        return {"benchmarks": {"arith": {"avg": 0.1 if model == "init" else int(model[-1]) / 10}}}

    out = write_curve_run(run, tmp_path / "curves", "_c", "init", {"n": 2}, evaluate)
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [0, 1, 2, 3, 4]
    assert rows[2]["data"] == {"rollout/gen_responses_cum": 16.0, "x": 1.0, "val-core/arith/acc/mean@2": 0.2}
    assert rows[3]["data"]["x"] == 2.0  # a step trained again is the later attempt's, whole
    assert rows[4]["data"]["val-core/arith/acc/mean@2"] == 0.4
    (run / "ckpt" / "global_step_6").mkdir()
    with pytest.raises(ValueError, match="checkpoints at steps \\[6\\] but its log ends at step 4"):
        write_curve_run(run, tmp_path / "curves", "_c", "init", {"n": 2}, evaluate)
