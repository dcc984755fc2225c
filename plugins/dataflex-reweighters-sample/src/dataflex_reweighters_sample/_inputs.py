"""Checks and finishing steps every per-sample reweighter shares.

Scores arrive as ``(bs,)`` tensors of any float dtype, checked for shape and
finiteness by ``dataflex_core.actuator_scores``; weights leave as
float32, zero on invalid rows, mean one over valid rows. A reweighter whose
rule gives every valid row weight zero (e.g. ``focal`` on a batch where every
prompt is solved) has no emphasis to apply and returns uniform weights,
rather than failing the step.
"""

from __future__ import annotations

import torch

from dataflex_core import masked_seq_sum, normalize_mean_one, segment_mean
from dataflex_core.contracts import require_groups


def unit_interval_scores(name: str, s: torch.Tensor, valid: torch.Tensor) -> None:
    """Require valid scores in [0, 1] (solve rates), naming the scorer to pair with otherwise."""
    outside = valid & ((s < 0) | (s > 1))
    if outside.any():
        seen = s[outside]
        raise ValueError(
            f"{name} reads scores as solve rates in [0, 1], but {int(outside.sum())} valid score(s) lie outside "
            f"(min={seen.min().item():.4g}, max={seen.max().item():.4g}); pair it with group_solve_rate"
        )


def group_solve_rates(name: str, s: torch.Tensor, valid: torch.Tensor, batch) -> torch.Tensor:
    """Each row's group mean of its valid rows' scores, checked to be a rate in [0, 1].

    With ``group_solve_rate`` scores (already constant within a group) this is
    p̂ itself; with per-sample 0/1 rewards (``reward_difficulty``) it is the
    group's solve rate, so binary rewards get a real middle to band on.
    """
    unit_interval_scores(name, s, valid)
    index, num_groups = require_groups(batch, name, device=s.device)
    return segment_mean(s, index, num_groups, valid)[index]


def advantage_sign(name: str, batch) -> torch.Tensor:
    """``(bs,)`` sign (-1, 0, +1) of each row's advantage summed over its response."""
    adv = batch.batch.get("advantages")
    if adv is None:
        raise KeyError(f"{name} reads 'advantages' (declared in requires), which the batch lacks")
    adv = adv if adv.dtype in (torch.float32, torch.float64) else adv.float()
    return torch.sign(masked_seq_sum(adv, batch.batch["response_mask"]))


def finish(weights: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """Mean one over ``valid`` rows (0 elsewhere); uniform when every valid weight is zero."""
    w = torch.where(valid, weights, torch.zeros((), dtype=weights.dtype, device=weights.device))
    w = torch.where(w.sum() > 0, w, valid.to(w.dtype))
    return normalize_mean_one(w, valid).float()
