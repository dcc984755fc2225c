"""Batches shaped as the hosts hand them to components, for every package's tests.

Two builders, one layout:

- :func:`rows_batch` writes out rows given by hand (each row's response
  length, reward, advantage, group, padding flag): for hand-computed cases;
- :func:`grpo_batch` draws a GRPO step at random as verl builds one: groups of
  responses to the same prompt under a shared ``uid``, 0/1 rewards on the last
  response token, verl's GRPO advantages, and the rows frameworks add that
  components must not count: empty responses, singleton groups (one response,
  whose advantage verl does not centre) and verl's padding rows (appended by
  ``upsample_batch_to_divisible_size``: one shared ``pad<hex>`` uid, an all-zero
  ``response_mask``, rewards 0 and the flag ``is_padding``).

:func:`grpo_layout` is the random draw itself (lengths, groups, rewards), so a
host's own test harness can render the same step in its framework's format
(``dataflex_lab.verl.sandbox`` writes it into TransferQueue's jagged layout).
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from dataflex_core import Batch

#: verl's ``epsilon`` in ``compute_grpo_outcome_advantage``.
GRPO_EPSILON = 1e-6


def response_mask(lengths: Sequence[int] | torch.Tensor, width: int | None = None) -> torch.Tensor:
    """``(bs, width)`` int64 mask whose row ``i`` has ``lengths[i]`` leading ones (width: the longest, at least 1)."""
    lengths = torch.as_tensor(lengths, dtype=torch.int64).reshape(-1)
    width = int(width if width is not None else max(int(lengths.max()) if len(lengths) else 0, 1))
    if len(lengths) and int(lengths.max()) > width:
        raise ValueError(f"a row has {int(lengths.max())} response tokens but the width is {width}")
    return (torch.arange(width).unsqueeze(0) < lengths.unsqueeze(1)).long()


def on_last_token(values: Sequence[float] | torch.Tensor, mask: torch.Tensor, dtype=torch.float32) -> torch.Tensor:
    """``(bs, L)``: each row's value on its last response token (verl's reward layout); zero for empty rows."""
    values = torch.as_tensor(values, dtype=dtype).reshape(-1)
    lengths = mask.sum(-1)
    out = torch.zeros(mask.shape, dtype=dtype)
    rows = (lengths > 0).nonzero().flatten()
    out[rows, lengths[rows] - 1] = values[rows]
    return out


def grpo_advantages(rewards: torch.Tensor, uid: Sequence[Any], mask: torch.Tensor) -> torch.Tensor:
    """verl's GRPO outcome advantage, ``(bs, L)``: ``(r - mean) / (std + 1e-6)`` per ``uid`` group, times the mask.

    As in ``verl.trainer.ppo.core_algos.compute_grpo_outcome_advantage``: the standard deviation is unbiased, and
    a group of one response keeps its reward (mean 0, std 1); padding rows form a group of their own.
    """
    rewards = torch.as_tensor(rewards, dtype=torch.float32).reshape(-1)
    out = torch.empty_like(rewards)
    uid = list(uid)
    for group in dict.fromkeys(uid):
        rows = torch.tensor([u == group for u in uid])
        member = rewards[rows]
        mean, std = (member.mean(), member.std()) if len(member) > 1 else (torch.tensor(0.0), torch.tensor(1.0))
        out[rows] = (member - mean) / (std + GRPO_EPSILON)
    return out.unsqueeze(-1) * mask


def rows_batch(
    lengths: Sequence[int] | torch.Tensor,
    *,
    width: int | None = None,
    rewards: Sequence[float] | torch.Tensor | None = None,
    reward_key: str = "rm_scores",
    dtype: torch.dtype = torch.float32,
    advantages: Sequence[float] | torch.Tensor | None = None,
    uid: Sequence[Any] | None = None,
    padding: Sequence[bool] | torch.Tensor | None = None,
    columns: Mapping[str, Sequence[Any]] | None = None,
) -> Batch:
    """Rows given by hand: row ``i`` has ``lengths[i]`` response tokens (0: an empty response).

    :param rewards: each row's reward, on its last response token, under ``reward_key`` (in ``dtype``).
    :param advantages: each row's advantage, on every response token (``advantages``).
    :param uid: each row's group (``non_tensor_batch["uid"]``).
    :param padding: which rows the framework added as padding (``is_padding``).
    :param columns: more per-row dataset columns (``non_tensor_batch``), e.g. ``{"index": [...]}``.
    """
    mask = response_mask(lengths, width)
    tensors: dict[str, torch.Tensor] = {"response_mask": mask}
    if rewards is not None:
        tensors[reward_key] = on_last_token(rewards, mask, dtype)
    if advantages is not None:
        tensors["advantages"] = torch.as_tensor(advantages, dtype=torch.float32).reshape(-1, 1) * mask
    if padding is not None:
        tensors["is_padding"] = torch.as_tensor(padding, dtype=torch.bool)
    non_tensor = {name: np.asarray(list(values), dtype=object) for name, values in (columns or {}).items()}
    if uid is not None:
        non_tensor["uid"] = np.asarray(list(uid), dtype=object)
    return Batch(tensors, non_tensor)


@dataclass(frozen=True)
class GrpoLayout:
    """One GRPO step drawn at random: per row its response length, group, reward and padding flag.

    Real rows come first, group by group (singleton groups last), then verl's padding rows; ``order`` is the
    row order to present them in (the identity, or a shuffle as after verl's sequence balancing).
    """

    lengths: torch.Tensor
    uid: list[str]
    rewards: torch.Tensor
    padding: torch.Tensor
    #: Distinct uids of the real groups, in row order.
    groups: list[str]
    order: torch.Tensor
    #: The longest response a row may have, and the seed the step was drawn with.
    width: int
    seed: int

    @property
    def real_rows(self) -> int:
        return int((~self.padding).sum())


def grpo_layout(
    groups: int = 4,
    group_size: int = 4,
    *,
    width: int = 8,
    min_length: int = 1,
    empty_rows: int = 0,
    singleton_groups: int = 0,
    padding_rows: int = 0,
    shuffle: bool = False,
    uids: Sequence[str] | None = None,
    pad_uid: str | None = None,
    seed: int = 0,
) -> GrpoLayout:
    """Draw a GRPO step: ``groups`` prompts with ``group_size`` responses each, plus what frameworks add.

    Each group gets its own success rate, so group statistics differ between prompts; a response is solved
    (reward 1) or not (0). Lengths are uniform in ``[min_length, width]``.

    :param empty_rows: real rows whose response is empty (no token, reward 0), chosen at random.
    :param singleton_groups: more prompts with a single response each.
    :param padding_rows: verl's padding rows, appended: shared uid, length 0, reward 0, ``is_padding``.
    :param shuffle: present the rows in a seeded random order instead of group by group.
    :param uids: the groups' uids (default ``g0``, ``g1``, ...); ``pad_uid`` that of the padding rows
        (default ``pad`` and a seeded hex string, as verl's ``pad<uuid hex>``).
    """
    if groups < 0 or group_size < 1 or singleton_groups < 0 or padding_rows < 0:
        raise ValueError(
            f"groups={groups}, group_size={group_size}, singleton_groups={singleton_groups}, "
            f"padding_rows={padding_rows}: need groups, singleton_groups, padding_rows >= 0 and group_size >= 1"
        )
    if not 0 <= min_length <= width:
        raise ValueError(f"min_length={min_length} must lie in [0, width={width}]")
    prompts = groups + singleton_groups
    names = list(uids) if uids is not None else [f"g{i}" for i in range(prompts)]
    if len(names) != prompts or len(set(names)) != prompts:
        raise ValueError(f"uids must name {prompts} distinct groups, got {names}")
    gen = torch.Generator().manual_seed(seed)
    sizes = [group_size] * groups + [1] * singleton_groups
    real = sum(sizes)
    if not 0 <= empty_rows <= real:
        raise ValueError(f"empty_rows={empty_rows} must lie in [0, {real}] (the real rows)")
    row_group = torch.repeat_interleave(torch.arange(prompts), torch.tensor(sizes, dtype=torch.int64))
    rate = torch.rand(prompts, generator=gen)
    rewards = (torch.rand(real, generator=gen) < rate[row_group]).float()
    lengths = torch.randint(min_length, width + 1, (real,), generator=gen)
    empty = torch.randperm(real, generator=gen)[:empty_rows]
    lengths[empty] = 0
    rewards[empty] = 0.0
    pad = pad_uid if pad_uid is not None else f"pad{random.Random(seed).getrandbits(128):032x}"
    total = real + padding_rows
    order = torch.randperm(total, generator=gen) if shuffle else torch.arange(total)
    return GrpoLayout(
        lengths=torch.cat([lengths, torch.zeros(padding_rows, dtype=torch.int64)]),
        uid=[names[g] for g in row_group.tolist()] + [pad] * padding_rows,
        rewards=torch.cat([rewards, torch.zeros(padding_rows)]),
        padding=torch.arange(total) >= real,
        groups=names,
        order=order,
        width=width,
        seed=seed,
    )


def grpo_batch(groups: int = 4, group_size: int = 4, *, policy_fields: bool = False, **options: Any) -> Batch:
    """A random GRPO step (:func:`grpo_layout`, which takes the ``options``) as the verl host hands it over.

    Fields: ``response_mask``, ``rm_scores`` (reward on the last token), ``token_level_rewards`` (the same),
    verl's GRPO ``advantages`` (:func:`grpo_advantages`) and ``uid``, ``is_padding`` where there are padding
    rows; with ``policy_fields`` also ``old_log_probs`` (in ``[-2, 0]``) and ``entropy`` (in ``[0, 3]``) on
    response tokens.
    """
    layout = grpo_layout(groups, group_size, **options)
    order = layout.order
    uid = [layout.uid[i] for i in order.tolist()]
    mask = response_mask(layout.lengths[order], layout.width)
    rewards = layout.rewards[order]
    scores = on_last_token(rewards, mask)
    tensors = {
        "response_mask": mask,
        "rm_scores": scores,
        "token_level_rewards": scores.clone(),
        "advantages": grpo_advantages(rewards, uid, mask),
    }
    if layout.padding.any():
        tensors["is_padding"] = layout.padding[order]
    if policy_fields:
        gen = torch.Generator().manual_seed(layout.seed + 1)
        tensors["old_log_probs"] = -torch.rand(mask.shape, generator=gen) * 2 * mask
        tensors["entropy"] = torch.rand(mask.shape, generator=gen) * 3 * mask
    return Batch(tensors, {"uid": np.asarray(uid, dtype=object)})


class PromptDataset:
    """A train dataset of prompts whose ids are in column ``index``, as a session's train sampler reads one.

    :param columns: further dataset columns, one value per prompt (e.g. ``{"domain": [...]}`` for a mix or a
        curriculum by domain).
    """

    def __init__(self, ids: Sequence[Any], columns: Mapping[str, Sequence[Any]] | None = None) -> None:
        self.ids = list(ids)
        self.extra = {name: list(values) for name, values in (columns or {}).items()}
        for name, values in self.extra.items():
            if len(values) != len(self.ids):
                raise ValueError(f"column {name!r} has {len(values)} values for {len(self.ids)} prompts")

    def __len__(self) -> int:
        return len(self.ids)

    def columns(self) -> list[str]:
        return ["index", *self.extra]

    def column(self, name: str) -> list[Any]:
        return self.extra[name] if name in self.extra else self.ids
