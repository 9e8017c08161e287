"""The recipe's half of a checkpoint, and preemption: a mixin of ``HeapaTrainer`` (kept apart so the trainer's
step reads in one screen).

verl saves the actor, optimizer, dataloader (with the pool's sampler state) and RNG; ``_save_checkpoint`` adds the
pool file, ``heapa_state.json`` (lineage, teacher queue, AR3PO bank, rollout cost, groups in flight) and, last, the
manifest that marks the folder complete (``ops/checkpoint_manifest.py``). ``_preempt_requested`` serves a scheduler's
stop signal (``ops/preemption.py``) at the end of a step.
"""

from __future__ import annotations

import gc
import json
import logging
import os
import time

from verl.utils.debug import marked_timer

from recipe.heapa.ops.checkpoint_manifest import STATE_FILE, prune, write_manifest
from recipe.heapa.ops.preemption import mark_saved, read_request
from verl_ext.state_schema import check_schema
from verl_ext.checkpoint_layout import checkpoint_root, step_folder

logger = logging.getLogger(__name__)
STATE_VERSION = 2


class RecipeCheckpoints:
    """Needs the trainer's ``config``, ``global_steps``, ``train_dataset``, the recipe's stages and ``watchdog``."""

    def _preempt_requested(self) -> bool:
        request = read_request(self._ckpt_root())
        if request is None or "saved_step" in request:
            return False
        self.watchdog.stage("preemption_checkpoint")
        if self._saved_step != self.global_steps:
            with marked_timer("save_checkpoint", self.timing_raw, color="green"):
                self._save_checkpoint()
        mark_saved(self._ckpt_root(), self.global_steps, final=self.global_steps >= self.total_training_steps)
        logger.warning("preemption (%s): complete checkpoint at step %d; training ends here", request.get("signal"),
                       self.global_steps)
        self.total_training_steps = self.global_steps  # verl's loop ends after this step's metrics are logged
        self.watchdog.stop()
        return True


    def _ckpt_root(self) -> str:
        return checkpoint_root(self.config.trainer.default_local_dir)

    def _step_folder(self) -> str:
        return str(step_folder(self._ckpt_root(), self.global_steps))

    def _save_checkpoint(self):
        # The pool and sampler travel in verl's data.pt (the dataloader's state); the rest is written here,
        # before verl marks the step as the latest checkpoint.
        self.watchdog.stage("checkpoint")
        self._saved_step = self.global_steps
        folder = self._step_folder()
        self._write_recipe_state(folder)
        self.train_dataset.checkpoint_dir = folder  # the pool goes to its own file there, data.pt keeps a reference
        try:
            super()._save_checkpoint()
        finally:
            self.train_dataset.checkpoint_dir = None
        write_manifest(folder)  # complete only now; the next start checks it (checkpoint_manifest.py)
        prune(os.path.dirname(folder), self.config.trainer.get("max_actor_ckpt_to_keep", None))

    def _write_recipe_state(self, folder: str) -> None:
        """``heapa_state.json``: every recipe stage's state, written atomically."""
        os.makedirs(folder, exist_ok=True)
        state = {"schema_version": STATE_VERSION, "lineage": self.lineage.state_dict() if self.lineage else None,
                 "augment": self.augment.state_dict() if self.augment else None,
                 "ar3po": self.ar3po.state_dict() if self.ar3po else None,
                 "rollout_cost": self.rollout_cost.state_dict(), "in_flight": self.in_flight.state_dict(),
                 "last_pass_rates": {str(k): v for k, v in self.last_pass_rates.items()}, "saved_at": time.time()}
        tmp = os.path.join(folder, STATE_FILE + ".tmp")
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(state, f)
        os.replace(tmp, os.path.join(folder, STATE_FILE))

    def _load_checkpoint(self):
        super()._load_checkpoint()
        if self.global_steps == 0:
            return
        folder = self._step_folder()
        if self.config.trainer.resume_mode == "resume_path":  # the folder verl just loaded the actor from
            folder = os.path.abspath(self.config.trainer.resume_from_path)
        self._restore_pool(folder)
        self._load_recipe_state(os.path.join(folder, STATE_FILE))
        gc.collect()
        gc.freeze()  # the restored pool replaced the frozen one: keep it out of full GC passes too
        logger.info("heapa: resumed pool of %d records at step %d", len(self.train_dataset), self.global_steps)

    def _restore_pool(self, folder: str) -> None:
        # torchdata restores the dataset/sampler only when an iterator is created: do it before anything reads
        # the pool, so the restored pool is the one every later stage sees. The pool file is read from `folder`.
        self.train_dataset.checkpoint_dir = folder
        try:
            self.train_dataloader_it = iter(self.train_dataloader)
        finally:
            self.train_dataset.checkpoint_dir = None

    def _load_recipe_state(self, path: str) -> None:
        if not os.path.exists(path):
            raise FileNotFoundError(f"{path} is missing: the checkpoint was not written by the heapa recipe")
        with open(path, encoding="utf-8") as f:
            state = json.load(f)
        check_schema(state, path, 1, STATE_VERSION)  # version 1: before AR3PO and rollout cost
        if self.lineage is not None and state.get("lineage") is not None:
            self.lineage.load_state_dict(state["lineage"])
        if self.augment is not None and state.get("augment") is not None:
            self.augment.load_state_dict(state["augment"])  # queued/in-flight teacher work is re-queued
        if self.ar3po is not None and state.get("ar3po") is not None:
            self.ar3po.load_state_dict(state["ar3po"])  # the response bank
        if state.get("rollout_cost") is not None:
            self.rollout_cost.load_state_dict(state["rollout_cost"])
        if state.get("in_flight") is not None:  # groups verl re-issues under their uids (asynchronous modes)
            self.in_flight.load_state_dict(state["in_flight"])
        self.last_pass_rates = {int(k): float(v) for k, v in state.get("last_pass_rates", {}).items()}
