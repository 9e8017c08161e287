"""The HeaPA recipe (``python -m recipe.heapa.main_heapa``) through verl's real trainer on the CPU backend.

heapa_grpo, run A: 3 steps on 16 seeds (batch 8), checkpoint at step 2, augmentation with the programmatic teacher.
  - steps 1-2 drain the cold queue into the archive; step 3 samples scored records at the heap boundary (the
    children, or the archive reinserted when the pool runs short): the pool's statistics really move;
  - the tiny policy writes children that the teacher accepts; the pool inserts them with a lineage edge and
    samples them at the next step.
(A resumed run is checked in ``test_pinned_run.py``, which restarts the pinned run from step 2 and requires step 3
exactly as before, and ``test_async_cpu.py``; ``heapa.update.sequence_mean_over=signal_rows`` in ``test_hive_cpu.py``.)
heapa_dapo: 3 steps with DAPO's group filtering; every rolled-out prompt is fed back (filtered groups included).

Validation with common random numbers: run A and the heapa_dapo run both validate the same initial model at step 0
(T=1, two samples per problem, the same seed). The hf rollout server seeds every request by (seed, weights' step,
prompt, sampling settings, n-th identical request) and batches so that a row's result does not depend on its batch
(``verl_ext/cpu/hf_server.py``), so the two methods must produce the same responses to the same problems and the
same ``val-core`` accuracy. Without it, two methods' step-0 validations of one seed differed by 2-3 points, which
made the CPU comparison unpaired.
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from pathlib import Path

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def paired_validation(out: Path) -> list[str]:
    """Step-0 validation at T=1, two samples of each of 48 problems, the samples written to ``out / 'val'``."""
    return ["trainer.val_before_train=True", f"trainer.validation_data_dir={out / 'val'}",
            "data.val_max_samples=48", "data.val_batch_size=48", "actor_rollout_ref.rollout.val_kwargs.n=2",
            "actor_rollout_ref.rollout.val_kwargs.do_sample=True",
            "actor_rollout_ref.rollout.val_kwargs.temperature=1.0"]


def validation_samples(out: Path) -> Counter:
    """(problem, response, correct) of every step-0 validation sample. Correct, not the score: DAPO scores a wrong
    answer -1 where GRPO scores 0."""
    samples = Counter()
    for path in sorted((out / "val").glob("0.jsonl")):
        for line in path.read_text().splitlines():
            row = json.loads(line)
            samples[(row["input"], row["output"], row["score"] > 0)] += 1
    return samples


@pytest.fixture(scope="module")
def grpo_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("heapa_grpo")


@pytest.fixture(scope="module")
def grpo_run(tiny_assets, repo_root, e2e_runner, grpo_dir):
    run = e2e_runner.run_recipe(repo_root, grpo_dir / "a", e2e_runner.recipe_overrides(
        tiny_assets, grpo_dir / "a", "heapa_grpo", steps=3) + paired_validation(grpo_dir / "a"))
    ckpt = grpo_dir / "a" / "ckpt" / "global_step_2"
    assert (ckpt / "data.pt").exists() and (ckpt / "heapa_state.json").exists()
    return run


@pytest.fixture(scope="module")
def dapo_run(tiny_assets, repo_root, e2e_runner, tmp_path_factory):
    out = tmp_path_factory.mktemp("heapa_dapo") / "dapo"
    return out, *e2e_runner.run_recipe(repo_root, out, e2e_runner.recipe_overrides(
        tiny_assets, out, "heapa_dapo", steps=3, seeds=64) + paired_validation(out))


def test_pool_statistics_move_through_cold_archive_and_boundary(grpo_run):
    metrics, trace = grpo_run
    assert set(metrics) == {0, 1, 2, 3}  # step 0: the validation
    assert metrics[1]["select/frac_cold"] == 1.0  # nothing is measured yet: the batch is all cold seeds
    # trained records wait in the archive and return before the next selection (reinsertion `always`)
    assert metrics[1]["pool/size_archive"] == 8 and metrics[2]["pool/reinserted"] >= 8
    # from step 2 on, while cold records are left, at least a quarter of a batch is cold (cold_fraction, the floor
    # of the greedy exploration: more only for seats the frontier cannot fill with picks better than a cold draw,
    # issue 23), plus the frontier picks the preset's re-visit bound hands to cold records (max_window_visits 1:
    # nothing trained twice in 10 steps while a cold record is left); the rest sits at the frontier
    swaps = {s: metrics[s]["pool/revisit_cap_swaps"] - metrics[s - 1]["pool/revisit_cap_swaps"] for s in (2, 3)}
    assert swaps[2] > 0  # step 1's records are all in the window at step 2, and cold ones are left
    for step in (2, 3):
        cold = metrics[step]["select/frac_cold"]
        assert cold == metrics[step]["pool/cold_share_drawn"]
        rule = max(0.25, metrics[step]["pool/cold_share_rule"])
        left = metrics[step - 1]["pool/size_cold"]  # before this step's draw
        assert cold * 8 == min(left, math.ceil(8 * rule)) + swaps[step]
        assert metrics[step]["select/frac_boundary"] + metrics[step]["select/frac_extreme"] == 1.0 - cold
    drawn = round(8 * (metrics[2]["select/frac_cold"] + metrics[3]["select/frac_cold"]))
    assert metrics[3]["pool/size_cold"] == 16 - 8 - drawn  # 16 seeds: 8 at step 1, then the cold share per step
    assert metrics[2]["pool/center"] == 0.5 and "pool/frac_near_target" in metrics[2]
    assert all(metrics[s]["feedback/n_records"] == 8 for s in (1, 2))
    assert metrics[1]["feedback/n_rollouts"] == 32
    assert all(metrics[s]["reward/timeouts"] == 0 and metrics[s]["reward/errors"] == 0 for s in (1, 2, 3))
    # frontier batches carry signal; step 1's all-cold batch may draw only all-equal groups (seen once in CI)
    assert all(metrics[s]["actor/grad_norm"] > 0 for s in (2, 3))
    assert len(set(trace[1]["trained"])) == 8 and len(set(trace[2]["trained"]) - set(trace[1]["trained"])) >= 2
    # diag/*: under seq-mean-token-mean the rows of mixed groups are the share of the step's loss with signal
    for s in (1, 2, 3):
        mixed = 1 - metrics[s]["feedback/frac_all_correct"] - metrics[s]["feedback/frac_all_wrong"]
        assert metrics[s]["diag/nonzero_rows"] == pytest.approx(mixed)
        assert metrics[s]["diag/effective_loss_scale"] == metrics[s]["diag/nonzero_rows"]
        assert (metrics[s]["diag/adv_mass"] > 0) == (mixed > 0)
        assert sum(metrics[s][f"feedback/band_{b}"] for b in ("0_25", "25_50", "50_75", "75_100")) == \
            pytest.approx(mixed)


def test_augmented_children_enter_the_pool_with_lineage(grpo_run):
    metrics, trace = grpo_run
    assert metrics[2]["augment/fired"] > 0 and metrics[2]["augment/generated"] > 0
    children = [c for s in sorted(trace) for c in trace[s]["children"]]
    assert children, f"no child accepted; augment metrics at step 3: " \
                     f"{ {k: v for k, v in metrics[3].items() if k.startswith(('augment/', 'teacher/'))} }"
    assert all(c >= 16 for c in children)  # new record ids, after the 16 seeds
    assert metrics[3]["pool/added_child"] == len(children)
    assert metrics[3]["lineage/edges"] >= 1
    early = set(trace[1]["children"]) | set(trace[2]["children"])
    assert early & set(trace[3]["trained"]), "children written at steps 1-2 should be sampled at step 3"


def test_heapa_dapo_feeds_back_every_rolled_out_prompt(dapo_run):
    _, metrics, _ = dapo_run
    assert {1, 2, 3} <= set(metrics) <= {0, 1, 2, 3}
    metrics = {s: m for s, m in metrics.items() if s > 0}  # step 0: the validation only
    trained = sum(metrics[s]["feedback/n_records"] for s in metrics)
    filtered = sum(metrics[s].get("feedback/evicted_groups_fed_back", 0) for s in metrics)
    total_fed = trained + filtered
    assert trained >= 24  # a full batch of 8 groups with signal trained per step
    assert filtered > 0, "DAPO filtered no group in 3 steps: the tiny model should solve some prompts fully"
    assert metrics[3]["pool/fed_back"] == total_fed


def test_step0_validation_is_identical_across_methods(grpo_run, grpo_dir, dapo_run):
    grpo_metrics, _ = grpo_run
    dapo_out, dapo_metrics, _ = dapo_run
    grpo_samples = validation_samples(grpo_dir / "a")
    dapo_samples = validation_samples(dapo_out)
    assert sum(grpo_samples.values()) == 96, sum(grpo_samples.values())
    # sampled at T=1, not greedy: the two samples of a problem differ somewhere (else this would prove nothing)
    problems = Counter(problem for problem, _, _ in grpo_samples)
    assert len({(problem, response) for problem, response, _ in grpo_samples}) > len(problems)
    assert dapo_samples == grpo_samples
    # the headline (mean@n of every data source) is identical; verl's best@k/worst@k bootstrap over groups keyed
    # by random uids, so those may differ in their last digits
    grpo_val = {k: v for k, v in grpo_metrics[0].items() if k.startswith("val-core/")}
    headline = {k for k in grpo_val if re.search(r"/acc/mean@\d+$", k)}
    assert headline and {k: dapo_metrics[0].get(k) for k in headline} == {k: grpo_val[k] for k in headline}
