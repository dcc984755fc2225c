"""The solve rates an allocator reads from its scores: one per prompt, each in ``[0, 1]``."""

from __future__ import annotations

from typing import Any

import torch

from dataflex_core import InvalidOutputError


def solve_rates(owner: str, scores: Any, num_prompts: int) -> torch.Tensor:
    """``scores`` as float64 solve rates ``(n,)``; an :class:`InvalidOutputError` when one lies outside ``[0, 1]``."""
    p = torch.as_tensor(scores).detach().to("cpu", torch.float64).reshape(-1)
    if len(p) != num_prompts:
        raise InvalidOutputError(f"{owner} got {len(p)} scores for {num_prompts} prompts")
    outside = ~((p >= 0) & (p <= 1))
    if bool(outside.any()):
        raise InvalidOutputError(
            f"{owner} reads its scores as solve rates, but {int(outside.sum())} lie outside [0, 1] "
            f"(e.g. {float(p[outside][0]):.4g}); pair it with a scorer whose score_range is (0, 1), such as "
            "solve_rate_posterior"
        )
    return p
