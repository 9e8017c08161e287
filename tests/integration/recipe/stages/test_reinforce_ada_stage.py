"""Reinforce-Ada's trainer-side stage on verl's row format (the in-memory TransferQueue of this folder's conftest):
the down-sampling to n, and the advantage verl's own GRPO estimator computes on the kept rows, then re-centred on
every response of the prompt. The real TransferQueue and agent loop run in tests/e2e/test_ar3po_cpu.py."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from tensordict import TensorDict

import recipe.heapa.stages.reinforce_ada as ada_mod
import recipe.heapa.step.batch_view as step_batch_mod
from recipe.heapa.stages.reinforce_ada import ReinforceAdaStage
from recipe.heapa.step.batch_view import StepBatch
from verl.trainer.ppo.core_algos import compute_grpo_outcome_advantage
from verl.workers.utils.padding import response_to_nested
from verl_ext.allocation import RoundsConfig

N = 4
# record 7 needs two rounds to hold 2 right and 2 wrong; record 8 exits after one; record 9 is all wrong to the cap
GROUPS = {"a": (7, [1, 0, 0, 0, 0, 0, 1, 0]), "b": (8, [1, 0, 1, 0]), "c": (9, [0] * 16)}


@pytest.fixture
def tq(monkeypatch, fake_tq):
    monkeypatch.setattr(ada_mod, "tq", fake_tq)
    monkeypatch.setattr(step_batch_mod, "tq", fake_tq)
    return fake_tq


def _batch(tq, groups=GROUPS):
    # responses of 1-3 tokens, so the nested rows differ in length
    return tq.step({uid: (rid, [([5] * (1 + i % 3), float(a)) for i, a in enumerate(accs)])
                    for uid, (rid, accs) in groups.items()}, step=1)


def _verl_advantages(tq, batch, norm_by_std):
    """What verl's ``_compute_advantage`` writes for the batch: GRPO over the rows it gets, per uid."""
    data = tq.kv_batch_get(keys=batch.keys, partition_id="train",
                           select_fields=["uid", "response_mask", "rm_scores"])
    mask = torch.nested.as_nested_tensor(data["response_mask"], layout=torch.jagged)
    scores = torch.nested.as_nested_tensor(data["rm_scores"], layout=torch.jagged).to_padded_tensor(0.0)
    adv, _ = compute_grpo_outcome_advantage(scores, mask.to_padded_tensor(0), np.array(data["uid"], dtype=object),
                                            norm_adv_by_std_in_grpo=norm_by_std)
    nested = response_to_nested(adv, mask)
    tq.kv_batch_put(keys=batch.keys, partition_id="train",
                    fields=TensorDict({"advantages": nested, "returns": nested}, batch_size=len(batch.keys)))


def _run(tq, norm_by_std=True, global_baseline=True):
    stage = ReinforceAdaStage(RoundsConfig(enabled=True, global_baseline=global_baseline), N, 0.5, norm_by_std)
    batch = _batch(tq)
    view = StepBatch.read(batch.keys, batch.tags, batch.partition_id)
    out, metrics, record = stage.on_batch(batch, view)
    _verl_advantages(tq, out, norm_by_std)
    metrics.update(stage.after_advantage(out, record))
    return out, metrics, record, view


def _advantage(tq, key):
    values = tq.rows[key]["advantages"]
    assert torch.all(values == values[0])  # one value over the response
    return float(values[0])


def test_every_group_is_cut_back_to_n_balanced_and_the_rest_is_dropped(tq):
    out, metrics, record, view = _run(tq)
    kept = {"a": [0, 1, 2, 6], "b": [0, 1, 2, 3], "c": [0, 1, 2, 3]}  # the earliest of each kind
    assert sorted(out.keys) == sorted(f"{u}_{s}_0" for u, sessions in kept.items() for s in sessions)
    assert set(tq.rows) == set(out.keys)  # dropped rows left TransferQueue
    assert len(out.keys) == N * len(GROUPS)  # GRPO's batch: its mini-batches, update count and loss divisor
    assert record.counts == {7: [8, 2, 4, 2], 8: [4, 2, 4, 2], 9: [16, 0, 4, 0]}
    dropped = [t for t in view.rows if not t.trained]
    assert len(dropped) == 16 and record.discarded == [16, sum(1 + i % 3 for i in (3, 4, 5, 7))
                                                       + sum(1 + i % 3 for i in range(4, 16))]
    assert len(view.generated()) == 28  # the pool still hears every response
    assert view.outcomes(0.5) == {7: (2, 8), 8: (2, 4), 9: (0, 16)}
    assert metrics["rollout/plan_mismatch"] == 0 and metrics["rollout/responses_total"] == 28
    assert metrics["rollout/capped_frac"] == pytest.approx(1 / 3)
    assert metrics["rollout/kept_mixed_frac"] == pytest.approx(2 / 3)
    assert (metrics["rollout/responses_hist/4"], metrics["rollout/responses_hist/8"],
            metrics["rollout/responses_hist/16"]) == (1.0, 1.0, 1.0)


@pytest.mark.parametrize("norm_by_std", [True, False])
def test_the_advantage_is_centred_on_every_response_of_the_prompt(tq, norm_by_std):
    _run(tq, norm_by_std=norm_by_std)
    every = [1, 0, 0, 0, 0, 0, 1, 0]  # group a: the kept four are 2 right, 2 wrong; the eight are 2 right, 6 wrong
    mean, std = 0.25, float(torch.tensor(every, dtype=torch.float64).std())
    scale = std + 1e-6 if norm_by_std else 1.0
    assert _advantage(tq, "a_0_0") == pytest.approx((1 - mean) / scale, rel=1e-5)
    assert _advantage(tq, "a_1_0") == pytest.approx((0 - mean) / scale, rel=1e-5)
    kept_only = 1 - 0.5 if not norm_by_std else 0.5 / (math.sqrt(1 / 3) + 1e-6)
    assert _advantage(tq, "a_0_0") != pytest.approx(kept_only, rel=1e-3)  # not the kept group's statistics
    # a group kept whole has the same statistics either way; an all-wrong group has no signal
    b = 0.5 / (math.sqrt(1 / 3) + 1e-6) if norm_by_std else 0.5
    assert _advantage(tq, "b_0_0") == pytest.approx(b, rel=1e-5)
    assert all(_advantage(tq, f"c_{s}_0") == 0.0 for s in range(4))


def test_without_the_global_baseline_verls_kept_group_advantage_stays(tq):
    _, metrics, _, _ = _run(tq, global_baseline=False)
    assert _advantage(tq, "a_0_0") == pytest.approx(0.5 / (math.sqrt(1 / 3) + 1e-6), rel=1e-5)
    assert "rollout/adv_abs_mean_global_stats" not in metrics


def test_a_group_the_rule_did_not_produce_is_counted(tq):
    stage = ReinforceAdaStage(RoundsConfig(enabled=True), N, 0.5, True)
    batch = _batch(tq, {"a": (7, [1, 0, 0, 0, 1]), "b": (8, [1, 0, 1, 0])})  # five: the rule grants rounds of 4
    out, metrics, _ = stage.on_batch(batch, StepBatch.read(batch.keys, batch.tags, batch.partition_id))
    assert metrics["rollout/plan_mismatch"] == 1 and len(out.keys) == 8


def test_a_cap_below_n_fails_at_start():
    with pytest.raises(ValueError, match="n \\(4\\) <= it"):
        ReinforceAdaStage(RoundsConfig(enabled=True, max_per_prompt=2), N, 0.5, True)
