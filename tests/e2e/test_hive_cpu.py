"""HIVE (``method=hive_grpo``) through verl's real trainer on the CPU backend: 3 steps on 16 seeds, batch 8.

HIVE's second stage must really run on the actor: at every step the strategy verified its candidates
(``select/verified``) with entropies the probe measured through ``actor_rollout_wg.compute_log_prob`` — as many
prompts as candidates, a positive number of tokens forwarded and wall time spent, and entropies that differ across
prompts (a constant would make the check meaningless). Candidates are pruned (the first verification always prunes
its lowest ``prune_quantile``), the ``hive/*`` scalars (prune rate, probe cost) are logged every step and add up
with the probe's own counts, the step's response entropy (verl's old_log_prob pass) is read per record, and the
seed reaches the strategy. The test prints the probe's cost per step next to the step's wall time.

The run also carries the study knob ``heapa.update.sequence_mean_over=signal_rows`` (it changes the update's loss
divisor, not what HIVE selects or measures): verl's worker must get the rows with signal as its divisor.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

RUN_TIMEOUT_S = float(os.environ.get("VERL_EXT_E2E_TIMEOUT", "600"))


def _overrides(assets: Path, out: Path, steps: int) -> list[str]:
    return [
        "method=hive_grpo", "platform=cpu", "+ray_kwargs.ray_init.address=local", "heapa.seed=5",
        f"data.train_files={assets / 'data' / 'train.parquet'}", f"data.val_files={assets / 'data' / 'val.parquet'}",
        "data.train_max_samples=16", "data.shuffle=False", "data.train_batch_size=8", "data.val_batch_size=32",
        "data.val_max_samples=32", "data.max_prompt_length=64", "data.max_response_length=16",
        f"actor_rollout_ref.model.path={assets / 'model'}", "actor_rollout_ref.actor.optim.lr=1e-4",
        "actor_rollout_ref.actor.ppo_mini_batch_size=8", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=16",
        "actor_rollout_ref.rollout.n=4", "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=32",
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=32", "heapa.teacher.backend=programmatic",
        "heapa.update.sequence_mean_over=signal_rows",
        f"heapa.trace_file={out / 'trace.jsonl'}",
        "trainer.logger=[console,file]", "trainer.project_name=hive_e2e", "trainer.experiment_name=hive_grpo",
        f"trainer.total_training_steps={steps}", "trainer.save_freq=-1", "trainer.test_freq=-1",
        "trainer.val_before_train=False", f"trainer.default_local_dir={out / 'ckpt'}", "trainer.resume_mode=disable",
    ]


@pytest.fixture(scope="module")
def hive_run(tiny_assets, repo_root, e2e_runner, tmp_path_factory):
    out = tmp_path_factory.mktemp("hive")
    cmd = [sys.executable, "-m", "recipe.heapa.main_heapa", *_overrides(tiny_assets, out, steps=3)]
    env = e2e_runner.trainer_env(out / "metrics.jsonl")
    res = e2e_runner.run_logged(cmd, env=env, log_path=out / "run.log", timeout_s=RUN_TIMEOUT_S, cwd=repo_root)
    assert not res.timed_out and res.returncode == 0, f"{res.summary()}\n{e2e_runner.tail(out / 'run.log')}"
    res.assert_no_strays()  # its Ray cluster went with it
    print(f"hive: {res.summary()}")
    trace = {row["step"]: row for row in map(json.loads, (out / "trace.jsonl").read_text().splitlines())}
    return e2e_runner.read_metrics(out / "metrics.jsonl"), trace, out


def test_the_actor_measures_every_candidate(hive_run):
    metrics, _, _ = hive_run
    assert set(metrics) == {1, 2, 3}
    for m in metrics.values():
        assert m["select/verified"] == m["select/n_candidates"] == m["hive/verify_prompts"] > 0
        assert m["hive/verify_calls"] >= 1 and m["hive/verify_s"] > 0
        # each prompt of the tiny task renders to 15-25 tokens with the chat template, plus one placeholder
        assert 15 * m["hive/verify_prompts"] < m["hive/verify_tokens"] < 40 * m["hive/verify_prompts"]
        assert m["hive/prompt_entropy_std"] > 0  # the policy is more uncertain about some prompts than others
        assert 0 < m["hive/prompt_entropy_min"] <= m["hive/prompt_entropy_max"]
        assert m["hive/response_entropy_mean"] > 0  # history entropy from verl's old_log_prob pass
        assert m["rollout/gen_responses"] == 32  # HIVE chooses prompts; every one gets rollout.n responses


def test_stale_candidates_are_pruned_and_the_batch_is_filled(hive_run):
    metrics, trace, _ = hive_run
    assert all(len(trace[s]["trained"]) == 8 for s in trace)
    # with 2x candidates at step 1 (16 seeds), the pruned ones are not trained and the batch is still full
    assert metrics[1]["hive/pruned"] >= 1 and metrics[1]["select/frac_from_rest"] == 0.0
    assert metrics[1]["hive/pruned_selected"] == 0.0
    for step, m in sorted(metrics.items()):
        assert m["hive/verified"] == m["hive/verify_prompts"]  # the strategy's count and the probe's agree
        assert m["hive/prune_rate"] == pytest.approx(m["hive/pruned"] / m["hive/verified"])
        assert m["hive/pruned"] == pytest.approx(m["hive/collapsed"] + m["hive/low"], abs=m["hive/collapsed"])
        assert m["hive/blocked"] >= 0 and m["hive/cleared"] >= 0
        step_s = m.get("timing_s/step", float("nan"))
        print(f"hive step {step}: verified {m['hive/verified']:.0f}, pruned {m['hive/pruned']:.0f} "
              f"(rate {m['hive/prune_rate']:.3f}, collapsed {m['hive/collapsed']:.0f}), cleared "
              f"{m['hive/cleared']:.0f}, blocked {m['hive/blocked']:.0f}, pruned_selected "
              f"{m['hive/pruned_selected']:.0f}; probe {m['hive/verify_s']:.3f} s, {m['hive/verify_tokens']:.0f} "
              f"tokens, {m['hive/verify_calls']:.0f} call(s); step {step_s:.2f} s")


def test_signal_rows_divides_the_sequence_mean_loss_by_the_rows_with_signal(hive_run):
    """8 prompts x 4 rows, one update per step: the loss divisor is the number of rows whose advantage is not 0."""
    metrics, _, _ = hive_run
    for m in metrics.values():
        signal = round(m["diag/nonzero_rows"] * 32)
        assert m["update/global_batch_size"] == max(1, signal) and m["update/optimizer_steps"] == 1.0
