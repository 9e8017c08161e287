"""The HeaPA trainer: verl's V1 PPO trainer with the prompt pool in charge of what is trained.

The step below is one mixin (``HeapaSteps``) over each of verl's V1 trainers: ``PPOTrainerSync``
(``trainer.v1.trainer_mode=sync``, the default), ``PPOTrainerColocateAsync`` (``colocate_async``: the next batch
generates while this one trains) or ``PPOTrainerSeparateAsync`` (``separate_async``: the rollout runs on replicas of
its own, weights sent after every step through a checkpoint engine); ``trainer_class`` picks, ``trainer_mode.py``
checks the settings, ``docs/async.md`` says what differs.

One step, as data flows (the PPO update itself is verl's, unchanged). Its state lives in one ``StepContext``
(``step/context.py``), opened in ``on_step_begin`` and closed at the end of ``step``:

1. **augment (fire)**  while the rollout servers are awake, the policy is asked for new problems close to the
                last step's parents (``stages/augmentation.py``); the step does not wait for the teacher.
2. **select**   the strategy picks ``train_batch_size`` record ids (boundary sampling for HeaPA); the batch
                sampler hands them to the dataloader; rows carry ``extra_info.index = record id``.
   HIVE verifies its candidates here: the actor's prompt entropy for each (``stages/hive_verify.py``).
   ``heapa.allocation``: the selection's ``k * n`` responses are spread over its prompts from the pool's
                estimates (``verl_ext.allocation.Allocator``), each row's ``__rollout_n__``; the uneven groups get
                the update plan below.
3. **rollout + reward**  verl's agent loop and the ``heapa`` reward manager (``acc`` per trajectory); with AR3PO the
                agent loop rolls each prompt out in stages (``verl_ext.adapters.ar3po_agent_loop``). The
                augmentation requests are joined and handed to the teacher before verl sleeps the servers.
   **view**     the sampled batch's trajectories are read once (record id, ``acc``, generated / reused / padding:
                ``step/batch_view.py``); AR3PO, the feedback and HIVE's response entropy all read that view.
   **reuse**    AR3PO: all-wrong groups get a banked correct response before verl balances the batch, so the actor
                computes its old log-probs like any other row (``stages/ar3po.py``); with uneven groups the actor
                update keeps GRPO's update count and per-row loss scale (``step/update_plan.py``).
   **down-sample**  Reinforce-Ada: each group's rounds are cut back to n before verl balances the batch; after
                verl's advantages the kept rows are re-centred on every response of their prompt
                (``stages/reinforce_ada.py``).
4. **feedback** the generated trajectories' ``acc``, *by record id*, updates each record's estimator; trained
                records are archived (groups verl evicts, e.g. DAPO-filtered ones, are reported by the replay
                buffer as they are evicted: ``step/replay_buffer.py``).
5. **integrate** validated children enter the pool with a parent-derived prior and a lineage edge.
6. **refresh / reinsert**  lineage re-estimation on its cadence; controlled reinsertion when the pool runs short.
7. **log**      ``pool/*``, ``select/*``, ``feedback/*``, ``augment/*``, ``teacher/*``, ``lineage/*``, ``rollout/*``
                (what the rollout cost, for every method), ``update/*``, ``run/*`` and ``hive/*`` scalars.

verl calls the hooks below from its ``_step_once`` (sample -> balance -> old_log_prob -> ref -> advantage ->
update); each hands over to a named stage. Around every step: a stuck-step watchdog (``ops/watchdog.py``) and
preemption at the step's end (``ops/trainer_checkpoints.py``, ``ops/preemption.py``).
"""

from __future__ import annotations

import json
import logging

import torch
from omegaconf import OmegaConf

from verl.trainer.ppo.v1.trainer_colocate_async import PPOTrainerColocateAsync
from verl.trainer.ppo.v1.trainer_separate_async import PPOTrainerSeparateAsync
from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync
from verl.utils.debug import marked_timer

from recipe.heapa.ops.run_files import MetricsHistory
from recipe.heapa.ops.supervise import run_metrics
from recipe.heapa.ops.trainer_checkpoints import RecipeCheckpoints
from recipe.heapa.ops.watchdog import StepWatchdog
from recipe.heapa.settings import HeapaConfigError, parse_settings
from recipe.heapa.trainer_setup import RecipeSetup
from recipe.heapa.stages.hive_verify import response_entropy
from recipe.heapa.step.actor_updates import ActorWorkers
from recipe.heapa.step.advantage_diagnostics import advantage_diagnostics, read_advantages
from recipe.heapa.step.batch_view import StepBatch
from recipe.heapa.step.context import StepContext
from recipe.heapa.step.in_flight import InFlight
from recipe.heapa.step.outcomes import StepOutcomes
from recipe.heapa.step.replay_buffer import Eviction
from recipe.heapa.step.rollout_cost import RolloutCost
from recipe.heapa.step.update_plan import Batching, actor_overrides, plan_update, spread_padding
from recipe.heapa.verl_contract import actor_dp_size

logger = logging.getLogger(__name__)


class HeapaSteps(RecipeSetup, RecipeCheckpoints):
    """A verl V1 trainer whose training prompts come from a ``QueryPool`` through a selection strategy (a mixin:
    the concrete trainers below put it in front of verl's class, whose ``trainer_mode`` branches still run)."""

    def __init__(self, config):
        self.heapa = parse_settings(OmegaConf.to_container(config.heapa, resolve=True))
        self.ctx: StepContext | None = None  # the open step
        self.last_pass_rates: dict[int, float] = {}  # the last step's measured records: augmentation's parents
        self.lineage = self.augment = self.probe = None  # built with the pool (trainer_setup.py)
        self.rollout_cost = RolloutCost()
        self.in_flight = InFlight()  # groups handed to the rollout and not yet heard back (step/in_flight.py)
        self.ar3po = self._build_ar3po(config)
        self.reinforce_ada = self._build_reinforce_ada(config)
        self.watchdog = StepWatchdog(self.heapa.run.watchdog, report_dir=config.trainer.default_local_dir)
        self.metrics_history = MetricsHistory.read(config)  # before verl's Tracking truncates the file
        self._saved_step = -1
        super().__init__(config)

    @property
    def actor_rollout_wg(self) -> ActorWorkers | None:
        return self.__dict__.get("_actor_workers")

    @actor_rollout_wg.setter
    def actor_rollout_wg(self, workers) -> None:
        # verl builds the worker group once (_setup); the trainer holds it with the step's update settings
        # (step/actor_updates.py): installed here, never swapped.
        self._actor_workers = workers if workers is None or isinstance(workers, ActorWorkers) else ActorWorkers(workers)

    def _actor_dp_size(self) -> int:
        return actor_dp_size(self.actor_rollout_wg)

    # ------------------------------------------------------------------------------------------- the step
    def on_step_begin(self):
        self.watchdog.step_begin(self.global_steps)
        self.batch_sampler.set_step(self.global_steps)
        self.ctx = StepContext(self.global_steps, StepOutcomes(self.batch_sampler, self.global_steps))
        super().on_step_begin()

    def step(self, metrics: dict, timing_raw: dict):
        ctx = self.ctx
        self._fire_augmentation(timing_raw)  # 1
        self.watchdog.stage("select+rollout+reward")
        batch = super().step(metrics, timing_raw)  # 2-3: select (in the loader), rollout, reward; the hooks below
        hive = self._close_selection(timing_raw)
        self.watchdog.stage("feedback")
        with marked_timer("heapa_feedback", timing_raw):
            hive.update(self._feed_back(ctx))  # 4
        with marked_timer("heapa_integrate", timing_raw):
            metrics.update(self._integrate(ctx))  # 5
        with marked_timer("heapa_refresh", timing_raw):
            metrics.update(self.lineage.step(ctx.step) if self.lineage is not None else {})  # 6
        metrics.update(self._close_step(ctx, batch, hive, timing_raw))  # 7
        return batch

    def _balance_batch(self, batch, metrics, logging_prefix="global_seqlen", keep_minibatch=False):
        # The first hook that sees the sampled batch: the step's trajectories are read here, once.
        self.watchdog.stage("balance")
        ctx = self.ctx
        ctx.view = StepBatch.read(batch.keys, batch.tags, batch.partition_id, self.heapa.feedback.acc_field)
        batch.reorder(ctx.view.stable_order(batch.keys))  # not the order rollouts finished in: same run, same update
        if self.ar3po is not None:
            batch = self._reuse(ctx, batch, metrics)
        if self.reinforce_ada is not None:
            batch = self._downsample(ctx, batch, metrics)
        if self.batch_sampler.allocator is not None:
            self._plan_allocated(ctx)
        batch = super()._balance_batch(batch, metrics, logging_prefix=logging_prefix, keep_minibatch=keep_minibatch)
        if ctx.update_plan is not None:
            padding = [t.get("is_padding", False) for t in batch.tags]
            batch.reorder(spread_padding(padding, self._actor_dp_size(), ctx.update_plan.updates))
        return batch

    def _fetch_one_gen_batch(self):
        batch = super()._fetch_one_gen_batch()
        self.in_flight.handed_out(list(batch["uid"]), list(batch["index"]), self.batch_sampler.step)
        # heapa.allocation: each prompt's responses, as the row field verl's agent loop reads for its group size
        if self.batch_sampler.allocator is not None:
            sizes = self.batch_sampler.rollout_n(list(batch["index"]))
            batch["__rollout_n__"] = torch.tensor(sizes, dtype=torch.int64)
        # heapa.ar3po.extend=measured: which prompts the pool had measured, as a row field the staged loop reads
        if self.ar3po is not None and self.ar3po.config.extend == "measured":
            pool = self.batch_sampler.pool
            flags = [pool.measured_value(int(rid)) is not None for rid in batch["index"]]
            self.ar3po.note_measured(rid for rid, flag in zip(batch["index"], flags) if flag)
            batch["__heapa_measured__"] = torch.tensor(flags, dtype=torch.int64)
        return batch

    def _get_required_batch_multiple(self, dp_size: int) -> int:
        plan = self.ctx.update_plan if self.ctx is not None else None
        return plan.multiple if plan is not None else super()._get_required_batch_multiple(dp_size)

    def _compute_advantage(self, batch, metrics):
        self.watchdog.stage("old_log_prob+ref+advantage")
        batch = super()._compute_advantage(batch, metrics)
        if self.ctx.reuse is not None:
            metrics.update(self.ar3po.after_advantage(batch, self.ctx.reuse))
        if self.ctx.rounds is not None:
            metrics.update(self.reinforce_ada.after_advantage(batch, self.ctx.rounds))
        with marked_timer("heapa_diagnostics", self.timing_raw):  # what the update gets, every method
            diag = advantage_diagnostics(read_advantages(batch.keys, batch.tags, batch.partition_id),
                                         self.config.actor_rollout_ref.actor.loss_agg_mode)
        metrics.update(diag)
        self.ctx.signal_rows = int(diag.get("diag/signal_rows", 0))
        return batch

    def _update_actor(self, batch, metrics):
        self.watchdog.stage("update_actor")
        ctx = self.ctx
        if ctx.reuse is not None:
            metrics.update(self.ar3po.in_update(batch, ctx.reuse))
        overrides = self._actor_overrides(ctx, len(batch.keys), metrics)
        with self.actor_rollout_wg.applying(overrides) as report:
            batch = super()._update_actor(batch, metrics)
        metrics.update(report.metrics())
        if ctx.update_plan is not None:
            metrics.update(ctx.update_plan.metrics())
        return batch

    def on_sample_end(self):
        # The rollout is done and verl is about to put the servers to sleep: join the augmentation requests first.
        self.watchdog.stage("augment_collect+sleep_replicas")
        if self.augment is not None:
            with marked_timer("heapa_augment_collect", self.timing_raw):
                self.augment.collect()
        super().on_sample_end()

    # ------------------------------------------------------------------------------------------- its stages
    def _fire_augmentation(self, timing_raw: dict) -> None:
        """1. The servers are awake: the policy writes new problems during the rollout."""
        if self.augment is not None:
            self.watchdog.stage("augment_fire")
            with marked_timer("heapa_augment_fire", timing_raw):
                self.augment.fire(self.last_pass_rates, self.get_llm_client())

    def _close_selection(self, timing_raw: dict) -> dict[str, float]:
        """2. Selection ran inside verl's loader: its time (less HIVE's forward pass) and HIVE's probe scalars."""
        hive = self.probe.close_step() if self.probe is not None else {}
        timing_raw["heapa_select"] = self.batch_sampler.select_seconds - hive.get("hive/verify_s", 0.0)
        return hive

    def _reuse(self, ctx: StepContext, batch, metrics: dict):
        """3. AR3PO: banked successes join all-wrong groups; the actor update is planned for the uneven groups."""
        with marked_timer("ar3po_reuse", self.timing_raw):
            batch, reuse_metrics, ctx.reuse = self.ar3po.on_batch(batch, ctx.view, ctx.step)
        metrics.update(reuse_metrics)
        ctx.discard(*ctx.reuse.discarded)
        trained = [t for t in ctx.view.rows if t.trained]
        ctx.update_plan = plan_update(len(trained), len({t.uid for t in trained}),
                                      Batching.from_config(self.config, self._actor_dp_size()))
        return batch

    def _plan_allocated(self, ctx: StepContext) -> None:
        """3. ``heapa.allocation``: the groups have the allocated sizes; the actor update is planned for them."""
        ctx.update_plan = plan_update(len(ctx.view.rows), len({t.uid for t in ctx.view.rows}),
                                      Batching.from_config(self.config, self._actor_dp_size()))
        ctx.allocated = ctx.view.outcomes(self.heapa.feedback.pass_threshold)

    def _downsample(self, ctx: StepContext, batch, metrics: dict):
        """3. Reinforce-Ada: each group's rounds cut back to n (the dropped responses still feed the pool)."""
        with marked_timer("reinforce_ada_downsample", self.timing_raw):
            batch, rounds_metrics, ctx.rounds = self.reinforce_ada.on_batch(batch, ctx.view)
        metrics.update(rounds_metrics)
        ctx.discard(*ctx.rounds.discarded)
        return batch

    def _actor_overrides(self, ctx: StepContext, rows: int, metrics: dict) -> dict:
        """3. What the actor update gets instead of verl's mini-batch size and loss divisor (update_plan.py)."""
        actor, n = self.config.actor_rollout_ref.actor, self.config.actor_rollout_ref.rollout.n
        mode = self.heapa.update.sequence_mean_over
        overrides = actor_overrides(ctx.update_plan, rows, ctx.signal_rows, mode, actor.ppo_mini_batch_size * n)
        if mode == "signal_rows":
            metrics["update/global_batch_size"] = overrides["global_batch_size"]
        return overrides

    def _on_eviction(self, eviction: Eviction) -> None:
        """4. The replay buffer's report of groups it evicts before training, into the open step."""
        if self.ctx is None:
            raise RuntimeError("verl evicted training groups outside a step: their outcomes have no step to join")
        self.ctx.discard(*eviction.discarded)
        heard = self.in_flight.heard(eviction.uids, self.ctx.step)
        if self.trainer_mode != "sync":
            # no reward (a failed rollout): nothing to feed back, and no step end releases it in these modes
            unmeasured = [rid for rid in heard if rid not in eviction.outcomes]
            if unmeasured:
                self.batch_sampler.release_unused(unmeasured)
        self.ctx.outcomes.reward_infos.extend(eviction.reward_infos)
        if eviction.outcomes:
            self.ctx.outcomes.evicted(eviction.outcomes, heard)

    def _feed_back(self, ctx: StepContext) -> dict[str, float]:
        """4. The trained groups' outcomes, by record id; HIVE's response entropy; unused selections released."""
        view = ctx.take_view()
        selected_at = self.in_flight.heard((t.uid for t in view.generated()), ctx.step)
        ctx.outcomes.trained(view, self.heapa.feedback.pass_threshold, selected_at)  # generated rows, by record id
        self.last_pass_rates = ctx.outcomes.pass_rates()
        hive = self._observe_response_entropy(view) if self.heapa.selection_name == "hive" else {}
        if self.trainer_mode == "sync":
            self.batch_sampler.release_unused()  # handed out but never rolled out: back to the pool
            self.in_flight.clear()
        # asynchronous modes: what is still handed out is generating for a later step (verl's warm-up batches and
        # the batch each step adds), and stays in flight in the pool until it is trained or evicted
        return hive

    def _observe_response_entropy(self, view: StepBatch) -> dict[str, float]:
        """HIVE's history entropy: each record's mean response-token entropy this step (verl's old_log_prob pass),
        handed to the strategy when it takes it (``observe_response_entropy``)."""
        ent = response_entropy([t for t in view.generated() if t.trained], view.partition_id)
        strategy = self.batch_sampler.strategy
        if ent and hasattr(strategy, "observe_response_entropy"):
            strategy.observe_response_entropy(ent, self.global_steps)
        values = list(ent.values())
        return {"hive/response_entropy_mean": sum(values) / len(values)} if values else {}

    def _integrate(self, ctx: StepContext) -> dict[str, float]:
        """5. Validated children enter the pool."""
        if self.augment is None:
            return {}
        ctx.children = self.augment.integrate(ctx.step)
        return self.augment.metrics()

    def _close_step(self, ctx: StepContext, batch, hive: dict, timing_raw: dict) -> dict[str, float]:
        """7. The step's scalars and trace line; the context closes (the next step opens a new one)."""
        ctx.close()
        self.ctx = None
        metrics = {**self.train_dataset.pool.metrics(), **self.batch_sampler.metrics()}
        self._trace(ctx)
        metrics.update(ctx.outcomes.metrics())
        metrics.update(hive)
        metrics.update(self.rollout_cost.close_step(batch.tags, ctx.discarded))
        metrics.update(self.in_flight.metrics())
        metrics["heapa/pool_overhead_s"] = (timing_raw["heapa_select"] + timing_raw["heapa_feedback"]
                                            + timing_raw["heapa_refresh"])
        metrics["heapa/augment_overhead_s"] = (timing_raw.get("heapa_augment_fire", 0.0) + timing_raw["heapa_integrate"]
                                               + timing_raw.get("heapa_augment_collect", 0.0))
        metrics.update(run_metrics())
        metrics.update(self.watchdog.metrics())
        return metrics

    def _trace(self, ctx: StepContext) -> None:
        if not self.heapa.trace_file:
            return
        row = {"step": ctx.step, "trained": ctx.outcomes.records(), "children": ctx.children,
               "flow": list(self.in_flight.flow)}  # groups out [record, 1] and back [record, -1], in order
        if ctx.reuse is not None:  # per record: [responses generated, correct ones]; records that got a reuse
            row["ar3po"] = {str(k): v for k, v in ctx.reuse.counts.items()}
            row["reused"] = sorted(ctx.reuse.reused_records)
        if ctx.rounds is not None:  # per record: [generated, correct, kept, kept correct]
            row["rounds"] = {str(k): v for k, v in ctx.rounds.counts.items()}
        if ctx.allocated is not None:  # per record: [correct, responses allocated]
            row["allocated"] = {str(k): list(v) for k, v in ctx.allocated.items()}
        with open(self.heapa.trace_file, "a", encoding="utf-8") as f:
            f.write(json.dumps(row) + "\n")

    # ------------------------------------------------------------------------------------------- run control
    def on_train_begin(self):
        self.batch_sampler.set_step(self.global_steps)  # the asynchronous trainers select warm-up batches here
        super().on_train_begin()
        self.metrics_history.replay(self.logger)  # verl's Tracking exists now; nothing logged yet without validation
        self.watchdog.start()

    def on_validate_begin(self):
        self.metrics_history.replay(self.logger)  # before verl logs the validation before training
        super().on_validate_begin()

    def on_train_end(self):
        self.watchdog.stop()
        super().on_train_end()

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


class HeapaTrainer(HeapaSteps, PPOTrainerSync):
    """``trainer.v1.trainer_mode=sync``: each step rolls out the batch it selected, then trains on it."""


class HeapaColocateAsyncTrainer(HeapaSteps, PPOTrainerColocateAsync):
    """``trainer.v1.trainer_mode=colocate_async``: verl's colocated asynchronous trainer (the rollout generates the
    next batches while this one trains; a group trains at the step after its selection, or later)."""


class HeapaSeparateAsyncTrainer(HeapaSteps, PPOTrainerSeparateAsync):
    """``trainer.v1.trainer_mode=separate_async``: verl's trainer with a rollout pool of its own (standalone
    replicas generate the next batches while this one trains; the weights go to them after every step)."""


TRAINERS = {"sync": HeapaTrainer, "colocate_async": HeapaColocateAsyncTrainer,
            "separate_async": HeapaSeparateAsyncTrainer}


def trainer_class(trainer_mode: str) -> type[HeapaSteps]:
    """The recipe's trainer for ``trainer.v1.trainer_mode`` (``trainer_mode.check_trainer_mode`` checks first)."""
    try:
        return TRAINERS[trainer_mode]
    except KeyError:
        raise HeapaConfigError(f"trainer.v1.trainer_mode={trainer_mode}: the heapa recipe runs "
                               f"{' or '.join(TRAINERS)}") from None
