"""A synthetic GRPO rollout batch shaped like the one a host hands to DataFlex, and a session mounted on it.

Rows are shuffled groups (verl's batch balancing reorders rows) of ragged responses, a 0/1 outcome reward on the
last response token and the GRPO group-normalised advantage over the response, so group statistics see the mix of
solved, failed and mixed groups a real step has. Only the fields asked for are built (128 MiB each at 8192 x 4096).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable

import numpy as np
import torch

from dataflex_core import Batch, segment_mean, segment_var
from dataflex_core.session import DataFlexSession, FieldSupport, HostCapabilities

#: Fields every batch carries: components read them through the core's validity helpers.
ALWAYS = ("response_mask", "is_padding")
#: Field names whose values are the outcome reward on the last token.
REWARD_FIELDS = ("rm_scores", "token_level_scores", "token_level_rewards")
LOG_PROB_FIELDS = ("old_log_probs", "ref_log_prob", "rollout_log_probs", "log_probs")
INT_FIELDS = ("responses", "prompts", "input_ids", "position_ids", "attention_mask", "loss_mask")
#: The canonical fields the bench's host provides (every one this module builds, and the group ids).
HOST_FIELDS = (
    "response_mask", "advantages", "returns", *REWARD_FIELDS, "old_log_probs", "entropy", "rollout_log_probs",
    "ref_log_prob", "values", "uid",
)  # fmt: skip
#: What a host passes besides the batch.
CONTEXT = {"loss_agg_mode": "token-mean"}
#: verl pads a batch to a multiple of its data-parallel size x mini-batches: a handful of rows (8 of 8192).
PADDING_ROWS = 8


def shape_label(num_groups: int, group_size: int, length: int) -> str:
    return f"bs={num_groups * group_size} ({num_groups}x{group_size}) L={length}"


class SyntheticGRPO:
    """Builds the fields of one batch on demand, from one seeded generator."""

    def __init__(self, num_groups: int, group_size: int, length: int, *, seed: int = 0) -> None:
        self.num_groups, self.group_size, self.length = num_groups, group_size, length
        self.bs = num_groups * group_size
        self.gen = torch.Generator().manual_seed(seed)
        group_of_row = torch.arange(self.bs) // group_size
        self.group = group_of_row[torch.randperm(self.bs, generator=self.gen)]
        uids = np.array([str(uuid.UUID(int=int(i) + seed * 1_000_003)) for i in range(num_groups)], dtype=object)
        self.uid = uids[self.group.numpy()]
        lengths = torch.randint(1, length + 1, (self.bs,), generator=self.gen)
        self.mask = torch.arange(length).unsqueeze(0) < lengths.unsqueeze(1)
        self.last = lengths - 1
        solve_rate = torch.rand(num_groups, generator=self.gen)[self.group]
        self.reward = (torch.rand(self.bs, generator=self.gen) < solve_rate).float()

    def grpo_advantage(self) -> torch.Tensor:
        """(r - group mean) / (group std + eps), the GRPO outcome advantage per row."""
        mean = segment_mean(self.reward, self.group, self.num_groups)[self.group]
        std = segment_var(self.reward, self.group, self.num_groups).sqrt()[self.group]
        return (self.reward - mean) / (std + 1e-6)

    def field(self, name: str) -> torch.Tensor:
        bs, length, gen = self.bs, self.length, self.gen
        mask_f = self.mask.float()
        if name == "response_mask":
            return self.mask.to(torch.int64)  # verl's dtype for this field
        if name == "is_padding":
            return torch.zeros(bs, dtype=torch.bool)
        if name in REWARD_FIELDS:
            out = torch.zeros(bs, length)
            out[torch.arange(bs), self.last] = self.reward
            return out
        if name in ("advantages", "returns"):
            return self.grpo_advantage().unsqueeze(1) * mask_f
        if name in LOG_PROB_FIELDS:
            return -torch.empty(bs, length).exponential_(1.0, generator=gen) * mask_f
        if name == "entropy":
            return torch.rand(bs, length, generator=gen) * 3.0 * mask_f
        if name == "values":
            return torch.randn(bs, length, generator=gen) * mask_f
        if name in INT_FIELDS:
            return torch.randint(0, 32000, (bs, length), generator=gen)
        return torch.randn(bs, length, generator=gen) * mask_f

    def batch(self, fields: Iterable[str], device: torch.device | str = "cpu") -> Batch:
        """A :class:`dataflex_core.Batch` with ``fields`` (plus the always-present ones) and ``uid``."""
        names = list(dict.fromkeys([*ALWAYS, *fields]))
        tensors = {name: self.field(name).to(device) for name in names if name != "uid"}
        return Batch(tensors, {"uid": self.uid})


def mounted_session(block: dict) -> DataFlexSession:
    """A session for ``block``, mounted as verl's V1 host mounts it (token loss unit, GRPO), on the fields above."""
    host = HostCapabilities(name="benchmark host", fields={name: FieldSupport(True) for name in HOST_FIELDS})
    session = DataFlexSession(block)
    session.mount(host, loss_unit="token", ctx=CONTEXT, adv_estimator="grpo", is_group_estimator=lambda _: True)
    return session


def padded(batch: Batch, rows: int = PADDING_ROWS, seed: int = 0) -> Batch:
    """``batch`` with ``rows`` padding rows as verl's V1 trainer appends them (``upsample_batch_to_divisible_size``:
    an empty mask, rewards 0, one shared ``pad`` uid, row 0's values elsewhere), scattered at seeded places as
    ``_balance_batch`` reorders them."""
    bs = len(batch)
    gen = torch.Generator().manual_seed(seed)
    padding = torch.zeros(bs + rows, dtype=torch.bool)
    padding[torch.randperm(bs + rows, generator=gen)[:rows]] = True
    source = torch.zeros(bs + rows, dtype=torch.long)
    source[~padding] = torch.arange(bs)
    tensors = {}
    for name, value in batch.batch.items():
        out = value[source]
        if name in ("response_mask", *REWARD_FIELDS):
            out[padding] = 0
        tensors[name] = out
    tensors["is_padding"] = padding
    uid = np.asarray(batch.non_tensor_batch["uid"], dtype=object)[source.numpy()]
    uid[padding.numpy()] = "pad" + uuid.UUID(int=seed).hex
    return Batch(tensors, {"uid": uid})


def fresh(batch: Batch) -> Batch:
    """The batch a host reads for a new step: new copies of every tensor and of the uid array."""
    tensors = {name: value.clone() for name, value in batch.batch.items()}
    return Batch(tensors, {name: value.copy() for name, value in batch.non_tensor_batch.items()})


def field_bytes(batch: Batch, fields) -> int:
    """Bytes of the named tensors of ``batch`` (and of the uid array's pointers when ``uid`` is named)."""
    total = sum(batch.batch[n].numel() * batch.batch[n].element_size() for n in fields if n in batch.batch)
    return total + (batch.non_tensor_batch["uid"].nbytes if "uid" in fields else 0)
