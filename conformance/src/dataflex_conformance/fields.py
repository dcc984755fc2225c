"""Plausible values for the verl batch fields a component may declare in ``requires``.

A check can only exercise a component on a batch that holds every field it
reads, so the suite synthesises each known verl field with the value range
verl gives it (log-probs <= 0, entropy >= 0, the outcome reward on the last
response token, GRPO advantages normalised within ``uid`` groups). A field
the suite does not know must be supplied by the caller; asking for it
without a synthesiser raises :class:`MissingFieldError` naming the field and
the two ways to provide one.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from dataflex_core import segment_mean, segment_var

#: A synthesiser turns the shape of a batch into one field's values: a tensor
#: whose first dimension is ``bs`` (moved to the device and, when floating,
#: cast to the case's dtype by the caller) or a numpy array for ``non_tensor_batch``.
FieldSynthesiser = Callable[["FieldContext"], torch.Tensor | np.ndarray]


class MissingFieldError(NotImplementedError):
    """A component requires a field the suite cannot synthesise and the caller did not supply."""


@dataclass
class FieldContext:
    """What a synthesiser may use: the batch's layout and a seeded generator.

    Tensors here are on the CPU; ``response_mask`` is ``(bs, L)`` int64,
    ``group`` the dense group index of each row, ``is_padding`` ``(bs,)`` bool.
    """

    response_mask: torch.Tensor
    uid: np.ndarray
    group: torch.Tensor
    num_groups: int
    is_padding: torch.Tensor
    prompt_length: int
    generator: torch.Generator
    _cache: dict[str, Any] = field(default_factory=dict)

    @property
    def bs(self) -> int:
        return int(self.response_mask.shape[0])

    @property
    def length(self) -> int:
        return int(self.response_mask.shape[1])

    @property
    def valid_rows(self) -> torch.Tensor:
        return self.response_mask.bool().any(-1) & ~self.is_padding

    def randn(self, *shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=self.generator)

    def rand(self, *shape: int) -> torch.Tensor:
        return torch.rand(*shape, generator=self.generator)

    def outcome_reward(self) -> torch.Tensor:
        """Binary outcome reward per row (the usual RLVR case), shared by every reward field."""
        if "reward" not in self._cache:
            self._cache["reward"] = (self.rand(self.bs) < 0.5).float()
        return self._cache["reward"]

    def old_log_probs(self) -> torch.Tensor:
        """Per-token log-probs of the rollout policy, all <= 0 (shared by the log-prob fields)."""
        if "old_log_probs" not in self._cache:
            self._cache["old_log_probs"] = self.rand(self.bs, self.length).clamp(min=1e-6).log()
        return self._cache["old_log_probs"]


def _last_token_reward(ctx: FieldContext) -> torch.Tensor:
    mask = ctx.response_mask.bool()
    lengths = mask.sum(-1)
    out = torch.zeros(ctx.bs, ctx.length)
    rows = (lengths > 0).nonzero(as_tuple=True)[0]
    out[rows, lengths[rows] - 1] = ctx.outcome_reward()[rows]
    return out


def _grpo_advantages(ctx: FieldContext) -> torch.Tensor:
    reward = ctx.outcome_reward()
    valid = ctx.valid_rows
    mean = segment_mean(reward, ctx.group, ctx.num_groups, valid)
    std = segment_var(reward, ctx.group, ctx.num_groups, valid).sqrt()
    adv = (reward - mean[ctx.group]) / (std[ctx.group] + 1e-6)
    return adv.reshape(-1, 1) * ctx.response_mask.float()


def _token_ids(ctx: FieldContext, width: int) -> torch.Tensor:
    return torch.randint(1, 32000, (ctx.bs, width), generator=ctx.generator)


def _responses(ctx: FieldContext) -> torch.Tensor:
    return _token_ids(ctx, ctx.length) * ctx.response_mask


def _attention_mask(ctx: FieldContext) -> torch.Tensor:
    return torch.cat([torch.ones(ctx.bs, ctx.prompt_length, dtype=torch.long), ctx.response_mask.long()], dim=1)


def _near(ctx: FieldContext, base: torch.Tensor, scale: float) -> torch.Tensor:
    return (base + scale * ctx.randn(*base.shape)).clamp(max=0.0)


KNOWN_FIELDS: dict[str, FieldSynthesiser] = {
    "prompts": lambda ctx: _token_ids(ctx, ctx.prompt_length),
    "responses": _responses,
    "input_ids": lambda ctx: torch.cat([_token_ids(ctx, ctx.prompt_length), _responses(ctx)], dim=1),
    "attention_mask": _attention_mask,
    "position_ids": lambda ctx: (_attention_mask(ctx).cumsum(-1) - 1).clamp(min=0),
    "loss_mask": lambda ctx: ctx.response_mask.clone(),
    "rm_scores": _last_token_reward,
    "token_level_scores": _last_token_reward,
    "token_level_rewards": _last_token_reward,
    "advantages": _grpo_advantages,
    "returns": _grpo_advantages,
    "old_log_probs": lambda ctx: ctx.old_log_probs().clone(),
    "log_probs": lambda ctx: _near(ctx, ctx.old_log_probs(), 0.05),
    "ref_log_prob": lambda ctx: _near(ctx, ctx.old_log_probs(), 0.1),
    "rollout_log_probs": lambda ctx: _near(ctx, ctx.old_log_probs(), 0.02),
    "entropy": lambda ctx: 2.0 * ctx.rand(ctx.bs, ctx.length),
    "values": lambda ctx: ctx.randn(ctx.bs, ctx.length),
    "rollout_is_weights": lambda ctx: torch.exp(0.1 * ctx.randn(ctx.bs, ctx.length)),
    "data_source": lambda ctx: np.array(["math" if i % 2 else "code" for i in range(ctx.bs)], dtype=object),
    "index": lambda ctx: np.arange(ctx.bs).astype(object),
}

#: Fields every batch has; they are built from the case itself, not synthesised.
STRUCTURAL_FIELDS = ("response_mask", "is_padding", "uid")


def resolve_synthesisers(
    needed: list[str], custom: Mapping[str, FieldSynthesiser] | None, who: str
) -> dict[str, FieldSynthesiser]:
    """The synthesiser of each needed field, custom ones first.

    :raises MissingFieldError: for a field neither known nor supplied.
    """
    custom = dict(custom or {})
    out: dict[str, FieldSynthesiser] = {}
    for name in needed:
        if name in STRUCTURAL_FIELDS:
            continue
        if name in custom:
            out[name] = custom[name]
        elif name in KNOWN_FIELDS:
            out[name] = KNOWN_FIELDS[name]
        else:
            raise MissingFieldError(
                f"{who} requires field {name!r}, which dataflex-conformance cannot synthesise "
                f"(known fields: {', '.join(sorted(KNOWN_FIELDS))}); supply a synthesiser "
                f"fields={{{name!r}: make_{name}}} to parametrize_with_checks / certify, or "
                f"`dataflex-conformance --fields MODULE:MAPPING`, where make_{name}(ctx) returns a "
                "tensor whose first dimension is ctx.bs (or a numpy object array for non-tensor fields)"
            )
    return out
