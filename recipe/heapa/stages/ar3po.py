"""AR3PO in the recipe's step: account for the staged rollout, reuse banked responses, weight reused rows' loss.

The staged rollout itself runs in verl's agent-loop workers (``verl_ext.adapters.ar3po_agent_loop``); by the time
the replay buffer hands the step's batch over, every group is finished, with uneven sizes. ``Ar3poStage.on_batch``
runs before verl balances the batch (so reused rows are balanced, padded and given old log-probs by the current
actor like every other row):

1. read each group's rewards in generation order from the step's view (``step/batch_view.py``) and check them against
   the planner (``stage_account``);
2. ``finish_step``: for an all-wrong group whose prompt has a banked correct response, a reuse plan;
3. write each reused response as a new session of its group (``replace`` drops the wrong response it replaces,
   ``append`` keeps it), tagged ``ar3po_reused`` and marked in ``extra_fields[reuse.mark_field]``;
4. bank this step's fresh correct responses (never reused ones).

After verl's advantages, ``after_advantage`` multiplies reused rows' advantages by the truncated importance ratio
between today's policy and the one that wrote the response (``reuse.correction: tis``) and by ``reuse.weight``:
PPO's clipped objective is positively homogeneous in the advantage, so this is exactly a per-token loss weight.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
import transfer_queue as tq
from tensordict import TensorDict
from transfer_queue import KVBatchMeta

from verl.utils.tensordict_utils import list_of_dict_to_tensordict
from verl_ext.ar3po import AR3POConfig, ResponseBank, finish_step, group_stats, stage_account, stage_metrics

from recipe.heapa.stages.ar3po_rows import RESPONSE_FIELDS, IncompatibleEntry, bank_payload, build_reused_row, \
    reused_tag
from recipe.heapa.step.batch_view import StepBatch, Trajectory
from verl_ext.state_schema import check_schema

logger = logging.getLogger(__name__)
SCHEMA_VERSION = 1


@dataclass
class ReuseRecord:
    """What AR3PO did to one step's batch (it lives in the step's context): per record ``[responses generated,
    correct ones]`` (the trace), the reused rows' keys and records, and the replaced responses (``discarded``:
    responses, tokens) that were generated and will not be trained."""

    counts: dict[int, list[int]] = field(default_factory=dict)
    reused_keys: set[str] = field(default_factory=set)
    reused_records: list[int] = field(default_factory=list)
    discarded: list[int] = field(default_factory=lambda: [0, 0])


class Ar3poStage:
    """The trainer-side half of AR3PO (see the module docstring); owns the ``ResponseBank``, across steps."""

    def __init__(self, config: AR3POConfig, acc_field: str = "acc", with_log_probs: bool = True) -> None:
        self.config = config
        self.bank = ResponseBank(config)
        self.acc_field = acc_field
        self.with_log_probs = with_log_probs
        self.incompatible = 0
        self.measured: set[int] = set()  # this step's records the pool had measured when fetched (extend: measured)

    def note_measured(self, record_ids) -> None:
        """Records of this step whose rollout was told they were measured (``extend: measured``): the stage
        account checks their group sizes against the same rule. Cleared by ``on_batch``."""
        self.measured.update(int(r) for r in record_ids)

    # ------------------------------------------------------------------------------------------- the batch
    def on_batch(self, batch: KVBatchMeta, view: StepBatch,
                 step: int) -> tuple[KVBatchMeta, dict[str, float], ReuseRecord]:
        """Account, reuse and bank for the step's batch; returns the batch to train on, ``rollout/*`` scalars and
        what was done. ``view`` is the step's trajectories (``step/batch_view.py``); reused and replaced rows are
        recorded in it."""
        record = ReuseRecord()
        groups = view.groups()
        for trajs in groups.values():
            for t in trajs:
                if t.acc is None:
                    raise KeyError(f"trajectory {t.key} has no reward_extra_info[{self.acc_field!r}]")
        payloads = self._payloads(view, groups)
        record_of = {uid: trajs[0].record_id for uid, trajs in groups.items()}
        if len(set(record_of.values())) < len(record_of):
            logger.warning("AR3PO: a record has two groups in one batch; both are counted, only the first can get a "
                           "reused response")
        accs = {uid: [t.acc for t in trajs] for uid, trajs in groups.items()}  # every group counts
        for uid, a in accs.items():
            n, passes = record.counts.setdefault(record_of[uid], [0, 0])
            record.counts[record_of[uid]] = [n + len(a), passes + sum(self.config.is_correct(x) for x in a)]
        measured = {uid for uid in accs if record_of[uid] in self.measured}
        self.measured = set()
        metrics = stage_metrics(stage_account(self.config, accs, measured))
        out = finish_step(accs, self.bank, step, record_of=record_of)
        metrics.update(out.metrics)
        batch, applied = self._apply(batch, view, groups, out.plans, record)
        for uid in set(out.plans) - applied:
            self.bank.unapplied(out.plans[uid])
        final = {uid: (out.plans[uid].apply(a) if uid in applied else a) for uid, a in accs.items()}
        after = group_stats(final, self.config.success_threshold)
        before = group_stats(accs, self.config.success_threshold)
        generated = [x for a in accs.values() for x in a]
        trained = [x for a in final.values() for x in a]
        ages = [out.plans[uid].age for uid in applied]
        bank_ages = self.bank.ages(step)
        metrics.update({
            "rollout/reused": float(len(applied)), "rollout/reused_frac": before.frac(len(applied)),
            "rollout/reuse_hit_rate": len(applied) / before.all_wrong if before.all_wrong else 0.0,
            "rollout/reused_age_mean": sum(ages) / len(ages) if ages else 0.0,
            "rollout/bank_age_mean": sum(bank_ages) / len(bank_ages) if bank_ages else 0.0,
            "rollout/bank_age_max": float(max(bank_ages, default=0)),
            "rollout/score_generated_mean": sum(generated) / len(generated) if generated else 0.0,
            "rollout/score_trained_mean": sum(trained) / len(trained) if trained else 0.0,
            "rollout/zero_adv_after": after.frac(after.zero_adv),
            "rollout/reuse_incompatible_total": float(self.incompatible)})
        for uid, trajs in groups.items():
            fresh = [payloads[t.key] for t in trajs if t.key in payloads]
            self.bank.put_correct(trajs[0].record_id, fresh, step)
        metrics.update(self.bank.metrics())  # after this step's puts
        return batch, metrics, record

    def _payloads(self, view: StepBatch, groups: Mapping[str, list[Trajectory]]) -> dict[str, dict[str, Any]]:
        """Bank payloads of the correct single-output sessions (multi-output sessions are not banked)."""
        outputs = view.outputs_per_session()
        correct = [t for trajs in groups.values() for t in trajs
                   if outputs[(t.uid, t.session)] == 1 and self.config.is_correct(t.acc)]
        if not correct:
            return {}
        fields = list(RESPONSE_FIELDS) + (["rollout_log_probs"] if self.with_log_probs else [])
        data = tq.kv_batch_get(keys=[t.key for t in correct], partition_id=view.partition_id, select_fields=fields)
        return {t.key: bank_payload(data["responses"][i], data["rm_scores"][i], {"reward_extra_info": t.reward_info},
                                    data["num_turns"][i], float(t.acc), t.tag,
                                    data["rollout_log_probs"][i] if self.with_log_probs else None)
                for i, t in enumerate(correct)}

    def _apply(self, batch: KVBatchMeta, view: StepBatch, groups: Mapping[str, list[Trajectory]],
               plans: Mapping[str, Any], record: ReuseRecord) -> tuple[KVBatchMeta, set[str]]:
        """Write each planned reuse (keyed by group uid) as a new session row; ``replace`` drops the row it
        replaces. Returns the batch and the uids whose reuse was applied."""
        if not plans:
            return batch, set()
        targets = {uid: (groups[uid][plan.index] if plan.mode == "replace" else groups[uid][-1])
                   for uid, plan in plans.items()}
        siblings = tq.kv_batch_get(keys=[t.key for t in targets.values()], partition_id=batch.partition_id)
        keys, rows, tags, dropped, applied = [], [], [], set(), set()
        for j, (uid, plan) in enumerate(plans.items()):
            target, trajs, rid = targets[uid], groups[uid], groups[uid][0].record_id
            session = max(t.session for t in trajs) + 1
            sibling = {k: siblings[j][k] for k in siblings[j].keys()}  # indexing unwraps non-tensor fields
            try:
                row = build_reused_row(sibling, plan.response, session, self.config.reuse.mark_field, plan.age)
            except IncompatibleEntry as exc:
                self.incompatible += 1
                logger.warning("AR3PO: banked response of record %d not reused: %s", rid, exc)
                continue
            keys.append(f"{target.uid}_{session}_0")
            rows.append(row)
            tags.append(reused_tag(target.tag, plan.response, int(sibling["prompts"].numel())))
            view.add([Trajectory(keys[-1], target.uid, session, 0, rid, float(plan.response["acc"]), tags[-1],
                                 dict(plan.response.get("reward_extra_info") or {}))])
            applied.add(uid)
            record.reused_records.append(rid)
            if plan.mode == "replace":
                dropped.add(target.key)
                record.discarded[0] += 1
                record.discarded[1] += int(target.tag.get("response_len", 0))
        if keys:
            tq.kv_batch_put(keys=keys, partition_id=batch.partition_id, fields=list_of_dict_to_tensordict(rows),
                            tags=tags)
        if dropped:
            tq.kv_clear(keys=sorted(dropped), partition_id=batch.partition_id)
            view.drop(dropped)  # still generated this step: the pool hears about them
        record.reused_keys = set(keys)
        kept = [(k, t) for k, t in zip(batch.keys, batch.tags) if k not in dropped]
        return KVBatchMeta(partition_id=batch.partition_id, keys=[k for k, _ in kept] + keys,
                           tags=[t for _, t in kept] + tags, fields=batch.fields, extra_info=batch.extra_info), applied

    def size_bank(self, records: int, max_response_length: int) -> None:
        """``reuse.capacity: 0``: room for ``per_prompt`` responses of every seed record; logs the bound."""
        per_prompt = self.config.reuse.per_prompt
        self.bank.set_capacity(max(records, 1) * per_prompt)
        worst_gb = self.bank.capacity * max_response_length * 15 / 1e9  # ~15 bytes per token in heapa_state.json
        logger.info("AR3PO: response bank sized for %d records x %d = %d responses (at most ~%.2f GB in "
                    "heapa_state.json at %d tokens each; heapa.ar3po.reuse.capacity bounds it)", records, per_prompt,
                    self.bank.capacity, worst_gb, max_response_length)

    # ------------------------------------------------------------------------------------------- the loss
    def after_advantage(self, batch: KVBatchMeta, record: ReuseRecord) -> dict[str, float]:
        """Correct and weight the reused rows' advantages (PPO's clipped objective is positively homogeneous in the
        advantage, so a per-token factor >= 0 on it is exactly a per-token loss weight):

        - ``correction: tis``: x ``min(is_cap, exp(old_log_prob - stored behaviour log-prob))`` per token. verl
          computed ``old_log_probs`` with the current actor, so PPO's ratio is 1 at the first update; this factor
          is the gap between the policy that wrote the response and today's.
        - x ``reuse.weight``.
        Logs their mean advantage before (> 0: pushed toward the stored success) and the correction's size."""
        keys = [k for k in batch.keys if k in record.reused_keys]
        if not keys:
            return {}
        reuse = self.config.reuse
        fields = ["advantages"] + (["old_log_probs", "rollout_log_probs"] if reuse.correction == "tis" else [])
        data = tq.kv_batch_get(keys=keys, partition_id=batch.partition_id, select_fields=fields)
        rows = [data["advantages"][i].float() for i in range(len(keys))]
        metrics = {"rollout/reused_adv_mean": float(torch.stack([r.mean() for r in rows]).mean()),
                   "rollout/reused_weight": reuse.weight}
        factors = [torch.full_like(r, reuse.weight) for r in rows]
        if reuse.correction == "tis":
            log_ratio = [data["old_log_probs"][i].float() - data["rollout_log_probs"][i].float()
                         for i in range(len(keys))]
            ratio = [torch.exp(torch.clamp(lr, max=20.0)).clamp(max=reuse.is_cap) for lr in log_ratio]
            factors = [f * r for f, r in zip(factors, ratio)]
            metrics.update({"rollout/reused_log_ratio_mean": float(torch.cat(log_ratio).mean()),
                            "rollout/reused_is_weight_mean": float(torch.cat(ratio).mean()),
                            "rollout/reused_is_capped_frac": float((torch.cat(ratio) >= reuse.is_cap).float().mean())})
        if reuse.correction != "none" or reuse.weight != 1.0:
            scaled = torch.nested.as_nested_tensor([r * f for r, f in zip(rows, factors)], layout=torch.jagged)
            tq.kv_batch_put(keys=keys, partition_id=batch.partition_id,
                            fields=TensorDict({"advantages": scaled}, batch_size=len(keys)))
        return metrics

    def in_update(self, batch: KVBatchMeta, record: ReuseRecord) -> dict[str, float]:
        """How many reused rows the actor update receives (they reach the loss through verl's own path)."""
        return {"rollout/reused_in_update": float(sum(k in record.reused_keys for k in batch.keys))}

    # ------------------------------------------------------------------------------------------- checkpoints
    def state_dict(self) -> dict[str, Any]:
        """The bank (the staged planner holds nothing between steps: a sync step finishes every stage)."""
        return {"schema_version": SCHEMA_VERSION, "bank": self.bank.state_dict(), "incompatible": self.incompatible}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        check_schema(state, "AR3PO", SCHEMA_VERSION)
        self.bank.load_state_dict(state["bank"])
        self.incompatible = int(state.get("incompatible", 0))
