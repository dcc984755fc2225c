"""Which devices a run certifies on: ``cpu``, every CUDA device, or both.

A certificate must never imply GPU coverage it did not run, so asking for
CUDA where there is none is reported as a problem (and fails the run)
rather than quietly falling back to the CPU.
"""

from __future__ import annotations

import torch

DEVICE_CHOICES = ("auto", "cpu", "cuda")


def cuda_devices() -> list[str]:
    """Labels of the visible CUDA devices: ``cuda`` for a single one, ``cuda:N`` for several."""
    if not torch.cuda.is_available():
        return []
    count = torch.cuda.device_count()
    return ["cuda"] if count == 1 else [f"cuda:{i}" for i in range(count)]


def cuda_unavailable_reason() -> str:
    return (
        f"--device cuda was asked for, but torch.cuda.is_available() is False "
        f"(torch {torch.__version__}, built with CUDA {torch.version.cuda or 'none'}); "
        "run on a machine with a CUDA device and a CUDA build of torch, or use --device cpu/auto"
    )


def resolve_devices(choice: str) -> tuple[list[str], list[str]]:
    """``(devices to run on, problems)`` for ``auto`` (CPU and every CUDA device), ``cpu`` or ``cuda``."""
    if choice not in DEVICE_CHOICES:
        raise ValueError(f"device {choice!r} is not one of {', '.join(DEVICE_CHOICES)}")
    if choice == "cpu":
        return ["cpu"], []
    cuda = cuda_devices()
    if choice == "cuda":
        return cuda, [] if cuda else [cuda_unavailable_reason()]
    return ["cpu", *cuda], []
