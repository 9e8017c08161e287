"""`python -m verl_ext.evaluation generate` on CPU with the tiny model: from a HF directory and from a verl
checkpoint (FSDP shards + actor/huggingface, merged with verl's own model merger), same seed -> same responses."""

from __future__ import annotations

import json
import shutil

import pytest

from verl_ext.evaluation.checkpoint import actor_dir, is_hf_model_dir, resolve_model
from verl_ext.evaluation.cli import main


def fake_verl_checkpoint(model_dir, root, step=3):
    """verl's layout: root/latest_checkpointed_iteration.txt, global_step_N/actor/{model_world_size_1_rank_0.pt,
    fsdp_config.json, huggingface/ (config + tokenizer, no weights)}."""
    import torch
    from transformers import AutoModelForCausalLM

    actor = root / f"global_step_{step}" / "actor"
    (actor / "huggingface").mkdir(parents=True)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    torch.save(model.state_dict(), actor / "model_world_size_1_rank_0.pt")
    (actor / "fsdp_config.json").write_text(json.dumps({"FSDP_version": 2, "world_size": 1}))
    for item in model_dir.iterdir():
        if item.is_file() and not item.name.endswith(".safetensors"):
            shutil.copy2(item, actor / "huggingface" / item.name)
    (root / "latest_checkpointed_iteration.txt").write_text(str(step))
    return actor


@pytest.fixture(scope="module")
def generated(tiny_assets, tmp_path_factory):
    out = tmp_path_factory.mktemp("eval")
    args = ["generate", "--data", str(tiny_assets / "data" / "val.parquet"), "--backend", "hf", "--n", "4",
            "--limit", "6", "--max-new-tokens", "12", "--threads", "1", "--pass-k", "1,4"]
    assert main([*args, "--model", str(tiny_assets / "model"), "--out", str(out / "hf")]) == 0
    ckpt = out / "ckpt"
    fake_verl_checkpoint(tiny_assets / "model", ckpt)
    assert main([*args, "--model", str(ckpt), "--out", str(out / "verl")]) == 0
    return out


def test_generate_writes_generations_and_results(generated):
    res = json.loads((generated / "hf" / "result.json").read_text())
    bench = res["benchmarks"]["arith"]
    assert bench["n_problems"] == 6 and bench["samples_per_problem"] == 4
    assert 0.0 <= bench["avg"] <= bench["pass_at"]["4"] <= 1.0
    assert res["sampling"]["temperature"] == 0.7 and res["sampling"]["top_p"] == 0.7 and res["backend"] == "hf"
    lines = [json.loads(x) for x in (generated / "hf" / "generations.jsonl").read_text().splitlines()]
    assert len(lines) == 6 and all(len(x["responses"]) == 4 for x in lines)
    assert bench["avg"] > 0.2  # the warm-started tiny model solves the easy levels (greedy 0.455 overall)


def test_checkpoint_is_merged_and_generates_the_same(generated):
    hf = (generated / "hf" / "generations.jsonl").read_text()
    verl = (generated / "verl" / "generations.jsonl").read_text()
    assert hf == verl  # same weights, same seed
    merged = generated / "verl" / "merged_model"
    assert is_hf_model_dir(merged) and (merged / "merged_from.json").exists()
    res = json.loads((generated / "verl" / "result.json").read_text())
    assert res["resolved_model"] == str(merged)


def test_resolution_rules(generated, tiny_assets, tmp_path):
    ckpt = generated / "ckpt"
    assert actor_dir(ckpt) == ckpt / "global_step_3" / "actor" == actor_dir(ckpt / "global_step_3")
    # the merge is cached: a second resolve does not merge again
    merged = generated / "verl" / "merged_model"
    stamp = (merged / "model.safetensors").stat().st_mtime_ns
    assert resolve_model(str(ckpt), merged) == str(merged)
    assert (merged / "model.safetensors").stat().st_mtime_ns == stamp
    assert resolve_model(str(tiny_assets / "model")) == str(tiny_assets / "model")
    assert resolve_model("Qwen/Qwen3-4B-Instruct-2507") == "Qwen/Qwen3-4B-Instruct-2507"  # hub id, untouched
    with pytest.raises(FileNotFoundError):
        resolve_model(str(tmp_path / "missing"))
    with pytest.raises(ValueError, match="neither a HF model directory"):
        resolve_model(str(tmp_path))
    with pytest.raises(ValueError, match="--merge-dir"):
        resolve_model(str(ckpt))
    hf_in_ckpt = tmp_path / "global_step_1" / "actor" / "huggingface"
    shutil.copytree(tiny_assets / "model", hf_in_ckpt)  # save_contents with hf_model: used as is
    assert resolve_model(str(tmp_path / "global_step_1")) == str(hf_in_ckpt)


def test_curve_evaluates_every_checkpoint_into_a_run_the_comparison_reads(tiny_assets, tmp_path):
    """`curve`: the initial model as step 0 and checkpoints at steps 2 and 4 (the same weights: the same seed gives
    the same accuracy at every step), written over the training run's own lines; a rerun scores nothing again; the
    kept curve run is what `verl_ext.compare` reads."""
    from verl_ext.compare.cli import main as compare_main

    run = tmp_path / "grpo_s0"
    for step in (2, 4):
        fake_verl_checkpoint(tiny_assets / "model", run / "ckpt", step=step)
    lines = [{"step": s, "data": {"rollout/gen_responses_cum": 32.0 * s, "rollout/gen_responses": 32.0 * (s > 0),
                                  **({"val-core/arith/acc/mean@1": 0.5} if s % 2 == 0 else {})}}
             for s in range(5)]
    (run / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    args = ["curve", str(run), "--initial-model", str(tiny_assets / "model"),
            "--data", str(tiny_assets / "data" / "val.parquet"), "--backend", "hf", "--n", "2", "--limit", "6",
            "--temperature", "1", "--top-p", "1", "--max-new-tokens", "12", "--threads", "1",
            "--out", str(tmp_path / "curves"), "--keep-into", str(tmp_path / "kept")]
    assert main(args) == 0
    folder = tmp_path / "curves" / "grpo_avg2_s0"
    rows = [json.loads(x) for x in (folder / "metrics.jsonl").read_text().splitlines()]
    vals = {r["step"]: r["data"]["val-core/arith/acc/mean@2"] for r in rows if "val-core/arith/acc/mean@2" in r["data"]}
    assert sorted(vals) == [0, 2, 4] and len(set(vals.values())) == 1 and 0 < vals[0] < 1
    assert not any("mean@1" in key for r in rows for key in r["data"])
    assert [r["data"]["rollout/gen_responses_cum"] for r in rows] == [0.0, 32.0, 64.0, 96.0, 128.0]
    stamp = (folder / "step_2" / "result.json").stat().st_mtime_ns
    assert main(args) == 0
    assert (folder / "step_2" / "result.json").stat().st_mtime_ns == stamp
    out = tmp_path / "cmp"
    assert compare_main([str(tmp_path / "kept" / "grpo_avg2_s0"), "--out", str(out), "--no-plots"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["methods"]["grpo_avg2"]["val_final"]["mean"] == pytest.approx(vals[4])
    (run / "metrics.jsonl").write_text(json.dumps(lines[0]) + "\n")  # the log ends before the checkpoints
    with pytest.raises(ValueError, match="ends at step 0"):
        main(args)
