"""Reinforce-Ada in the recipe's step: down-sample each group to ``n``, then re-centre the kept rows' advantages on
every response the prompt generated.

The rounds themselves run in verl's agent-loop workers (``verl_ext.adapters.ar3po_agent_loop`` with a
``RoundsPlanner``): by the time the replay buffer hands the step's batch over, each group holds every response its
rounds generated (``n`` up to ``max_per_prompt``). ``ReinforceAdaStage.on_batch`` runs before verl balances the
batch, so dropped rows cost no old log-probs:

1. read each group's scores (``rm_scores``, what verl's GRPO estimator sums) and check its size against the rule
   (``planned_total``: ``rollout/plan_mismatch``);
2. keep ``n`` rows per group (``keep_indices``: balanced where the group can be), drop the rest from the batch and
   from TransferQueue; they stay in the step's view as generated rows, so the pool hears every response and the
   rollout cost counts them;
3. remember each kept row's score and its prompt's statistics over every generated response (``baseline``).

Every group then has ``n`` rows, so verl's own mini-batches, update count and loss divisor are GRPO's (no update
plan). After verl's advantages, ``after_advantage`` rewrites each kept row's advantage as ``(score - mean_all)``
(``/ (std_all + eps)`` when ``algorithm.norm_adv_by_std_in_grpo``) over the response mask: the paper's
``global_stat_est`` (``heapa.reinforce_ada.global_baseline``). Holds nothing across steps.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

import torch
import transfer_queue as tq
from tensordict import TensorDict
from transfer_queue import KVBatchMeta

from verl_ext.allocation import RoundsConfig, baseline, keep_indices, planned_total

from recipe.heapa.step.batch_view import StepBatch, parse_key

EPSILON = 1e-6  # verl's compute_grpo_outcome_advantage default


@dataclass
class RoundsRecord:
    """What the down-sampling did to one step's batch (it lives in the step's context): per record ``[generated,
    correct, kept, kept correct]`` (the trace), each kept session's ``(score, mean, std)`` (every output of a
    multi-output session gets its final output's advantage, as in verl) and the dropped rows' ``discarded``
    (responses, tokens)."""

    counts: dict[int, list[int]] = field(default_factory=dict)
    kept: dict[tuple[str, int], tuple[float, float, float]] = field(default_factory=dict)  # (uid, session) ->
    discarded: list[int] = field(default_factory=lambda: [0, 0])


class ReinforceAdaStage:
    """The trainer-side half of Reinforce-Ada (see the module docstring)."""

    def __init__(self, config: RoundsConfig, n: int, pass_threshold: float, norm_by_std: bool) -> None:
        config.sizes(n)  # a cap below n fails at start, naming the keys
        self.config, self.n, self.threshold, self.norm_by_std = config, n, pass_threshold, norm_by_std

    def on_batch(self, batch: KVBatchMeta, view: StepBatch) -> tuple[KVBatchMeta, dict[str, float], RoundsRecord]:
        """Down-sample every group to ``n``; returns the batch to train on, ``rollout/*`` scalars and the record."""
        record = RoundsRecord()
        groups = view.groups()
        keys = [t.key for trajs in groups.values() for t in trajs]
        if not keys:
            return batch, {}, record
        rm = tq.kv_batch_get(keys=keys, partition_id=view.partition_id, select_fields=["rm_scores"])["rm_scores"]
        score = {key: float(rm[i].float().sum()) for i, key in enumerate(keys)}
        dropped_sessions: set[tuple[str, int]] = set()
        sizes, mismatch, shift, kept_mixed, capped = [], 0, [], 0, 0
        _, cap = self.config.sizes(self.n)
        for uid, trajs in groups.items():
            if any(t.acc is None for t in trajs):
                raise KeyError(f"Reinforce-Ada: group {uid} has trajectories without reward_extra_info"
                               f"[{view.acc_field!r}]")
            correct = [float(t.acc) > self.threshold for t in trajs]
            mismatch += planned_total(correct, self.config, self.n) != len(trajs)
            keep = keep_indices(correct, self.n)
            every = [score[t.key] for t in trajs]
            kept_scores = [every[i] for i in keep]
            mean, std = baseline(every if self.config.global_baseline else kept_scores)
            shift.append(abs(mean - baseline(kept_scores)[0]))
            for i in keep:
                record.kept[(uid, trajs[i].session)] = (every[i], mean, std)
            dropped_sessions.update((uid, trajs[i].session) for i in set(range(len(trajs))) - set(keep))
            kept_right = sum(correct[i] for i in keep)
            kept_mixed += 0 < kept_right < len(keep)
            capped += len(trajs) >= cap
            sizes.append(len(trajs))
            rid = trajs[0].record_id
            counts = record.counts.setdefault(rid, [0, 0, 0, 0])
            record.counts[rid] = [counts[0] + len(trajs), counts[1] + sum(correct), counts[2] + len(keep),
                                  counts[3] + kept_right]
        batch = self._drop(batch, view, dropped_sessions, record)
        hist: dict[int, int] = defaultdict(int)
        for size in sizes:
            hist[size] += 1
        metrics = {"rollout/plan_mismatch": float(mismatch), "rollout/responses_total": float(sum(sizes)),
                   "rollout/responses_per_prompt_mean": sum(sizes) / len(sizes),
                   "rollout/capped_frac": capped / len(sizes), "rollout/kept_mixed_frac": kept_mixed / len(sizes),
                   "rollout/baseline_shift_mean": sum(shift) / len(shift),
                   **{f"rollout/responses_hist/{size}": float(k) for size, k in sorted(hist.items())}}
        return batch, metrics, record

    def _drop(self, batch: KVBatchMeta, view: StepBatch, sessions: set[tuple[str, int]],
              record: RoundsRecord) -> KVBatchMeta:
        """Take the dropped sessions' rows (every output) out of the batch and TransferQueue; the view keeps them."""
        gone = [t for t in view.rows if (t.uid, t.session) in sessions and t.trained]
        if not gone:
            return batch
        record.discarded = [len(gone), sum(int(t.tag.get("response_len", 0)) for t in gone)]
        keys = {t.key for t in gone}
        tq.kv_clear(keys=sorted(keys), partition_id=batch.partition_id)
        view.drop(keys)
        kept = [(k, t) for k, t in zip(batch.keys, batch.tags) if k not in keys]
        return KVBatchMeta(partition_id=batch.partition_id, keys=[k for k, _ in kept], tags=[t for _, t in kept],
                           fields=batch.fields, extra_info=batch.extra_info)

    def after_advantage(self, batch: KVBatchMeta, record: RoundsRecord) -> dict[str, float]:
        """Rewrite the kept rows' advantages (and GRPO's equal returns) with the prompt's full-pool statistics."""
        stats = {k: record.kept[parts[:2]] for k in batch.keys
                 if (parts := parse_key(k)) is not None and parts[:2] in record.kept}
        keys = list(stats)
        if not keys or not self.config.global_baseline:
            return {}
        data = tq.kv_batch_get(keys=keys, partition_id=batch.partition_id,
                               select_fields=["advantages", "response_mask"])
        rows, before = [], []
        for i, key in enumerate(keys):
            s, mean, std = stats[key]
            value = (s - mean) / (std + EPSILON) if self.norm_by_std else s - mean
            old = data["advantages"][i]
            rows.append(torch.full_like(old, value) * data["response_mask"][i].to(old.dtype))
            before.append(float(old.float().abs().mean()))
        nested = torch.nested.as_nested_tensor(rows, layout=torch.jagged)
        tq.kv_batch_put(keys=keys, partition_id=batch.partition_id,
                        fields=TensorDict({"advantages": nested, "returns": nested.clone()}, batch_size=len(keys)))
        after = [float(r.float().abs().mean()) for r in rows]  # GRPO's statistics of the kept n, then the full pool's
        return {"rollout/adv_abs_mean_kept_stats": sum(before) / len(before),
                "rollout/adv_abs_mean_global_stats": sum(after) / len(after)}
