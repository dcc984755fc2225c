"""What the suites measure on a :class:`~dataflex_conformance.host.HostStep`: its valid tokens, the weights the
host applied, and whether a loss is the framework's own."""

from __future__ import annotations

import torch

from .harness import HostStep


def valid_tokens(step: HostStep) -> torch.Tensor:
    """``(rows, L)`` bool: the loss mask's tokens outside padding rows and empty responses."""
    return step.loss_mask.bool() & ~step.inert.bool().unsqueeze(-1)


def close(actual: torch.Tensor, expected: torch.Tensor) -> bool:
    """Equal up to float noise (losses of the same batch computed twice)."""
    return bool(torch.allclose(actual.detach().double(), expected.detach().double(), rtol=1e-6, atol=1e-8))


def applied(step: HostStep) -> torch.Tensor:
    """The weights the host applied, float64, asserting it applied some of the loss mask's shape."""
    assert step.weights is not None, "the host applied no weights for a step whose components gave weights"
    assert step.weights.shape == step.loss_mask.shape, (
        f"the weights have shape {tuple(step.weights.shape)}, the loss mask {tuple(step.loss_mask.shape)}"
    )
    return step.weights.detach().to(torch.float64)


def assert_frameworks_loss(flex: HostStep, plain: HostStep) -> None:
    """The step's loss is the framework's own, and any weights the host applied are 1 on every valid token."""
    assert close(flex.loss, plain.loss), (flex.loss.item(), plain.loss.item())
    if flex.weights is not None:
        mask = valid_tokens(flex)
        assert close(applied(flex)[mask], torch.ones(int(mask.sum()), dtype=torch.float64))


def per_token(values: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """``values`` per row ``(rows,)`` or per token ``(rows, L)`` as float64 of ``like``'s ``(rows, L)`` shape."""
    values = values.detach().to(torch.float64)
    return values.unsqueeze(-1).expand(like.shape) if values.dim() == 1 else values[:, : like.shape[-1]]


def kept_rows(step: HostStep) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(weights, valid rows, kept rows)``: a valid row is kept when it has a weighted token the loss counts."""
    valid = valid_tokens(step)
    counted = valid if step.trained_mask is None else valid & step.trained_mask.bool()
    weights = applied(step) * counted
    rows = valid.any(-1)
    return weights, rows, rows & (weights != 0).any(-1)
