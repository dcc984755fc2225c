"""The ranker kind: scores in, one rank key per row out (higher key, higher rank); and its output contract."""

from typing import ClassVar

import torch

from dataflex_core import Actuator, InvalidOutputError


class Ranker(Actuator):
    """Base of the ``ranker`` kind: ``act(scores, batch, **ctx)`` returns ``(n,)`` float keys, finite on valid rows."""

    kind = "ranker"
    accepts_granularity: ClassVar[tuple[str, ...]] = ("prompt", "response")


def check_keys(keys, valid: torch.Tensor, *, owner: str, step: int) -> torch.Tensor:
    """The ranker contract, checked once: a float tensor of shape ``(n,)``, finite wherever ``valid``."""
    n = valid.shape[0]
    if not isinstance(keys, torch.Tensor) or keys.shape != (n,) or not keys.is_floating_point():
        shape = tuple(keys.shape) if isinstance(keys, torch.Tensor) else type(keys).__name__
        raise InvalidOutputError(
            f"ranker {owner} returned {shape} at step {step}, but should return a float tensor of shape ({n},)"
        )
    if not torch.isfinite(keys[valid]).all():
        raise InvalidOutputError(f"ranker {owner} returned non-finite keys on valid rows at step {step}")
    return keys
