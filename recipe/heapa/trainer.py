"""The HeaPA trainer: verl's synchronous V1 PPO trainer with the prompt pool in charge of what is trained.

One step, as data flows (the PPO update itself is verl's, unchanged):

1. **augment (fire)**  while the rollout servers are awake, the policy is asked for new problems close to the
                last step's parents (``stages/augmentation.py``); the step does not wait for the teacher.
2. **select**   the strategy picks ``train_batch_size`` record ids (boundary sampling for HeaPA); the batch
                sampler hands them to the dataloader; rows carry ``extra_info.index = record id``.
   HIVE verifies its candidates here: the actor's prompt entropy for each (``stages/hive_verify.py``), stale ones pruned.
3. **rollout + reward**  verl's agent loop and the ``heapa`` reward manager (``acc`` per trajectory); with AR3PO the
                agent loop rolls each prompt out in stages (``verl_ext.adapters.ar3po_agent_loop``). The
                augmentation requests are joined and handed to the teacher before verl sleeps the servers.
   **view**     the sampled batch's trajectories are read once (record id, ``acc``, generated / reused / padding:
                ``step/batch_view.py``); AR3PO, the feedback and HIVE's response entropy all read that view.
   **reuse**    AR3PO: all-wrong groups get a banked correct response before verl balances the batch, so the actor
                computes its old log-probs like any other row (``stages/ar3po.py``); with uneven groups the actor update
                keeps GRPO's update count and per-row loss scale (``step/update_plan.py``).
4. **feedback** the generated trajectories' ``acc``, *by record id*, updates each record's estimator; trained
                records are archived (groups verl evicts, e.g. DAPO-filtered ones, are reported by the replay
                buffer as they are evicted: ``step/replay_buffer.py``).
5. **integrate** validated children enter the pool with a parent-derived prior and a lineage edge.
6. **refresh / reinsert**  lineage re-estimation on its cadence; controlled reinsertion when the pool runs short.
7. **log**      ``pool/*``, ``select/*``, ``feedback/*``, ``augment/*``, ``teacher/*``, ``lineage/*``, ``rollout/*``
                (what the rollout cost, for every method), ``update/*``, ``run/*`` and ``hive/*`` scalars.

Around every step: a stuck-step watchdog (``ops/watchdog.py``) and preemption at the step's end
(``ops/trainer_checkpoints.py``, ``ops/preemption.py``).
"""

from __future__ import annotations

import gc
import json
import logging

from omegaconf import OmegaConf, open_dict
from torchdata.stateful_dataloader import StatefulDataLoader

from verl.trainer.ppo.utils import create_rl_dataset
from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync
from verl.utils.dataset.rl_dataset import collate_fn
from verl.utils.debug import marked_timer
from verl.utils.import_utils import load_class_from_fqn
from verl_ext.adapters.dataset import PoolDataset
from verl_ext.adapters.sampler import PoolBatchSampler, make_train_dataloader
from verl_ext.pool.lineage.refresh import LineageRefresher
from verl_ext.selection import build_strategy

from recipe.heapa.stages.ar3po import Ar3poStage
from recipe.heapa.stages.augmentation import AugmentationStage
from recipe.heapa.step.advantage_diagnostics import advantage_diagnostics, read_advantages
from recipe.heapa.step.replay_buffer import PATH as FEEDBACK_BUFFER_PATH
from recipe.heapa.step.replay_buffer import FeedbackReplayBuffer
from recipe.heapa.stages.hive_verify import PromptEntropyProbe, response_entropy
from recipe.heapa.step.rollout_cost import RolloutCost
from .settings import HeapaConfigError, parse_settings, strategy_kwargs
from recipe.heapa.step.batch_view import StepBatch
from recipe.heapa.step.outcomes import StepOutcomes
from recipe.heapa.ops.supervise import run_metrics
from recipe.heapa.ops.trainer_checkpoints import RecipeCheckpoints
from recipe.heapa.step.update_plan import ActorUpdateTap, Batching, UpdatePlan, plan_update, spread_padding
from recipe.heapa.verl_contract import actor_dp_size, gen_batch_size, replay_buffer_filter_kwargs, set_training_horizon
from recipe.heapa.ops.watchdog import StepWatchdog, maybe_hang_for_test

logger = logging.getLogger(__name__)
AR3PO_MANAGER = "verl_ext.adapters.ar3po_agent_loop.StagedAgentLoopManager"


class HeapaTrainer(RecipeCheckpoints, PPOTrainerSync):
    """``PPOTrainerSync`` whose training prompts come from a ``QueryPool`` through a selection strategy."""

    def __init__(self, config):
        self.heapa = parse_settings(OmegaConf.to_container(config.heapa, resolve=True))
        self.outcomes = StepOutcomes(lambda o: self.batch_sampler.on_feedback(o, self.global_steps))
        self.lineage: LineageRefresher | None = None
        self.augment: AugmentationStage | None = None
        self.probe: PromptEntropyProbe | None = None
        self.rollout_cost = RolloutCost()
        self.ar3po = self._build_ar3po(config)
        self._update_plan: UpdatePlan | None = None  # AR3PO: this step's actor update (step/update_plan.py)
        self._view: StepBatch | None = None  # this step's trajectories, read once (step/batch_view.py)
        self._signal_rows = 0  # rows with a non-zero advantage this step (heapa.update.sequence_mean_over)
        self.watchdog = StepWatchdog(self.heapa.run.watchdog)
        self._saved_step = -1
        super().__init__(config)

    # ------------------------------------------------------------------------------------------- building
    def _build_ar3po(self, config) -> Ar3poStage | None:
        """AR3PO on: its staged agent-loop manager becomes verl's (the runner builds the manager after init)."""
        if not self.heapa.ar3po.enabled:
            return None
        agent = config.actor_rollout_ref.rollout.agent
        fqn = agent.get("agent_loop_manager_class")
        if not fqn:
            with open_dict(config):
                agent.agent_loop_manager_class = AR3PO_MANAGER
        elif not issubclass(load_class_from_fqn(fqn, "AgentLoopManager"), load_class_from_fqn(AR3PO_MANAGER)):
            raise HeapaConfigError(f"heapa.ar3po.enabled=true needs actor_rollout_ref.rollout.agent."
                                   f"agent_loop_manager_class={AR3PO_MANAGER} (or a subclass), got {fqn}")
        with_log_probs = bool(config.actor_rollout_ref.rollout.get("calculate_log_probs", False))
        if self.heapa.ar3po.reuse.enabled and self.heapa.ar3po.reuse.correction == "tis" and not with_log_probs:
            raise HeapaConfigError("heapa.ar3po.reuse.correction=tis needs the behaviour log-probs of banked "
                                   "responses: set actor_rollout_ref.rollout.calculate_log_probs=true (the ar3po "
                                   "presets do), or heapa.ar3po.reuse.correction=none")
        return Ar3poStage(self.heapa.ar3po, self.heapa.feedback.acc_field, with_log_probs)

    def _build_strategy(self):
        """The selection strategy with ``heapa.seed`` and, for HIVE, the actor's prompt-entropy pass wired in."""
        h = self.heapa
        if h.selection_name == "hive" and h.hive.verify:
            rollout = self.config.actor_rollout_ref.rollout
            dynamic = bool(rollout.get("log_prob_use_dynamic_bsz", False))
            self.probe = PromptEntropyProbe(
                self.train_dataset, self.tokenizer, lambda: self.actor_rollout_wg, self._actor_dp_size,
                temperature=rollout.temperature, prompt_length=rollout.prompt_length, tail_tokens=h.hive.tail_tokens,
                micro_batch_size=None if dynamic else rollout.get("log_prob_micro_batch_size_per_gpu"),
                max_tokens=h.hive.probe_max_tokens,  # its micro-batches run beside awake vLLM (stages/hive_verify.py)
                max_token_len_per_gpu=rollout.get("log_prob_max_token_len_per_gpu") if dynamic else None,
                remove_padding=bool(self.config.actor_rollout_ref.model.get("use_remove_padding", False)),
                chat_template_kwargs=dict(self.config.data.get("apply_chat_template_kwargs") or {}))
        return build_strategy(h.selection_name, **strategy_kwargs(h.selection_name, h.selection_kwargs, h.seed,
                                                                  prompt_entropy=self.probe))

    def _actor_dp_size(self) -> int:
        return actor_dp_size(self.actor_rollout_wg)

    def _build_replay_buffer(self):
        # verl's documented hook for a custom buffer; verl then passes it no group-filtering arguments, so they
        # travel in sampler_kwargs, computed by verl's own rule (verl_contract.replay_buffer_filter_kwargs).
        sampler = self.config.trainer.v1.sampler
        custom = sampler.get("custom_sampler") or {}
        ours = not (custom.get("path") and custom.get("name")) and self.trainer_mode == "sync"
        if ours:
            with open_dict(self.config):
                sampler.custom_sampler = {"path": FEEDBACK_BUFFER_PATH, "name": FeedbackReplayBuffer.__name__}
                sampler.sampler_kwargs = {**(sampler.get("sampler_kwargs") or {}),
                                          **replay_buffer_filter_kwargs(self)}
        buffer = super()._build_replay_buffer()
        if self.heapa.poll_interval_s is not None and hasattr(buffer, "poll_interval"):
            buffer.poll_interval = self.heapa.poll_interval_s  # verl polls finished rollouts every 2 s
        if isinstance(buffer, FeedbackReplayBuffer):  # the report of evicted groups
            buffer.on_evicted = self.outcomes.evicted
            buffer.on_discarded = self.rollout_cost.discarded
            buffer.acc_field = self.heapa.feedback.acc_field
            buffer.threshold = self.heapa.feedback.pass_threshold
            buffer.reward_infos = self.outcomes.reward_infos
        else:
            logger.warning("custom replay buffer %s: groups it evicts (e.g. DAPO-filtered) are not fed back to the "
                           "pool", type(buffer).__name__)
        return buffer

    def _init_dataloader(self):
        data = self.config.data
        h = self.heapa
        self.train_dataset = PoolDataset.from_config(
            data.train_files, self.tokenizer, pool_config=h.pool, row_format=h.rows, seed=h.seed,
            max_samples=data.get("train_max_samples", -1), data_config=data,
        )
        self.val_dataset = create_rl_dataset(data.val_files, data, self.tokenizer, self.processor, is_train=False,
                                             max_samples=data.get("val_max_samples", -1))
        strategy = self._build_strategy()
        self.batch_sampler = PoolBatchSampler(self.train_dataset, strategy, data.train_batch_size,
                                              gen_batch_size(self.config, self.trainer_mode))
        self.train_dataloader = make_train_dataloader(self.train_dataset, self.batch_sampler)
        self.train_dataloader_it = None
        self.val_dataloader = StatefulDataLoader(
            dataset=self.val_dataset, batch_size=data.val_batch_size or len(self.val_dataset), num_workers=0,
            shuffle=data.get("validation_shuffle", True), drop_last=False, collate_fn=collate_fn,
        )
        if h.lineage.enabled:
            self.lineage = LineageRefresher(self.train_dataset.pool, h.lineage)
        if h.augmentation.enabled:
            self.augment = AugmentationStage(h.augmentation, h.teacher, self.tokenizer, self.train_dataset.pool,
                                             self.lineage, seed=h.seed, instruction_suffix=h.rows.instruction_suffix,
                                             suffix_separator=h.rows.suffix_separator)
        if self.ar3po is not None and self.ar3po.bank.capacity is None:  # reuse.capacity: 0 = one entry per seed
            self.ar3po.size_bank(len(self.train_dataset), int(data.max_response_length))
        set_training_horizon(self, len(self.train_dataset))  # verl's rule for a fixed dataset (verl_contract.py)
        # A large pool is millions of long-lived objects: freezing them keeps Python's full GC passes (0.6 s at
        # 10^6 records, docs/pool.md) off the per-step path.
        gc.collect()
        gc.freeze()
        logger.info("heapa: pool of %d seeds, strategy %s, %d steps", len(self.train_dataset), h.selection_name,
                    self.total_training_steps)

    # ------------------------------------------------------------------------------------------- the step
    def step(self, metrics: dict, timing_raw: dict):
        maybe_hang_for_test(self.global_steps, self.watchdog)
        sampler = self.batch_sampler
        sampler.set_step(self.global_steps)
        if self.augment is not None:  # servers are awake now: the policy writes new problems during the rollout
            self.watchdog.stage("augment_fire")
            with marked_timer("heapa_augment_fire", timing_raw):
                self.augment.fire(self.outcomes.last_pass_rates, self.get_llm_client())
        self.watchdog.stage("select+rollout+reward")
        batch = super().step(metrics, timing_raw)  # select (lazily, in the loader) -> rollout -> reward -> update
        self.watchdog.stage("feedback")
        hive = self.probe.metrics() if self.probe is not None else {}  # its forward pass ran inside the selection
        timing_raw["heapa_select"] = sampler.select_seconds - hive.get("hive/verify_s", 0.0)
        view, self._view = self._view, None
        with marked_timer("heapa_feedback", timing_raw):
            self.outcomes.trained(view, self.heapa.feedback.pass_threshold)  # generated rows, by record id
            if self.heapa.selection_name == "hive":
                hive.update(self._observe_response_entropy(view))
            sampler.release_unused()  # handed out but never rolled out: back to the pool
        children: list[int] = []
        with marked_timer("heapa_integrate", timing_raw):
            if self.augment is not None:
                children = self.augment.integrate(self.global_steps)
                metrics.update(self.augment.metrics())
        with marked_timer("heapa_refresh", timing_raw):
            if self.lineage is not None:
                metrics.update(self.lineage.step(self.global_steps))
        metrics.update(self.train_dataset.pool.metrics())
        metrics.update(sampler.metrics())
        self._trace(self.outcomes.records(), children)
        metrics.update(self.outcomes.close())
        metrics.update(hive)
        metrics.update(self.rollout_cost.close_step(batch.tags))
        pool_s = timing_raw["heapa_select"] + timing_raw["heapa_feedback"] + timing_raw["heapa_refresh"]
        aug_s = (timing_raw.get("heapa_augment_fire", 0.0) + timing_raw.get("heapa_augment_collect", 0.0)
                 + timing_raw["heapa_integrate"])
        metrics["heapa/pool_overhead_s"] = pool_s
        metrics.update(run_metrics())
        metrics.update(self.watchdog.metrics())
        metrics["heapa/augment_overhead_s"] = aug_s
        return batch

    def _observe_response_entropy(self, view: StepBatch) -> dict[str, float]:
        """HIVE's history entropy: each record's mean response-token entropy this step (verl's old_log_prob pass),
        handed to the strategy when it takes it (``observe_response_entropy``)."""
        ent = response_entropy([t for t in view.generated() if t.trained], view.partition_id)
        strategy = self.batch_sampler.strategy
        if ent and hasattr(strategy, "observe_response_entropy"):
            strategy.observe_response_entropy(ent, self.global_steps)
        values = list(ent.values())
        return {"hive/response_entropy_mean": sum(values) / len(values)} if values else {}

    def _trace(self, trained: list[int], children: list[int]) -> None:
        if not self.heapa.trace_file:
            return
        row = {"step": self.global_steps, "trained": trained, "children": children}
        if self.ar3po is not None:  # per record: [responses generated, correct ones]; records that got a reuse
            row["ar3po"] = {str(k): v for k, v in self.ar3po.counts.items()}
            row["reused"] = sorted(self.ar3po.reused_records)
        with open(self.heapa.trace_file, "a", encoding="utf-8") as f:
            f.write(json.dumps(row) + "\n")

    # ------------------------------------------------------------------------------------------- AR3PO hooks
    # verl's _step_once: sample -> balance -> old_log_prob -> ref -> advantage -> update. Reuse joins before the
    # balance (reused rows are balanced and get old log-probs from the current actor like any other row); with
    # AR3PO's uneven groups the update keeps GRPO's update count and per-row loss scale (step/update_plan.py).
    def _balance_batch(self, batch, metrics, logging_prefix="global_seqlen", keep_minibatch=False):
        # The first hook that sees the sampled batch: the step's trajectories are read here, once (step/batch_view.py).
        self.watchdog.stage("balance")
        self._view = StepBatch.read(batch.keys, batch.tags, batch.partition_id, self.heapa.feedback.acc_field)
        batch.reorder(self._view.stable_order(batch.keys))  # not the order rollouts finished in: same run, same update
        if self.ar3po is None:
            return super()._balance_batch(batch, metrics, logging_prefix=logging_prefix,
                                          keep_minibatch=keep_minibatch)
        with marked_timer("ar3po_reuse", self.timing_raw):
            batch, ar3po_metrics = self.ar3po.on_batch(batch, self._view, self.global_steps)
        metrics.update(ar3po_metrics)
        self.rollout_cost.discarded(*self.ar3po.take_discarded())
        trained = [t for t in self._view.rows if t.trained]
        dp = self._actor_dp_size()
        self._update_plan = plan_update(len(trained), len({t.uid for t in trained}),
                                        Batching.from_config(self.config, dp))
        batch = super()._balance_batch(batch, metrics, logging_prefix=logging_prefix, keep_minibatch=keep_minibatch)
        batch.reorder(spread_padding([t.get("is_padding", False) for t in batch.tags], dp, self._update_plan.updates))
        return batch

    def _get_required_batch_multiple(self, dp_size: int) -> int:
        if self._update_plan is None:
            return super()._get_required_batch_multiple(dp_size)
        return self._update_plan.multiple

    def _compute_advantage(self, batch, metrics):
        self.watchdog.stage("old_log_prob+ref+advantage")
        batch = super()._compute_advantage(batch, metrics)
        if self.ar3po is not None:
            metrics.update(self.ar3po.after_advantage(batch))
        with marked_timer("heapa_diagnostics", self.timing_raw):  # what the update gets, every method
            diag = advantage_diagnostics(read_advantages(batch.keys, batch.tags, batch.partition_id),
                                         self.config.actor_rollout_ref.actor.loss_agg_mode)
            metrics.update(diag)
            self._signal_rows = int(diag.get("diag/signal_rows", 0))
        return batch

    def _update_actor(self, batch, metrics):
        self.watchdog.stage("update_actor")
        plan, self._update_plan = self._update_plan, None
        if self.ar3po is not None:
            metrics.update(self.ar3po.in_update(batch))
        overrides = plan.extra_info() if plan else {}
        if self.heapa.update.sequence_mean_over == "signal_rows":
            actor = self.config.actor_rollout_ref.actor
            updates = plan.updates if plan else max(1, len(batch.keys) // (
                actor.ppo_mini_batch_size * self.config.actor_rollout_ref.rollout.n))
            overrides["global_batch_size"] = max(1, self._signal_rows) / updates
            metrics["update/global_batch_size"] = overrides["global_batch_size"]
        workers = self.actor_rollout_wg
        self.actor_rollout_wg = tap = ActorUpdateTap(workers, overrides)
        try:
            batch = super()._update_actor(batch, metrics)
        finally:
            self.actor_rollout_wg = workers
        metrics.update(tap.metrics())
        if plan is not None:
            metrics.update(plan.metrics())
        return batch

    def on_sample_end(self):
        # The rollout is done and verl is about to put the servers to sleep: join the augmentation requests first.
        self.watchdog.stage("augment_collect+sleep_replicas")
        if self.augment is not None:
            with marked_timer("heapa_augment_collect", self.timing_raw):
                self.augment.collect()
        super().on_sample_end()

    # ------------------------------------------------------------------------------------------- run control
    def on_train_begin(self):
        super().on_train_begin()
        self.watchdog.start()

    def on_train_end(self):
        self.watchdog.stop()
        super().on_train_end()

    def on_step_begin(self):
        self.watchdog.step_begin(self.global_steps)
        super().on_step_begin()

    def on_step_end(self):
        # After verl's save_freq save: a preemption request (ops/preemption.py) gets a complete checkpoint of this
        # step and ends training here; the driver then exits with the requeue code.
        if self._preempt_requested():
            return
        self.watchdog.stage("weight_sync")
        super().on_step_end()

    def _validate(self, *args, **kwargs):
        self.watchdog.stage("validation")
        return super()._validate(*args, **kwargs)
