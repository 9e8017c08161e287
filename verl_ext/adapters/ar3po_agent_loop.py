"""Staged rollouts inside verl 0.9.1's agent loop: AR3PO's stages or Reinforce-Ada's rounds, per prompt in
``_run_prompt``.

Why here, and why per prompt (verl source, ``verl/trainer/ppo/v1/agent_loop_tq.py``): ``AgentLoopWorkerTQ._run_prompt``
is the unit that owns one prompt's GRPO group. It marks the prompt ``running`` in TransferQueue, runs ``n``
sessions (``n`` = the row's ``__rollout_n__`` or ``rollout.n``), each of which scores its trajectory and writes it
as ``{uid}_{session}_{i}``, and only when every session has settled publishes ``finished``; the replay buffer
samples a group only after that. A per-row ``__rollout_n__`` alone cannot run stage 2: ``n`` is fixed when the
prompt is dispatched, while the stage-2 decision needs the stage-1 rewards, which exist only inside the worker
(``_agent_loop_postprocess`` scores each trajectory as it finishes). Re-dispatching the same uid from the trainer
would race the replay buffer (the group is sampleable the moment it is ``finished``) and put a barrier between
stages across the whole batch. Extending the group inside ``_run_prompt``, before the terminal status is
published, keeps every verl invariant: one uid per group, session ids ``0..n-1`` as keys, DAPO classification and
failure handling on the finished group, advantages grouped by uid. A hard prompt's stage 2 overlaps the other
prompts' stage 1.

Each prompt is driven by a pure planner: AR3PO's ``StagePlanner`` (``verl_ext.ar3po``: stage 1 asks ``k1``
responses, later stages ``k_s`` more for the prompts ``extend`` picks, up to ``max_stages`` / ``max_per_prompt``) or
Reinforce-Ada's ``RoundsPlanner`` (``verl_ext.allocation.rounds``: rounds until the exit rule holds or the cap).
Settings: ``heapa.ar3po`` / ``heapa.reinforce_ada`` and ``heapa.feedback`` of the trainer config. Validation
rollouts, and runs with neither on, take verl's own path unchanged.

Select with ``actor_rollout_ref.rollout.agent.agent_loop_manager_class=
verl_ext.adapters.ar3po_agent_loop.StagedAgentLoopManager`` (the recipe sets it when either is on).
"""

from __future__ import annotations

import asyncio
import logging
import os
from typing import Any

import ray
import transfer_queue as tq
from omegaconf import OmegaConf

from verl.trainer.ppo.v1.agent_loop_tq import AgentLoopManagerTQ, AgentLoopWorkerTQ, apply_greedy_sampling_params
from verl_ext.adapters.heapa_block import apply_moved_keys
from verl_ext.allocation import RoundsConfig, RoundsPlanner
from verl_ext.ar3po import AR3POConfig, StagePlanner
from verl_ext.reward.extra_info import acc_of

logger = logging.getLogger(__name__)
logger.setLevel(os.getenv("VERL_LOGGING_LEVEL", "INFO"))

MANAGER_FQN = f"{__name__}.StagedAgentLoopManager"  # what heapa.ar3po / heapa.reinforce_ada install


def _block(config: Any) -> dict[str, Any]:
    """The ``heapa`` sections the staged rollout reads, plain, with moved keys settled as the driver settles them."""
    heapa = config.get("heapa") if config is not None else None
    if heapa is None:
        return {}
    plain = {key: OmegaConf.to_container(heapa[key], resolve=True) if OmegaConf.is_config(heapa[key]) else heapa[key]
             for key in ("ar3po", "reinforce_ada", "feedback") if heapa.get(key) is not None}
    return apply_moved_keys(plain, warn=False)  # the driver warned; a null moved key is unset here too


def ar3po_settings(config: Any) -> tuple[AR3POConfig | None, str]:
    """``(AR3POConfig or None when off, acc field)`` from a trainer config (``heapa.ar3po``, ``heapa.feedback``)."""
    block = _block(config)
    if block.get("ar3po") is None:
        return None, "acc"
    cfg = AR3POConfig.from_dict(block["ar3po"])
    feedback = block.get("feedback") or {}
    return (cfg if cfg.enabled else None), str(feedback.get("acc_field", "acc"))


def rounds_settings(config: Any) -> tuple[RoundsConfig | None, float]:
    """``(RoundsConfig or None when off, pass threshold)`` from a trainer config (``heapa.reinforce_ada``)."""
    block = _block(config)
    threshold = float((block.get("feedback") or {}).get("pass_threshold", 0.5))
    if block.get("reinforce_ada") is None:
        return None, threshold
    cfg = RoundsConfig.from_dict(block["reinforce_ada"])
    return (cfg if cfg.enabled else None), threshold


def final_acc(output: Any, acc_field: str) -> float:
    """The final output's correctness (``reward_extra_info[acc_field]``); loud when the reward manager omits it."""
    final = output[-1] if isinstance(output, list) else output
    acc = acc_of(final.extra_fields or {}, acc_field)
    if acc is None:
        raise KeyError(f"a staged rollout (AR3PO, Reinforce-Ada) needs reward_extra_info[{acc_field!r}] per "
                       "trajectory to decide the next stage; use reward.reward_manager.name=heapa or a reward "
                       "function that returns it")
    return float(acc)


class StagedAgentLoopWorkerImpl(AgentLoopWorkerTQ.__ray_actor_class__):
    """``AgentLoopWorkerTQ`` whose training prompts are rolled out in AR3PO stages or Reinforce-Ada rounds (see the
    module docstring)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.ar3po, self.acc_field = ar3po_settings(self.config)
        self.rounds, self.pass_threshold = rounds_settings(self.config)
        self.group_n = int(self.config.actor_rollout_ref.rollout.n)

    @property
    def staged(self) -> bool:
        return self.ar3po is not None or self.rounds is not None

    def _planner(self) -> StagePlanner | RoundsPlanner:
        if self.ar3po is not None:
            return StagePlanner(self.ar3po)
        threshold = self.pass_threshold
        return RoundsPlanner(self.rounds, self.group_n, lambda acc: acc > threshold)

    async def _agent_loop_postprocess(self, output, validate, **kwargs):
        # verl's postprocess scores the trajectory (setting reward_extra_info on the output) and writes it to
        # TransferQueue; the staged loop needs that correctness back to plan the next stage.
        await super()._agent_loop_postprocess(output, validate, **kwargs)
        if validate or not self.staged:
            return None
        return final_acc(output, self.acc_field)

    async def _run_prompt(self, prompt: dict, sampling_params: dict, trajectory: dict, trace: bool = False) -> None:
        if trajectory["validate"] or not self.staged:
            return await super()._run_prompt(prompt, sampling_params, trajectory, trace=trace)
        uid = prompt["uid"]
        await tq.async_kv_put(key=uid, partition_id="train", tag={"status": "running"})
        prompt.pop("__rollout_n__", None)  # the planner decides n, stage by stage (rounds: from rollout.n)
        measured = bool(int(prompt.pop("__heapa_measured__", 0)))  # set by the trainer under extend: measured
        params = dict(sampling_params)
        if not prompt.pop("__do_sample__", True):
            apply_greedy_sampling_params(params)
        try:
            status = await self._run_stages(uid, prompt, params, trajectory, trace, measured)
        except Exception:  # a broken stage is verl's "failure" outcome (counted by its replay buffer), logged here
            logger.exception("staged rollout failed for uid=%s", uid)
            status = "failure"
        await tq.async_kv_put(key=uid, partition_id="train", tag={"status": status})

    async def _run_stages(self, uid: str, prompt: dict, params: dict, trajectory: dict, trace: bool,
                          measured: bool = False) -> str:
        """Run the planner's stages for one prompt; returns verl's terminal status for the group."""
        planner = self._planner()
        if measured and isinstance(planner, StagePlanner):
            grant = planner.begin([uid], measured=[uid])
        else:
            grant = planner.begin([uid])
        session = 0
        while grant:
            n = grant[uid]
            tasks = [
                asyncio.create_task(self._run_agent_loop(params, trajectory=trajectory, trace=trace,
                                                         session_id=session + i, **prompt))
                for i in range(n)
            ]
            session += n
            # All sessions settle before the status is published, so no sibling writes after a failed group is
            # cleared (the same rule as verl's _run_prompt).
            results = await asyncio.gather(*tasks, return_exceptions=True)
            errors = [r for r in results if isinstance(r, BaseException)]
            if errors:
                for error in errors:
                    logger.error("staged session failed for uid=%s", uid,
                                 exc_info=(type(error), error, error.__traceback__))
                return "failure"
            planner.record({uid: list(results)})
            grant = planner.next_stage()
        return "finished"


StagedAgentLoopWorker = ray.remote(StagedAgentLoopWorkerImpl)


class StagedAgentLoopManager(AgentLoopManagerTQ):
    """``AgentLoopManagerTQ`` whose workers run staged rollouts; dispatch and TransferQueue writes are verl's."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.agent_loop_workers_class = StagedAgentLoopWorker  # workers are created after __init__ (create())
