"""Case 2: the verl host's overhead, ``dataflex_sync._compute_advantage`` over ``sync._compute_advantage``.

Needs ``dataflex_verl`` (and verl, TransferQueue, Ray); without it the case
is a ``skip`` row with the reason, never a crash.
"""

from __future__ import annotations

import importlib.util

from .results import Result

HOST_TARGET = 1.3


def host_missing() -> str | None:
    """Why the host case cannot run here, or None."""
    for module, dist in (("dataflex_verl", "dataflex-verl"), ("verl", "verl"), ("transfer_queue", "transferqueue")):
        if importlib.util.find_spec(module) is None:
            return f"{module} is not installed (pip install {dist}); host overhead not measured"
    return None


def run_host(
    *, bs: int, length: int, group_size: int, reps: int, warmup: int = 1, unjudged: str | None = None, progress=print
) -> list[Result]:
    shape = f"bs={bs} ({bs // group_size}x{group_size}) L={length}"
    name = "dataflex_sync / sync _compute_advantage"
    reason = host_missing()
    if reason:
        progress(f"  SKIP host overhead: {reason}")
        return [Result("host", name, shape, status="skip", target=HOST_TARGET, note=reason)]
    from . import host_queue  # imports verl and ray: only when the host is there

    return host_queue.run(
        name=name,
        shape=shape,
        bs=bs,
        length=length,
        group_size=group_size,
        reps=reps,
        warmup=warmup,
        target=HOST_TARGET,
        unjudged=unjudged,
        progress=progress,
    )
