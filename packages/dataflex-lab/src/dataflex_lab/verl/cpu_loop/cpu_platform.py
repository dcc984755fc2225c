"""A CPU platform for verl's platform registry, so verl's trainer runs on a machine without an accelerator.

verl 0.9 falls back to ``nvidia`` (device ``cuda``) when nothing is detected.
This platform says ``cpu`` everywhere verl asks (device strings, the torch
device module, the process-group backend) and keeps Ray's ``GPU`` resource
name: verl's resource pools always ask Ray for GPUs, so the harness starts Ray
with logical GPUs that stand for CPU worker slots.
"""

from __future__ import annotations

import types
from contextlib import contextmanager
from typing import Any

import torch
from verl.plugin.platform import PlatformBase, PlatformRegistry

from .names import PLATFORM_NAME


def _noop(*args: Any, **kwargs: Any) -> None:
    return None


def _cpu_device_module() -> types.ModuleType:
    """``torch.cpu`` plus the ``torch.cuda`` functions verl calls that mean nothing on a CPU (no-ops or zeros)."""
    module = types.ModuleType("dataflex_lab_cpu_device")
    for name in ("current_device", "device_count", "is_available", "synchronize", "Stream", "current_stream", "stream"):
        setattr(module, name, getattr(torch.cpu, name))
    module.Event = getattr(torch.cpu, "Event", None)
    for name in (
        "empty_cache",
        "set_device",
        "ipc_collect",
        "set_per_process_memory_fraction",
        "manual_seed",
        "manual_seed_all",
    ):
        setattr(module, name, _noop)
    for name in ("memory_allocated", "memory_reserved", "max_memory_allocated", "max_memory_reserved"):
        setattr(module, name, lambda *args, **kwargs: 0)
    module.mem_get_info = lambda *args, **kwargs: (0, 0)
    module.get_rng_state = lambda *args, **kwargs: torch.get_rng_state()
    module.set_rng_state = lambda state, *args, **kwargs: torch.set_rng_state(state)
    module.get_device_name = lambda *args, **kwargs: "CPU"
    module.reset_peak_memory_stats = _noop
    return module


_DEVICE_MODULE = _cpu_device_module()


@PlatformRegistry.register(platform=PLATFORM_NAME)
class CpuPlatform(PlatformBase):
    """verl's platform interface answered for a CPU-only host (gloo collectives, no-op memory management)."""

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
        # never auto-detected: only VERL_PLATFORM=cpu selects it
        return False

    def current_device(self) -> str:  # type: ignore[override]
        # verl passes this straight to ``.to(...)`` / ``device=``; an int would mean an accelerator index
        return "cpu"

    def device_count(self) -> int:
        return 1

    def set_device(self, device_index: int) -> None:
        return None

    def synchronize(self, device_index: int | None = None) -> None:
        return None

    def manual_seed(self, seed: int) -> None:
        torch.manual_seed(seed)

    def manual_seed_all(self, seed: int) -> None:
        torch.manual_seed(seed)

    def set_allocator_settings(self, settings: str) -> None:
        return None

    def empty_cache(self) -> None:
        return None

    def get_device_capability(self, device_index: int = 0) -> tuple[int | None, int | None]:
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
        return "GPU"

    def ray_noset_envvars(self) -> list[str]:
        return []

    def is_ipc_supported(self) -> bool:
        return False

    def cudart(self) -> Any:
        return None
