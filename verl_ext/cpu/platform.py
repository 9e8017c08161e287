"""A ``cpu`` platform for verl's platform registry: gloo collectives and no-op device calls.

verl 0.9.1 resolves its device through ``verl.plugin.platform`` (cuda, npu, rocm). This platform is
selected only by ``VERL_PLATFORM=cpu``: its ``is_platform_available`` is False otherwise, so registering it
never changes auto-detection on GPU machines.
"""

from __future__ import annotations

import os
import types
from contextlib import contextmanager
from typing import Any, Optional

import torch

from verl.plugin.platform.platform_base import PlatformBase
from verl.plugin.platform.platform_manager import PlatformRegistry

PLATFORM_NAME = "cpu"


def _noop(*_args: Any, **_kwargs: Any) -> None:
    return None


def _zero(*_args: Any, **_kwargs: Any) -> int:
    return 0


def _mem_get_info(*_args: Any, **_kwargs: Any) -> tuple[int, int]:
    # verl logs free/total device memory; report the host's so the numbers stay meaningful.
    pages = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    avail = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    return avail, pages


@contextmanager
def _null_ctx(*_args: Any, **_kwargs: Any):
    yield


class _HostStream:
    """Stands in for a device stream/event: host work is already ordered, so every call is a no-op."""

    def __init__(self, *_args: Any, **_kwargs: Any) -> None:
        pass

    def __getattr__(self, _name: str):
        return _noop


def _build_device_module() -> types.ModuleType:
    """A ``torch.cuda``-shaped namespace whose calls are no-ops or host equivalents."""
    mod = types.ModuleType("verl_ext_cpu_device")
    noop_names = (
        "set_device synchronize empty_cache manual_seed manual_seed_all reset_peak_memory_stats "
        "reset_max_memory_allocated ipc_collect set_per_process_memory_fraction"
    ).split()
    zero_names = "memory_allocated max_memory_allocated memory_reserved max_memory_reserved".split()
    for name in noop_names:
        setattr(mod, name, _noop)
    for name in zero_names:
        setattr(mod, name, _zero)
    mod.current_device = lambda: "cpu"
    mod.is_available = lambda: True
    mod.device_count = lambda: 1
    mod.mem_get_info = _mem_get_info
    mod.get_rng_state = lambda *a, **k: torch.get_rng_state()
    mod.set_rng_state = lambda state, *a, **k: torch.set_rng_state(state)
    mod.memory_stats = lambda *a, **k: {}
    mod.get_device_name = lambda *a, **k: "CPU"  # the name verl's FLOPs table uses for host runs
    mod.stream = _null_ctx
    mod.Stream = _HostStream
    mod.current_stream = lambda *a, **k: _HostStream()
    mod.device = _null_ctx
    mod.Event = _HostStream
    return mod


_DEVICE_MODULE = _build_device_module()


@PlatformRegistry.register(platform=PLATFORM_NAME)
class PlatformCPU(PlatformBase):
    """Host-only platform: device ``cpu``, collectives over gloo, no profiler, no IPC."""

    @property
    def device_name(self) -> str:
        return "cpu"

    @property
    def vendor_name(self) -> str:
        return "cpu"

    @property
    def device_module(self) -> types.ModuleType:
        return _DEVICE_MODULE

    def is_available(self) -> bool:
        return True

    def is_platform_available(self, use_smi_check: bool = False) -> bool:
        # Auto-detection must never pick the CPU on a GPU machine: only an explicit VERL_PLATFORM selects it.
        return os.environ.get("VERL_PLATFORM", "").strip().lower() == PLATFORM_NAME

    def current_device(self) -> str:  # type: ignore[override]
        # verl writes ``tensor.to(get_device_id())``: an int would mean cuda:N, the string "cpu" stays on host.
        return "cpu"

    def device_count(self) -> int:
        return 1

    def set_device(self, device_index: int) -> None:
        return None

    def synchronize(self, device_index: Optional[int] = None) -> None:
        return None

    def manual_seed(self, seed: int) -> None:
        torch.manual_seed(seed)

    def manual_seed_all(self, seed: int) -> None:
        torch.manual_seed(seed)

    def set_allocator_settings(self, settings: str) -> None:
        return None

    def empty_cache(self) -> None:
        return None

    def get_device_capability(self, device_index: int = 0) -> tuple[Optional[int], Optional[int]]:
        return None, None

    def communication_backend_name(self) -> str:
        return "gloo"

    def visible_devices_envvar(self) -> str:
        return "CUDA_VISIBLE_DEVICES"

    @contextmanager
    def nvtx_range(self, msg: str):
        yield

    def profiler_start(self) -> None:
        return None

    def profiler_stop(self) -> None:
        return None

    def ray_resource_name(self) -> str:
        # Ray is started with logical GPUs (ray_init.num_gpus) so verl's placement groups resolve.
        return "GPU"

    def ray_noset_envvars(self) -> list[str]:
        return ["RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES"]

    def is_ipc_supported(self) -> bool:
        return False

    def cudart(self) -> Any:
        return None
