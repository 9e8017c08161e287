"""CPU backend for verl 0.9.1: a ``cpu`` platform, an ``hf`` rollout replica and tiny offline assets.

Everything here is switched on by ``VERL_PLATFORM=cpu`` (plus the overrides in ``verl_ext.cpu.overrides``);
without it, :func:`register` only adds registry entries that nothing selects, so GPU runs are unchanged.
"""

from __future__ import annotations

import logging
import os

from verl_ext.cpu import console
from verl_ext.cpu.numerics import PINNED_ENV

logger = logging.getLogger(__name__)

ENV_DEFAULTS = {
    # verl registers its FSDP engine for cuda/npu only; the engine itself places tensors via the platform.
    "VERL_ENGINE_DEVICE": "cuda",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "TOKENIZERS_PARALLELISM": "false",
    # thread counts that match the cores, verl's INFO chatter and progress refreshes off the console (console.py)
    **console.env_defaults(),
    # the pinned kernels, so that seeded CPU runs sample the same responses on other x86 CPUs (numerics.py)
    **PINNED_ENV,
}
_registered = False


def cpu_selected() -> bool:
    return os.environ.get("VERL_PLATFORM", "").strip().lower() == "cpu"


def _dedupe_backend(init_process_group):
    """verl asks for ``cpu:gloo,<device>:<backend>``; with device cpu that names cpu twice, which torch rejects."""

    def wrapper(*args, **kwargs):
        backend = kwargs.get("backend")
        if isinstance(backend, str) and "," in backend:
            parts = list(dict.fromkeys(p.strip() for p in backend.split(",")))
            kwargs["backend"] = ",".join(parts)
        return init_process_group(*args, **kwargs)

    wrapper._verl_ext_dedupe = True  # torch's own decorator already sets __wrapped__: use our own marker
    return wrapper


def register() -> None:
    """Register the cpu platform and the hf rollout; patch process-group setup when the CPU is selected."""
    global _registered
    if _registered:
        return
    if cpu_selected():  # before the imports below pull in verl's engine package (its warnings fire on import)
        console.quiet_warnings()
    from verl.workers.rollout import base as rollout_base
    from verl.workers.rollout.replica import RolloutReplicaRegistry

    from . import platform  # noqa: F401  (registers PlatformCPU)

    def _load_hf():
        from .hf_rollout import HFReplica

        return HFReplica

    RolloutReplicaRegistry.register("hf", _load_hf)
    rollout_base._ROLLOUT_REGISTRY[("hf", "async")] = "verl_ext.cpu.hf_rollout.HFServerAdapter"
    _registered = True
    if cpu_selected():
        activate()


def activate() -> None:
    """Select the CPU in this process: env defaults (inherited by Ray workers started later) and gloo fix."""
    os.environ["VERL_PLATFORM"] = "cpu"
    for key, value in ENV_DEFAULTS.items():
        os.environ.setdefault(key, value)
    console.quiet_warnings()
    console.install_tracking_hook()  # one readable line per validation where verl's Tracking prints to console
    import torch.distributed as dist

    if not getattr(dist.init_process_group, "_verl_ext_dedupe", False):
        dist.init_process_group = _dedupe_backend(dist.init_process_group)
        logger.debug("verl_ext: CPU platform selected (VERL_PLATFORM=cpu)")  # every Ray worker does this
