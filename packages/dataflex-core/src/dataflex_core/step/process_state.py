"""Process-wide settings that belong to the framework, taken before a component call and put back after it.

A plugin that set torch's default dtype, TF32, deterministic mode, thread count or a global random generator
would change the framework's numerics or random stream far from the plugin, so each call's changes are named
and put back. A component that needs randomness keeps its own seeded ``torch.Generator`` in its state: the
global generators' draws repeat the framework's next ones.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch


@dataclass
class ProcessState:
    """The framework's process-wide settings at one moment."""

    default_dtype: torch.dtype
    matmul_precision: str
    deterministic: tuple[bool, bool]
    threads: int
    torch_rng: torch.Tensor
    cuda_rng: torch.Tensor | None
    numpy_rng: Any
    python_rng: Any

    @classmethod
    def capture(cls) -> ProcessState:
        return cls(
            default_dtype=torch.get_default_dtype(),
            matmul_precision=torch.get_float32_matmul_precision(),
            deterministic=(
                torch.are_deterministic_algorithms_enabled(),
                torch.is_deterministic_algorithms_warn_only_enabled(),
            ),
            threads=torch.get_num_threads(),
            torch_rng=torch.get_rng_state(),
            cuda_rng=torch.cuda.get_rng_state() if torch.cuda.is_available() and torch.cuda.is_initialized() else None,
            numpy_rng=np.random.get_state(),
            python_rng=random.getstate(),
        )

    def changes(self, now: ProcessState) -> dict[str, str]:
        """What differs in ``now``: setting -> ``"before -> after"`` (``"drawn from"`` for a generator)."""
        out: dict[str, str] = {}
        for name in ("default_dtype", "matmul_precision", "deterministic", "threads"):
            before, after = getattr(self, name), getattr(now, name)
            if before != after:
                out[name] = f"{before} -> {after}"
        same = {
            "torch": torch.equal(self.torch_rng, now.torch_rng),
            "torch.cuda": self.cuda_rng is None or now.cuda_rng is None or torch.equal(self.cuda_rng, now.cuda_rng),
            "numpy": all(np.array_equal(a, b) for a, b in zip(self.numpy_rng, now.numpy_rng)),
            "random": self.python_rng == now.python_rng,
        }
        drawn = [name for name, unchanged in same.items() if not unchanged]
        if drawn:
            out["rng"] = ", ".join(drawn)
        return out

    def restore(self, changed: dict[str, str]) -> None:
        """Put back what :meth:`changes` found changed."""
        if "default_dtype" in changed:
            torch.set_default_dtype(self.default_dtype)
        if "matmul_precision" in changed:
            torch.set_float32_matmul_precision(self.matmul_precision)
        if "deterministic" in changed:
            torch.use_deterministic_algorithms(self.deterministic[0], warn_only=self.deterministic[1])
        if "threads" in changed:
            torch.set_num_threads(self.threads)
        if "rng" in changed:
            torch.set_rng_state(self.torch_rng)
            if self.cuda_rng is not None:
                torch.cuda.set_rng_state(self.cuda_rng)
            np.random.set_state(self.numpy_rng)
            random.setstate(self.python_rng)
