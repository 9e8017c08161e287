"""AR3PO's trainer-side stage against verl's row format, with the in-memory stand-in for TransferQueue of this
folder's conftest (no Ray); the rows the stage writes go through verl's own ``list_of_dict_to_tensordict``. The real
TransferQueue path runs in tests/e2e/test_ar3po_cpu.py.
"""

from __future__ import annotations

import json
import math

import pytest
import torch

import recipe.heapa.stages.ar3po as ar3po_mod
from recipe.heapa.stages.ar3po import Ar3poStage
from recipe.heapa.stages.ar3po_rows import IncompatibleEntry, bank_payload, build_reused_row, parse_key, reused_tag
import recipe.heapa.step.batch_view as step_batch_mod
from recipe.heapa.step.batch_view import REUSED_TAG, StepBatch
from verl.utils.tensordict_utils import list_of_dict_to_tensordict
from verl_ext.ar3po import AR3POConfig, ReuseConfig
from verl_ext.adapters.feedback import PASS_THRESHOLD


@pytest.fixture
def tq(monkeypatch, fake_tq):
    monkeypatch.setattr(ar3po_mod, "tq", fake_tq)
    monkeypatch.setattr(step_batch_mod, "tq", fake_tq)
    return fake_tq


VIEWS: list[StepBatch] = []


def _on_batch(stage, batch, step):
    """What the trainer does: read the step's view once, hand it to AR3PO with the batch; returns the batch,
    the scalars and what AR3PO did (the step context's ``reuse``)."""
    view = StepBatch.read(batch.keys, batch.tags, batch.partition_id)
    VIEWS.append(view)
    return stage.on_batch(batch, view, step)


def _stage(mode="replace", weight=1.0, correction="none"):
    cfg = AR3POConfig(extend="unsolved", enabled=True, k1=2, k_s=2, max_stages=2, max_per_prompt=4,
                      reuse=ReuseConfig(mode=mode, weight=weight, correction=correction, capacity=64))
    return Ar3poStage(cfg, "acc", with_log_probs=True)


@pytest.mark.parametrize("mode", ["replace", "append"])
def test_an_all_wrong_group_gets_the_banked_success_as_a_new_session(tq, mode):
    stage = _stage(mode)
    # step 1: record 7 solved (one correct of two); record 8 easy
    batch = tq.step({"u1": (7, [([11, 12, 13], 0.0), ([21, 22], 1.0)]), "u2": (8, [([5], 1.0), ([6], 1.0)])}, 1)
    out, m, rec = _on_batch(stage, batch, step=1)
    assert out.keys == batch.keys and m["rollout/reused"] == 0 and m["rollout/bank_size"] == 2
    assert rec.counts == {7: [2, 1], 8: [2, 2]}
    # step 2: record 7 all wrong over two stages (4 responses); record 8 still easy
    wrong = [([30 + i, 40], 0.0) for i in range(4)]
    batch = tq.step({"v1": (7, wrong), "v2": (8, [([5], 1.0), ([6], 1.0)])}, 2)
    out, m, rec = _on_batch(stage, batch, step=2)
    assert m["rollout/reused"] == 1 and m["rollout/plan_mismatch"] == 0 and m["rollout/stages_used"] == 2
    assert m["rollout/zero_adv_before"] == 1.0 and m["rollout/zero_adv_after"] == 0.5
    new_key = "v1_4_0"
    assert rec.reused_keys == {new_key} and rec.reused_records == [7]
    row, tag = tq.rows[new_key], tq.tags[new_key]
    assert row["responses"].tolist() == [21, 22] and row["input_ids"].tolist() == tq.PROMPT + [21, 22]
    assert row["rm_scores"].tolist() == [0.0, 1.0] and row["position_ids"].tolist() == list(range(len(tq.PROMPT) + 2))
    assert row["rollout_log_probs"].tolist() == pytest.approx([-0.1, -0.2])  # the stored behaviour log-probs
    assert row["extra_fields"]["ar3po_reused"] is True and row["extra_fields"]["ar3po_age"] == 1
    assert row["session_id"] == 4 and row["index"] == 7 and row["uid"] == "v1"
    assert tag[REUSED_TAG] and tag["response_len"] == 2 and tag["max_global_steps"] == 0  # generated at step 1
    replaced = "v1_3_0"  # the last of the equally wrong responses
    if mode == "replace":
        assert replaced not in out.keys and replaced not in tq.rows and len(out.keys) == len(batch.keys)
        assert tuple(rec.discarded) == (1, 2)
    else:
        assert replaced in out.keys and len(out.keys) == len(batch.keys) + 1
        assert tuple(rec.discarded) == (0, 0)
    view = VIEWS[-1]  # the pool hears about generated rows only, the replaced one included; never the reused one
    assert [t.key for t in view.generated()] == batch.keys
    assert view.outcomes(PASS_THRESHOLD) == {7: (0, 4), 8: (2, 2)}
    assert {t.key for t in view.rows if t.reused} == {new_key}
    assert stage.in_update(out, rec) == {"rollout/reused_in_update": 1.0}


def test_reuse_weight_scales_only_reused_advantages(tq):
    stage = _stage(weight=0.25)
    _on_batch(stage, tq.step({"u1": (7, [([1], 1.0), ([2], 0.0)])}, 1), step=1)
    out, _, rec = _on_batch(stage, tq.step({"v1": (7, [([3], 0.0)] * 4)}, 2), step=2)
    for i, key in enumerate(out.keys):
        tq.rows[key]["advantages"] = torch.full((tq.rows[key]["responses"].numel(),), 0.8 if key in
                                                rec.reused_keys else -0.2)
    m = stage.after_advantage(out, rec)
    assert m["rollout/reused_adv_mean"] == pytest.approx(0.8)  # measured before the weight applies
    reused = next(iter(rec.reused_keys))
    assert tq.rows[reused]["advantages"].tolist() == pytest.approx([0.2])
    assert all(tq.rows[k]["advantages"].tolist() == pytest.approx([-0.2]) for k in out.keys if k != reused)


def test_tis_corrects_reused_advantages_by_the_capped_policy_ratio(tq):
    stage = _stage(weight=0.5, correction="tis")
    _on_batch(stage, tq.step({"u1": (7, [([1, 2], 1.0), ([3], 0.0)])}, 1), step=1)  # banked log-probs [-.1, -.2]
    out, _, rec = _on_batch(stage, tq.step({"v1": (7, [([3], 0.0)] * 4)}, 2), step=2)
    reused = next(iter(rec.reused_keys))
    for key in out.keys:
        n = tq.rows[key]["responses"].numel()
        tq.rows[key]["advantages"] = torch.full((n,), 0.8 if key == reused else -0.2)
        tq.rows[key]["old_log_probs"] = torch.zeros(n)
    # today's policy: the first token 1.5x as likely as when it was written, the second 5x (capped at 2)
    tq.rows[reused]["old_log_probs"] = torch.tensor([-0.1 + math.log(1.5), -0.2 + math.log(5.0)])
    m = stage.after_advantage(out, rec)
    assert tq.rows[reused]["advantages"].tolist() == pytest.approx([0.8 * 0.5 * 1.5, 0.8 * 0.5 * 2.0])
    assert all(tq.rows[k]["advantages"].tolist() == pytest.approx([-0.2]) for k in out.keys if k != reused)
    assert m["rollout/reused_is_weight_mean"] == pytest.approx(1.75)
    assert m["rollout/reused_is_capped_frac"] == pytest.approx(0.5)
    assert m["rollout/reused_log_ratio_mean"] == pytest.approx((math.log(1.5) + math.log(5.0)) / 2)


def test_every_group_is_counted_and_metrics_count_applied_reuses(tq):
    stage = _stage()
    _on_batch(stage, tq.step({"u1": (7, [([1], 1.0), ([2], 0.0)])}, 1), step=1)
    # record 7 twice in one batch (a reinserted record), both groups all wrong; record 9 all wrong, nothing banked
    wrong = [([30 + i], 0.0) for i in range(4)]
    out, m, rec = _on_batch(stage, tq.step({"a": (7, wrong), "b": (7, wrong), "c": (9, wrong)}, 4), step=4)
    assert rec.counts == {7: [8, 0], 9: [4, 0]}  # both groups of record 7 accounted
    assert m["rollout/responses_total"] == 12 and m["rollout/all_wrong_frac"] == 1.0
    assert m["rollout/reused"] == 1 and rec.reused_records == [7]  # one stored response, used once
    assert m["rollout/reuse_hit_rate"] == pytest.approx(1 / 3) and m["rollout/reused_frac"] == pytest.approx(1 / 3)
    assert m["rollout/reused_age_mean"] == 3.0 and m["rollout/bank_age_max"] == 3.0
    assert m["rollout/score_generated_mean"] == 0.0 and m["rollout/score_trained_mean"] == pytest.approx(1 / 12)
    assert m["rollout/bank_reused_total"] == 1.0


def test_an_unapplied_reuse_is_not_counted(tq):
    stage = _stage()
    _on_batch(stage, tq.step({"u1": (7, [([1], 1.0), ([2], 0.0)])}, 1), step=1)
    entries = stage.bank._store[7]
    entries[-1]["rollout_log_probs"] = None  # e.g. stored before calculate_log_probs was switched on
    out, m, rec = _on_batch(stage, tq.step({"v": (7, [([3], 0.0)] * 4)}, 2), step=2)
    assert m["rollout/reused"] == 0 and m["rollout/reuse_incompatible_total"] == 1
    assert m["rollout/bank_reused_total"] == 0.0


def test_bank_survives_a_json_checkpoint(tq):
    stage = _stage()
    _on_batch(stage, tq.step({"u1": (7, [([1, 2], 1.0), ([3], 0.0)])}, 1), step=1)
    restored = _stage()
    restored.load_state_dict(json.loads(json.dumps(stage.state_dict())))
    out, m, rec = _on_batch(restored, tq.step({"v1": (7, [([3], 0.0)] * 4)}, 5), step=5)
    assert m["rollout/reused"] == 1 and tq.rows[next(iter(rec.reused_keys))]["responses"].tolist() == [1, 2]


def test_reused_rows_stack_with_verl_rows_and_incompatible_entries_are_refused(fake_tq):
    sibling = fake_tq.row("u", 0, 3, [9, 9, 9], 0.0)
    entry = bank_payload(torch.tensor([4, 5]), torch.tensor([0.0, 1.0]), {"reward_extra_info": {"acc": 1.0}}, 2,
                         1.0, {"min_global_steps": 2, "max_global_steps": 2}, torch.tensor([-0.5, -0.25]))
    assert json.loads(json.dumps(entry)) == entry
    reused = build_reused_row(sibling, entry, session=4, mark_field="ar3po_reused", age=3)
    td = list_of_dict_to_tensordict([sibling, reused])  # verl's own batching of rows with different lengths
    assert len(td) == 2 and td["responses"][1].tolist() == [4, 5]
    assert reused_tag({"prompt_len": 19, "response_len": 3}, entry, 19)["seq_len"] == 21
    assert parse_key("abc_12_0") == ("abc", 12, 0) and parse_key("abc") is None
    with pytest.raises(IncompatibleEntry, match="rollout_log_probs"):
        build_reused_row(sibling, {**entry, "rollout_log_probs": None}, 4, "ar3po_reused", 0)
