"""What the HeaPA trainer builds before its first step: AR3PO's and Reinforce-Ada's stages (with the staged
agent loop they need), the pool as verl's training dataset, the selection strategy behind the batch sampler, the
replay buffer that reports evictions, and the stages the pool's settings turn on (lineage, augmentation, the AR3PO
bank's size). A mixin of ``HeapaSteps`` (``trainer.py`` holds the step).
"""

from __future__ import annotations

import gc
import logging

from omegaconf import open_dict
from torchdata.stateful_dataloader import StatefulDataLoader

from verl.trainer.ppo.utils import create_rl_dataset
from verl.utils.import_utils import load_class_from_fqn
from verl.utils.dataset.rl_dataset import collate_fn
from verl_ext.adapters.ar3po_agent_loop import MANAGER_FQN as AR3PO_MANAGER
from verl_ext.adapters.dataset import PoolDataset
from verl_ext.adapters.sampler import PoolBatchSampler, make_train_dataloader
from verl_ext.allocation import Allocator
from verl_ext.pool.lineage.refresh import LineageRefresher
from verl_ext.selection import build_strategy

from recipe.heapa.settings import HeapaConfigError, strategy_kwargs
from recipe.heapa.stages.ar3po import Ar3poStage
from recipe.heapa.stages.augmentation import AugmentationStage
from recipe.heapa.stages.hive_verify import PromptEntropyProbe
from recipe.heapa.stages.reinforce_ada import ReinforceAdaStage
from recipe.heapa.step.replay_buffer import PATH as FEEDBACK_BUFFER_PATH
from recipe.heapa.step.replay_buffer import FeedbackReplayBuffer, FeedbackReplayBufferAsync, ReportsEvictions
from recipe.heapa.verl_contract import gen_batch_size, record_gen_batch_size, replay_buffer_filter_kwargs, \
    set_training_horizon

logger = logging.getLogger(__name__)


class RecipeSetup:
    """Needs the trainer's ``config``, ``heapa`` settings, ``tokenizer``, ``trainer_mode`` and ``ar3po`` stage."""

    @staticmethod
    def _install_staged_rollout(config, key: str) -> None:
        """The staged agent-loop manager becomes verl's (the runner builds the manager after init)."""
        agent = config.actor_rollout_ref.rollout.agent
        fqn = agent.get("agent_loop_manager_class")
        if not fqn:
            with open_dict(config):
                agent.agent_loop_manager_class = AR3PO_MANAGER
        elif not issubclass(load_class_from_fqn(fqn, "AgentLoopManager"), load_class_from_fqn(AR3PO_MANAGER)):
            raise HeapaConfigError(f"{key}=true needs actor_rollout_ref.rollout.agent."
                                   f"agent_loop_manager_class={AR3PO_MANAGER} (or a subclass), got {fqn}")

    def _build_reinforce_ada(self, config) -> ReinforceAdaStage | None:
        """Reinforce-Ada on: rounds in the staged agent loop, down-sampling and the full-pool baseline here."""
        if not self.heapa.reinforce_ada.enabled:
            return None
        if config.algorithm.adv_estimator not in ("grpo", "grpo_vectorized"):
            raise HeapaConfigError("heapa.reinforce_ada.global_baseline rewrites GRPO's advantages: it needs "
                                   f"algorithm.adv_estimator=grpo, got {config.algorithm.adv_estimator}")
        self._install_staged_rollout(config, "heapa.reinforce_ada.enabled")
        n = int(config.actor_rollout_ref.rollout.n)
        try:
            return ReinforceAdaStage(self.heapa.reinforce_ada, n, self.heapa.feedback.pass_threshold,
                                     bool(config.algorithm.get("norm_adv_by_std_in_grpo", True)))
        except ValueError as exc:
            raise HeapaConfigError(f"heapa.reinforce_ada.round_size / max_per_prompt with actor_rollout_ref.rollout."
                                   f"n={n}: {exc}") from None

    def _build_ar3po(self, config) -> Ar3poStage | None:
        """AR3PO on: its staged agent-loop manager becomes verl's."""
        if not self.heapa.ar3po.enabled:
            return None
        self._install_staged_rollout(config, "heapa.ar3po.enabled")
        with_log_probs = bool(config.actor_rollout_ref.rollout.get("calculate_log_probs", False))
        if self.heapa.ar3po.reuse.enabled and self.heapa.ar3po.reuse.correction == "tis" and not with_log_probs:
            raise HeapaConfigError("heapa.ar3po.reuse.correction=tis needs the behaviour log-probs of banked "
                                   "responses: set actor_rollout_ref.rollout.calculate_log_probs=true (the ar3po "
                                   "presets do), or heapa.ar3po.reuse.correction=none")
        return Ar3poStage(self.heapa.ar3po, self.heapa.feedback.acc_field, with_log_probs)

    def _init_dataloader(self):
        h = self.heapa
        self._build_datasets()
        self._build_loaders()
        self._build_stages()
        set_training_horizon(self, len(self.train_dataset))  # verl's rule for a fixed dataset (verl_contract.py)
        # A large pool is millions of long-lived objects: freezing them keeps Python's full GC passes (0.6 s at
        # 10^6 records, docs/pool.md) off the per-step path.
        gc.collect()
        gc.freeze()
        logger.info("heapa: pool of %d seeds, strategy %s, %d steps", len(self.train_dataset), h.selection_name,
                    self.total_training_steps)

    def _build_datasets(self) -> None:
        data, h = self.config.data, self.heapa
        self.train_dataset = PoolDataset.from_config(
            data.train_files, self.tokenizer, pool_config=h.pool, row_format=h.rows, seed=h.seed,
            max_samples=data.get("train_max_samples", -1), data_config=data,
        )
        self.val_dataset = create_rl_dataset(data.val_files, data, self.tokenizer, self.processor, is_train=False,
                                             max_samples=data.get("val_max_samples", -1))

    def _build_loaders(self) -> None:
        """The pool's batch sampler behind verl's training loader; verl's validation loader."""
        data = self.config.data
        self.batch_sampler = PoolBatchSampler(self.train_dataset, self._build_strategy(), data.train_batch_size,
                                              gen_batch_size(self.config, self.trainer_mode),
                                              allocator=self._build_allocator())
        record_gen_batch_size(self.config, self.trainer_mode)  # verl's loader leaves this in the config
        self.train_dataloader = make_train_dataloader(self.train_dataset, self.batch_sampler)
        self.train_dataloader_it = None
        self.val_dataloader = StatefulDataLoader(
            dataset=self.val_dataset, batch_size=data.val_batch_size or len(self.val_dataset), num_workers=0,
            shuffle=data.get("validation_shuffle", True), drop_last=False, collate_fn=collate_fn,
        )

    def _build_stages(self) -> None:
        """The stages the settings turn on, around the pool just built."""
        h = self.heapa
        if h.lineage.enabled:
            self.lineage = LineageRefresher(self.train_dataset.pool, h.lineage)
        if h.augmentation.enabled:
            self.augment = AugmentationStage(h.augmentation, h.teacher, self.tokenizer, self.train_dataset.pool,
                                             self.lineage, seed=h.seed, instruction_suffix=h.rows.instruction_suffix,
                                             suffix_separator=h.rows.suffix_separator)
        if self.ar3po is not None and self.ar3po.bank.capacity is None:  # reuse.capacity: 0 = one entry per seed
            self.ar3po.size_bank(len(self.train_dataset), int(self.config.data.max_response_length))

    def _build_allocator(self) -> Allocator | None:
        """``heapa.allocation`` on: each selection's ``k * n`` responses spread from the pool's estimates."""
        if not self.heapa.allocation.enabled:
            return None
        n = int(self.config.actor_rollout_ref.rollout.n)
        try:
            return Allocator(self.heapa.allocation, n)
        except ValueError as exc:
            raise HeapaConfigError(f"heapa.allocation.minimum / maximum with actor_rollout_ref.rollout.n={n}: "
                                   f"{exc}") from None

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
                max_tokens=h.hive.probe_max_tokens,  # its micro-batches run beside awake vLLM (hive_verify.py)
                max_token_len_per_gpu=rollout.get("log_prob_max_token_len_per_gpu") if dynamic else None,
                remove_padding=bool(self.config.actor_rollout_ref.model.get("use_remove_padding", False)),
                chat_template_kwargs=dict(self.config.data.get("apply_chat_template_kwargs") or {}))
        return build_strategy(h.selection_name, **strategy_kwargs(h.selection_name, h.selection_kwargs, h.seed,
                                                                  prompt_entropy=self.probe))

    def _build_replay_buffer(self):
        # verl's documented hook for a custom buffer (trainer.v1.sampler.custom_sampler).
        if self._uses_feedback_buffer():
            self._configure_feedback_buffer()
        buffer = super()._build_replay_buffer()
        if isinstance(buffer, ReportsEvictions):  # the report of evicted groups, into the open step
            buffer.connect(self._on_eviction, self.heapa.feedback.acc_field, self.heapa.feedback.pass_threshold)
        else:
            logger.warning("custom replay buffer %s: groups it evicts (e.g. DAPO-filtered) are not fed back to the "
                           "pool, and heapa.poll_interval_s does not reach it", type(buffer).__name__)
        return buffer

    def _uses_feedback_buffer(self) -> bool:
        custom = self.config.trainer.v1.sampler.get("custom_sampler") or {}
        return not (custom.get("path") and custom.get("name"))

    def _configure_feedback_buffer(self) -> None:
        """verl passes a custom buffer no group-filtering arguments: they travel in ``sampler_kwargs``, computed by
        verl's own rule (``verl_contract.replay_buffer_filter_kwargs``), with the poll interval."""
        sampler = self.config.trainer.v1.sampler
        extra = replay_buffer_filter_kwargs(self)
        if self.heapa.poll_interval_s is not None:
            extra["poll_interval"] = self.heapa.poll_interval_s  # verl polls finished rollouts every 2 s
        with open_dict(self.config):
            buffer = FeedbackReplayBuffer if self.trainer_mode == "sync" else FeedbackReplayBufferAsync
            sampler.custom_sampler = {"path": FEEDBACK_BUFFER_PATH, "name": buffer.__name__}
            sampler.sampler_kwargs = {**(sampler.get("sampler_kwargs") or {}), **extra}
