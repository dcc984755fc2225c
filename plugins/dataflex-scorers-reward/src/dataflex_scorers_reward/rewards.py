"""The outcome reward of each sequence, read from a declared field.

verl stores the outcome reward on the last valid response token of
``rm_scores`` (older trainers call the same field ``token_level_scores``), so
the sequence reward is the masked sum over the response. Which field is read
is a param, ``reward_key``, and that field is what the scorer declares in
``requires``: hosts fetch only declared fields (TransferQueue silently drops
the rest), so a scorer that quietly fell back to an undeclared field would
read something the host never fetched.
"""

from __future__ import annotations

import torch

from dataflex_core import masked_seq_sum
from dataflex_core.contracts import require_groups

#: Default reward field of verl 0.9's v1 trainer.
DEFAULT_REWARD_KEY = "rm_scores"
#: The same signal under the name used by verl's older trainers.
LEGACY_REWARD_KEY = "token_level_scores"


def as_float(x: torch.Tensor) -> torch.Tensor:
    """``x`` itself when it is float32/float64, else a float32 copy (bf16, fp16, ints)."""
    return x if x.dtype in (torch.float32, torch.float64) else x.float()


def check_reward_key(component: str, reward_key: object) -> str:
    if not isinstance(reward_key, str) or not reward_key:
        raise ValueError(
            f"{component} reward_key must be the name of a (bs, L) reward field such as "
            f"{DEFAULT_REWARD_KEY!r} or {LEGACY_REWARD_KEY!r}, got {reward_key!r}"
        )
    return reward_key


def sequence_reward(batch, reward_key: str, component: str) -> torch.Tensor:
    """``(bs,)`` masked sum of ``batch.batch[reward_key]`` over each response (float32 or float64)."""
    tensors = batch.batch
    if reward_key not in tensors:
        other = LEGACY_REWARD_KEY if reward_key == DEFAULT_REWARD_KEY else DEFAULT_REWARD_KEY
        hint = (
            f"; this batch has {other!r}: set params.reward_key: {other}"
            if other in tensors
            else "; set params.reward_key to the field holding the token-level reward"
        )
        raise KeyError(f"{component} reads reward field {reward_key!r}, which the batch lacks{hint}")
    return masked_seq_sum(as_float(tensors[reward_key]), tensors["response_mask"])


def group_ids(batch, component: str, device: torch.device) -> tuple[torch.Tensor, int]:
    """Dense group index ``(bs,)`` and group count from ``non_tensor_batch['uid']`` (the contract's guard)."""
    return require_groups(batch, component, device=device)
