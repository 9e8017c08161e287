"""AR3PO (``method=ar3po_grpo``) through verl's real trainer on the CPU backend.

The seeds are 8 tiny-task prompts chosen by level so that every kind of group occurs within a few steps: 2 easy
(``n2_v5_a``, solved greedily 100%), 5 middling (``n2_v20_a``, ~45%), 1 out of reach (``n4_v99_m``, 0%). Batch 8:
every record is rolled out at every step. Stages of one response (``k1 = k_s = 1``) up to the ceiling
``rollout.n = 2`` make an all-wrong group likely for a middling prompt that was solved before, so reuse fires
(a middling record escapes it over 5 visits with probability ~0.2, all five ~3e-4). ``extend: measured``: at step 1
no record has been measured, so every prompt follows ``mixed`` (a group of one is never mixed: one response each);
from step 2 every record has been, so every prompt follows the paper's rule.

Run A, 6 steps, checkpoints at 2/4/6:
- the staged rollout follows the planner (``rollout/plan_mismatch == 0``: the trainer told the agent loop and the
  stage account the same measured records), blind prompts by ``mixed`` at step 1 and measured ones by the paper's
  rule later, and easy prompts get fewer responses than the hard one, read from the per-record counts in the trace;
- reuse fires on an all-wrong group, the reused row reaches the actor update with a positive advantage, and the
  zero-advantage share drops after reuse;
- the rollout cost adds up: responses generated = the staged groups' sizes (replaced rows counted, reused not);
- the actor update is GRPO's: 8 prompts / ``ppo_mini_batch_size`` 4 = 2 optimizer steps per step, counted from the
  worker's own report, each over the step's real rows / 2 (padding only to the micro-batch of 4, never in the
  loss divisor), where verl's stock arithmetic would pad to 8 x 2 rows per update.
A's ``global_step_2`` read back through the trainer's own loader (no trainer start): the response bank and the
rollout cost come back from ``heapa_state.json`` and are written back unchanged.
Run C, Reinforce-Ada's rounds under HeaPA's selection (``method=heapa_reinforce_ada``, the same staged agent loop
with its rounds; augmentation off so that the batch stays the 8 seeds), 3 steps, rounds of 2 up to 6 per prompt:
every group follows the rule and is cut back to n = 2 for the update (GRPO's 2 optimizer steps over 8 x 2 rows),
the dropped responses are counted in the rollout cost and reach the pool, and the kept rows' advantages are
re-centred on every response of their prompt; the pool's pass rate of each record is over every response its
rounds generated (read from the checkpoint's pool), not the n the update kept. (Uniform selection with the rounds
runs in E; the rounds are the same agent loop whichever sampler picks the prompts.)
Run D, the budget allocator (``method=grpo heapa.allocation.enabled=true``, ``rollout.n = 8``), 3 steps: step 1
knows nothing and gives every prompt 8; from step 2 the 64 responses go where a group of 8 is unlikely to be mixed
(the solved and the out-of-reach records, believed at ~0.9 and ~0.1) and away from the middling ones (a group of
5 at ~0.5 is mixed anyway), verl's agent loop rolls each prompt out at its allocated size, and the update is planned
for the uneven groups (GRPO's 2 optimizer steps). (At n = 2 or 4 the pool's estimates after one group are too mild
to move a response.)
Run E, ``method=reinforce_ada_dapo``, 2 steps on 8 copies of the seed mix (DAPO refills while a batch is in flight):
the balanced exit leaves DAPO's filter only the groups that ran to the cap all right or all wrong; every trained
group is mixed, the evicted ones are paid for and fed back.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

RUN_TIMEOUT_S = float(os.environ.get("VERL_EXT_E2E_TIMEOUT", "600"))
LEVELS = [("n2_v5_a", 2), ("n2_v20_a", 5), ("n4_v99_m", 1)]


def _seed_file(assets: Path, out: Path, copies: int = 1) -> tuple[Path, dict[int, str]]:
    """``copies`` x the LEVELS mix (different problems of each level)."""
    import pandas as pd

    rows = pd.read_parquet(assets / "data" / "train.parquet")
    level = rows.extra_info.map(lambda e: e["level"])
    picked = pd.concat([rows[level == name].head(k * copies) for name, k in LEVELS]).reset_index(drop=True)
    path = out / f"seeds_x{copies}.parquet"
    picked.to_parquet(path)
    # PoolDataset numbers seed records 0..N-1 in file order
    return path, {i: e["level"] for i, e in enumerate(picked.extra_info)}


def _overrides(assets: Path, seeds: Path, out: Path, *, steps: int, method: str = "ar3po_grpo") -> list[str]:
    return [
        f"method={method}", "platform=cpu", "+ray_kwargs.ray_init.address=local",
        f"data.train_files={seeds}", f"data.val_files={assets / 'data' / 'val.parquet'}",
        "data.shuffle=False", "data.train_batch_size=8", "data.val_batch_size=32", "data.val_max_samples=32",
        "data.max_prompt_length=64", "data.max_response_length=16",
        f"actor_rollout_ref.model.path={assets / 'model'}", "actor_rollout_ref.actor.optim.lr=1e-4",
        "actor_rollout_ref.actor.ppo_mini_batch_size=4", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4",
        "actor_rollout_ref.rollout.n=2", "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=8",
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=8",
        # stages of 1; from step 2 the paper's rule (every record measured): easy prompts stop at once, hard ones take
        # every stage, reuse fills them
        "heapa.ar3po.extend=measured", "heapa.ar3po.k1=1", "heapa.ar3po.k_s=1", "heapa.teacher.backend=programmatic",
        "heapa.reinforce_ada.round_size=2", "heapa.reinforce_ada.max_per_prompt=6",
        f"heapa.trace_file={out / 'trace.jsonl'}",
        "trainer.logger=[console,file]", "trainer.project_name=ar3po_e2e", "trainer.experiment_name=ar3po_grpo",
        f"trainer.total_training_steps={steps}", "trainer.save_freq=2", "trainer.test_freq=-1",
        "trainer.val_before_train=False", f"trainer.default_local_dir={out / 'ckpt'}",
        "trainer.resume_mode=disable",
    ]


def _run(e2e_runner, repo_root, out: Path, overrides: list[str]):
    out.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "recipe.heapa.main_heapa", *overrides]
    env = e2e_runner.trainer_env(out / "metrics.jsonl")
    res = e2e_runner.run_logged(cmd, env=env, log_path=out / "run.log", timeout_s=RUN_TIMEOUT_S, cwd=repo_root)
    assert not res.timed_out and res.returncode == 0, f"{res.summary()}\n{e2e_runner.tail(out / 'run.log')}"
    res.assert_no_strays()  # its Ray cluster went with it
    print(f"{out.name}: {res.summary()}")
    trace = {row["step"]: row for row in map(json.loads, (out / "trace.jsonl").read_text().splitlines())}
    return e2e_runner.read_metrics(out / "metrics.jsonl"), trace


def _bank(step_dir: Path) -> dict:
    return json.loads((step_dir / "heapa_state.json").read_text())["ar3po"]["bank"]


@pytest.fixture(scope="module")
def runs(tiny_assets, repo_root, e2e_runner, tmp_path_factory):
    base = tmp_path_factory.mktemp("ar3po")
    seeds, levels = _seed_file(tiny_assets, base)
    a = _run(e2e_runner, repo_root, base / "a", _overrides(tiny_assets, seeds, base / "a", steps=6))
    c = _run(e2e_runner, repo_root, base / "c", _overrides(tiny_assets, seeds, base / "c", steps=3,
                                                           method="heapa_reinforce_ada")
             + ["heapa.augmentation.enabled=false"])
    d = _run(e2e_runner, repo_root, base / "d", _overrides(tiny_assets, seeds, base / "d", steps=3, method="grpo")
             + ["heapa.allocation.enabled=true", "actor_rollout_ref.rollout.n=8"])
    seeds_x8, _ = _seed_file(tiny_assets, base, copies=8)  # DAPO refills the batch while 8 are in flight
    e = _run(e2e_runner, repo_root, base / "e", _overrides(tiny_assets, seeds_x8, base / "e", steps=2,
                                                           method="reinforce_ada_dapo")
             + ["reward.reward_kwargs.overlong_buffer.len=4"])
    return {"a": a, "c": c, "d": d, "e": e, "levels": levels, "base": base, "assets": tiny_assets, "seeds": seeds}


def test_staged_rollout_spends_less_on_easy_prompts(runs):
    metrics, trace = runs["a"]
    assert set(metrics) == set(range(1, 7))
    for m in metrics.values():
        assert m["rollout/plan_mismatch"] == 0.0  # every group is exactly what the planner grants
        assert 1.0 <= m["rollout/responses_per_prompt_mean"] <= 2.0
        hist = {int(k.rsplit("/", 1)[1]): v for k, v in m.items() if k.startswith("rollout/responses_hist/")}
        assert sum(size * n for size, n in hist.items()) == m["rollout/responses_total"] and sum(hist.values()) == 8
        assert m["rollout/gen_responses"] == m["rollout/responses_total"]  # replaced rows counted, reused not
        assert m["rollout/gen_tokens"] > 0
    cum = [metrics[s]["rollout/gen_responses_cum"] for s in sorted(metrics)]
    assert cum == sorted(cum) and cum[-1] == sum(metrics[s]["rollout/gen_responses"] for s in metrics)
    counts: dict[str, list[int]] = {}
    for row in trace.values():
        for rid, (n, _passes) in row["ar3po"].items():
            counts.setdefault(runs["levels"][int(rid)], []).append(n)
    easy, hard = counts["n2_v5_a"], counts["n4_v99_m"]
    assert sum(easy) / len(easy) < sum(hard) / len(hard), counts
    assert max(hard) == 2 and min(easy) == 1
    assert metrics[1]["rollout/responses_total"] == 8  # step 1, all blind: `mixed`, one response each
    assert hard[1:] == [2] * 5  # measured from step 2: the out-of-reach record takes every stage


def test_update_count_and_loss_scale_are_grpos(runs):
    metrics, _ = runs["a"]
    for m in metrics.values():
        assert m["update/optimizer_steps"] == 2.0 == m["update/planned"]  # the worker ran GRPO's 8 / 4 updates
        real = m["update/real_rows"] * 2
        assert real == m["rollout/responses_total"]  # `replace` reuse keeps each group's size
        assert m["update/rows"] * 2 - real == m["update/padding_rows"] < 8  # padded to a multiple of 2 x 4 only
        assert m["update/rows"] % 4 == 0


def test_reuse_fills_all_wrong_groups_and_reaches_the_loss(runs):
    metrics, trace = runs["a"]
    fired = [s for s, m in metrics.items() if m["rollout/reused"] > 0]
    assert fired, {s: (m["rollout/all_wrong_frac"], m["rollout/bank_size"]) for s, m in metrics.items()}
    for s in fired:
        m = metrics[s]
        assert m["rollout/reused_in_update"] == m["rollout/reused"]  # every reused row is in the actor's batch
        assert m["rollout/reused_adv_mean"] > 0  # a success among failures: pushed up by the GRPO advantage
        assert m["rollout/zero_adv_after"] < m["rollout/zero_adv_before"]
        assert m["training/off_policy/trajectory_staleness/max"] >= 1  # verl sees the reused response's age
        assert trace[s]["reused"], "the trace names the records that got a reused response"
        for rid in trace[s]["reused"]:
            n, passes = trace[s]["ar3po"][str(rid)]
            assert passes == 0 and n == 2  # only groups that stayed all-wrong through every stage
    assert metrics[max(metrics)]["rollout/bank_reused_total"] >= len(fired)


def _restored(settings):
    """The recipe's checkpoint half with the stages an ``ar3po_grpo`` trainer builds (``trainer.py``), no verl."""
    from recipe.heapa.ops.trainer_checkpoints import RecipeCheckpoints
    from recipe.heapa.stages.ar3po import Ar3poStage
    from recipe.heapa.step.in_flight import InFlight
    from recipe.heapa.step.rollout_cost import RolloutCost

    class Restored(RecipeCheckpoints):
        def __init__(self):
            self.lineage = self.augment = None
            self.ar3po = Ar3poStage(settings.ar3po, settings.feedback.acc_field, with_log_probs=True)
            self.rollout_cost, self.in_flight, self.last_pass_rates = RolloutCost(), InFlight(), {}

    return Restored()


def test_a_checkpoint_restores_the_response_bank(runs, tmp_path):
    """Run A's step-2 ``heapa_state.json`` through the trainer's own loader (``_load_recipe_state``, which a resumed
    trainer calls: the pinned run's restart checks that path end to end) brings back the bank and the rollout cost
    that step 3 continues from, and writes them back unchanged."""
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf, open_dict

    from recipe.heapa.settings import parse_settings

    config_dir = str(Path(__file__).resolve().parents[2] / "recipe" / "heapa" / "config")
    overrides = _overrides(runs["assets"], runs["seeds"], runs["base"] / "a", steps=6)
    with initialize_config_dir(config_dir=config_dir, version_base=None):
        cfg = compose(config_name="heapa_trainer", overrides=[o for o in overrides if not o.startswith("+")])
    with open_dict(cfg):
        cfg.heapa.method = "ar3po_grpo"  # `${hydra:...}` resolves only inside a running Hydra app
    settings = parse_settings(OmegaConf.to_container(cfg.heapa, resolve=True))
    step2 = runs["base"] / "a" / "ckpt" / "global_step_2"
    saved = json.loads((step2 / "heapa_state.json").read_text())
    assert saved["ar3po"]["bank"]["entries"], "run A banked nothing in two steps"
    trainer = _restored(settings)
    trainer._load_recipe_state(str(step2 / "heapa_state.json"))
    assert trainer.ar3po.state_dict() == saved["ar3po"]  # a bank rebuilt from scratch would hold nothing
    assert trainer.rollout_cost.total_responses == saved["rollout_cost"]["total_responses"] > 0
    trainer._write_recipe_state(str(tmp_path))
    again = json.loads((tmp_path / "heapa_state.json").read_text())
    assert {k: v for k, v in again.items() if k != "saved_at"} == {k: v for k, v in saved.items() if k != "saved_at"}


def test_reinforce_ada_rounds_are_cut_back_to_grpos_groups(runs):
    metrics, trace = runs["c"]
    assert set(metrics) == {1, 2, 3}
    for step, m in metrics.items():
        assert m["rollout/plan_mismatch"] == 0.0  # every group is what the rounds rule grants
        counts = {int(rid): c for rid, c in trace[step]["rounds"].items()}
        assert sorted(counts) == list(range(8))
        for rid, (generated, correct, kept, kept_correct) in counts.items():
            assert kept == 2 and generated in (2, 4, 6)
            assert generated == 6 or (correct >= 1 and generated - correct >= 1)  # balanced exit, else the cap
            assert kept_correct == min(correct, 1) if generated - correct >= 1 else kept_correct == 2
        assert m["rollout/gen_responses"] == m["rollout/responses_total"] == sum(c[0] for c in counts.values())
        assert m["rollout/discarded_responses"] == sum(c[0] - 2 for c in counts.values())
        assert m["update/optimizer_steps"] == 2.0  # GRPO's 8 prompts / ppo_mini_batch_size 4
        assert "update/planned" not in m  # equal groups: verl's own mini-batches, no update plan
        assert m["rollout/capped_frac"] == sum(c[0] == 6 for c in counts.values()) / 8
        assert m["rollout/adv_abs_mean_global_stats"] > 0  # the full-pool baseline reached the rows
    # the out-of-reach record runs to the cap: a prompt with no success costs the most
    assert max(int(trace[s]["rounds"]["7"][0]) for s in trace) == 6


def test_allocation_moves_responses_to_the_groups_likely_all_equal(runs):
    metrics, trace = runs["d"]
    assert set(metrics) == {1, 2, 3}
    middling, others = [], []
    for step, m in metrics.items():
        groups = {int(rid): tuple(v) for rid, v in trace[step]["allocated"].items()}  # rid -> (correct, responses)
        assert sorted(groups) == list(range(8))
        sizes = [size for _, size in groups.values()]
        assert sum(sizes) == 64 == m["rollout/gen_responses"] and all(2 <= size <= 32 for size in sizes)
        assert m["update/optimizer_steps"] == 2.0 == m["update/planned"]  # GRPO's 8 prompts / mini-batch 4
        assert m["update/real_rows"] * 2 == 64
        if step == 1:
            assert sizes == [8] * 8 and m["select/alloc_measured_frac"] == 0.0  # nothing measured yet
            continue
        assert m["select/alloc_measured_frac"] == 1.0  # batch 8 of 8 seeds: every record was measured
        for rid, (_, size) in groups.items():
            (middling if runs["levels"][rid] == "n2_v20_a" else others).append(size)
    assert sum(middling) / len(middling) < 8 < sum(others) / len(others), (middling, others)



def test_reinforce_ada_dapo_filters_only_groups_capped_all_equal(runs):
    """The balanced exit (one right and one wrong at n = 2) makes every group that exits mixed: DAPO's filter can
    only evict groups that ran to the cap all right or all wrong, and every trained group carries signal."""
    metrics, trace = runs["e"]
    assert set(metrics) == {1, 2}
    evicted = 0
    for step, m in metrics.items():
        counts = trace[step]["rounds"]  # the trained groups (evicted and surplus ones never reach the update)
        assert len(counts) == 8 and m["update/optimizer_steps"] == 2.0  # DAPO's full batch, GRPO's 8 / 4 updates
        for generated, correct, kept, kept_correct in counts.values():
            assert 1 <= correct < generated <= 6 and (kept, kept_correct) == (2, 1)
        assert m["rollout/kept_mixed_frac"] == 1.0
        groups_out = m.get("training/filter_groups/evicted_samples", 0)
        surplus = m.get("training/filter_groups/discarded_surplus_samples", 0)
        # every evicted group cost the cap: the responses no trained group holds are >= 6 per evicted group
        assert m["rollout/gen_responses"] - m["rollout/responses_total"] >= 6 * groups_out + 2 * surplus
        assert m["rollout/discarded_responses"] == m["rollout/gen_responses"] - 8 * 2  # all but the kept rows
        assert m["feedback/evicted_groups_fed_back"] == groups_out + surplus  # the pool hears them too
        evicted += groups_out
    assert evicted > 0, "DAPO evicted no group in 2 steps: the out-of-reach records should run to the cap"


def test_heapa_reinforce_ada_pool_hears_every_generated_response(runs, e2e_runner):
    """HeaPA's selection with Reinforce-Ada's rounds (run C): the pool's pass rate of a record is over every
    response its rounds generated, not the n the update kept."""

    metrics, trace = runs["c"]
    for step, m in metrics.items():
        generated = sum(c[0] for c in trace[step]["rounds"].values())
        assert m["feedback/n_rollouts"] == m["rollout/gen_responses"] == generated > 8 * 2
    records = e2e_runner.pool_records(runs["base"] / "c" / "ckpt" / "global_step_2")
    for rid, (gen, correct, _, _) in trace[2]["rounds"].items():
        row = records[int(rid)]
        assert row["visits"] == 2
        assert row["last_pass"] == pytest.approx(correct / gen)
