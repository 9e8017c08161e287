"""A damaged latest checkpoint does not stop the next start: it says which file is wrong and resumes from the newest
complete checkpoint (recipe/heapa/checkpoints.py), and the metrics history stays one history.

One heapa_grpo run of 3 steps saves a checkpoint at every step (each with its manifest). Then, for each part of
the latest checkpoint in turn (an actor shard, the dataloader state, the pool file, the recipe state), a copy of
the run has that part cut to half its size and is started again for 4 steps with ``resume_mode=auto``: it must
resume from step 2 (train steps 3 and 4) and name the damaged file in its log.
"""

from __future__ import annotations

import shutil

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

PARTS = ("actor/model_world_size_1_rank_0.pt", "data.pt", "pool_state.pkl", "heapa_state.json")


@pytest.fixture(scope="module")
def saved_run(tiny_assets, repo_root, e2e_runner, tmp_path_factory):
    out = tmp_path_factory.mktemp("ckpt_fallback") / "base"
    e2e_runner.run_recipe(repo_root, out, e2e_runner.recipe_overrides(
        tiny_assets, out, "heapa_grpo", steps=3, save_freq=1))
    for step in (1, 2, 3):
        assert (out / "ckpt" / f"global_step_{step}" / "heapa_manifest.json").exists()
    return out


@pytest.mark.parametrize("part", PARTS)
def test_a_damaged_latest_part_falls_back_to_the_previous_checkpoint(part, saved_run, tiny_assets, repo_root,
                                                                     e2e_runner, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(saved_run, run)
    damaged = run / "ckpt" / "global_step_3" / part
    damaged.write_bytes(damaged.read_bytes()[: damaged.stat().st_size // 2])
    metrics, trace = e2e_runner.run_recipe(repo_root, run, e2e_runner.recipe_overrides(
        tiny_assets, run, "heapa_grpo", steps=4, save_freq=1, resume_mode="auto"))
    log = (run / "run.log").read_text(errors="replace")
    assert f"global_step_3/{part}" in log and "resuming from the newest complete checkpoint instead" in log
    assert "global_step_2" in log
    # resumed at step 2: steps 3 and 4 trained again, the history has every step once (the damaged attempt's
    # step 3 kept in the attempt file)
    assert sorted(metrics) == [1, 2, 3, 4]
    lines = e2e_runner.metric_lines(run / "metrics.jsonl")
    assert [row["step"] for row in lines] == [1, 2, 3, 4]
    assert (run / "ckpt" / "global_step_4" / "heapa_manifest.json").exists()
