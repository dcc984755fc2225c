"""Deliberately broken components, each breaking one contract in one way.

``BROKEN`` maps each class to the one check that must catch it; the meta
tests assert that exactly that check fails (others may only be blocked by it).
"""

from __future__ import annotations

import time

import torch

from dataflex_core import (
    Mixer,
    Reweighter,
    Scorer,
    Selector,
    group_index,
    masked_seq_mean,
    mean_one,
    segment_mean,
    valid_mask_for,
)


def _wrong_device(t: torch.Tensor) -> torch.Tensor:
    """Another device than the input's: the CPU for CUDA input, else ``meta`` (no CUDA needed)."""
    return t.to("cpu" if t.is_cuda else "meta")


class WrongShapeScorer(Scorer):
    name = "broken_wrong_shape"
    requires = ["advantages"]

    @torch.no_grad()
    def score(self, batch, step_id, **ctx):
        return masked_seq_mean(batch.batch["advantages"].abs(), batch.batch["response_mask"]).unsqueeze(-1)


class IntegerScorer(Scorer):
    name = "broken_integer_scores"

    def score(self, batch, step_id, **ctx):
        return batch.batch["response_mask"].sum(-1)


class NanOnEmptyRowsScorer(Scorer):
    name = "broken_nan_on_empty_rows"
    requires = ["advantages"]

    @torch.no_grad()
    def score(self, batch, step_id, **ctx):
        mask = batch.batch["response_mask"].float()
        return (batch.batch["advantages"].float().abs() * mask).sum(-1) / mask.sum(-1)


class UndeclaredFieldScorer(Scorer):
    name = "broken_undeclared_field"
    requires = ["advantages"]

    @torch.no_grad()
    def score(self, batch, step_id, **ctx):
        mask = batch.batch["response_mask"]
        return masked_seq_mean(batch.batch["advantages"].abs() + batch.batch["values"].abs(), mask)


class UndeclaredGroupsScorer(Scorer):
    name = "broken_undeclared_groups"
    requires = ["advantages"]

    @torch.no_grad()
    def score(self, batch, step_id, **ctx):
        size = len(set(batch.non_tensor_batch["uid"].tolist()))
        return masked_seq_mean(batch.batch["advantages"].abs(), batch.batch["response_mask"]) * (size > 0)


class MutatingScorer(Scorer):
    name = "broken_mutates_batch"
    requires = ["advantages"]

    @torch.no_grad()
    def score(self, batch, step_id, **ctx):
        adv = batch.batch["advantages"]
        adv.abs_()
        return masked_seq_mean(adv, batch.batch["response_mask"])


class GraphScorer(Scorer):
    name = "broken_keeps_graph"
    requires = ["advantages"]

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.scale = torch.nn.Parameter(torch.ones(()))

    def score(self, batch, step_id, **ctx):
        adv = batch.batch["advantages"]
        return masked_seq_mean(adv.abs(), batch.batch["response_mask"]) * self.scale.to(adv.device, adv.dtype)


class NondeterministicScorer(Scorer):
    name = "broken_nondeterministic"
    requires = ["advantages"]

    @torch.no_grad()
    def score(self, batch, step_id, **ctx):
        adv = batch.batch["advantages"]
        noise = torch.rand(adv.shape[0], device=adv.device)
        return masked_seq_mean(adv.abs(), batch.batch["response_mask"]) + noise.to(adv.dtype)


class ContiguousGroupsScorer(Scorer):
    """Takes each run of equal adjacent uids as a group (verl's balance_batch reorders rows)."""

    name = "broken_contiguous_groups"
    requires = ["advantages"]
    needs_groups = True

    @torch.no_grad()
    def score(self, batch, step_id, **ctx):
        adv = batch.batch["advantages"]
        per_row = masked_seq_mean(adv.abs().float(), batch.batch["response_mask"])
        uid = batch.non_tensor_batch["uid"]
        starts = torch.tensor([i > 0 and uid[i] != uid[i - 1] for i in range(len(uid))], dtype=torch.long)
        index = starts.cumsum(0).to(adv.device)
        groups = int(index.max()) + 1 if index.numel() else 0
        return segment_mean(per_row, index, groups, valid_mask_for(per_row, batch))[index]


class WrongDeviceScorer(Scorer):
    name = "broken_wrong_device_scorer"
    requires = ["advantages"]

    @torch.no_grad()
    def score(self, batch, step_id, **ctx):
        return _wrong_device(masked_seq_mean(batch.batch["advantages"].abs(), batch.batch["response_mask"]))


def _softmax(scores, batch):
    s = scores.float()
    valid = valid_mask_for(s, batch)
    s = torch.where(valid, s, torch.full_like(s, float("-inf")))
    if valid.any():
        s = s - s[valid].max()
    return torch.where(valid, torch.exp(s), torch.zeros_like(s)), valid


class EmptyRowsInGroupMeanScorer(Scorer):
    """Response length over the group's mean length, counting empty-response rows in the mean.

    A group of two 4-token answers and one empty row scores [1.5, 1.5, 0] instead of [1, 1].
    """

    name = "broken_empty_rows_in_group_mean"
    needs_groups = True

    @torch.no_grad()
    def score(self, batch, step_id, **ctx):
        length = batch.batch["response_mask"].float().sum(-1)
        index, groups = group_index(batch.non_tensor_batch["uid"], device=length.device)
        every_row = torch.ones_like(length, dtype=torch.bool)
        return length / segment_mean(length, index, groups, every_row)[index].clamp(min=1.0)


class MutatesEmptyRowsScorer(Scorer):
    """Zeroes the log-probs of empty-response rows in place: a mutation only empty rows show."""

    name = "broken_mutates_empty_rows"
    requires = ["old_log_probs"]

    @torch.no_grad()
    def score(self, batch, step_id, **ctx):
        mask = batch.batch["response_mask"]
        log_probs = batch.batch["old_log_probs"]
        log_probs[~mask.bool().any(-1)] = 0.0
        return masked_seq_mean(log_probs.float().exp(), mask)


class EmptyRowsWeighedReweighter(Reweighter):
    """Mean one over valid units, but empty rows and masked tokens keep weight 1."""

    name = "broken_weighs_empty_rows"

    @torch.no_grad()
    def act(self, scores, batch, **ctx):
        w, valid = _softmax(scores, batch)
        padding = batch.batch.get("is_padding")
        padding = torch.zeros(w.shape[0], dtype=torch.bool, device=w.device) if padding is None else padding.bool()
        padding = padding if w.dim() == 1 else padding.reshape(-1, 1).expand_as(w)
        return torch.where(valid, mean_one(w, batch), (~padding).float())


class MeanNotOneReweighter(Reweighter):
    name = "broken_mean_not_one"
    accepts_granularity = ("prompt", "response", "token")

    @torch.no_grad()
    def act(self, scores, batch, **ctx):
        w, _ = _softmax(scores, batch)
        return mean_one(w, batch) * 1.031


class NanOnConstantReweighter(Reweighter):
    """Standardises the scores: constant scores give 0/0."""

    name = "broken_nan_on_constant"

    @torch.no_grad()
    def act(self, scores, batch, **ctx):
        s = scores.float()
        valid = valid_mask_for(s, batch)
        if not valid.any():
            return torch.zeros_like(s)
        z = (s - s[valid].mean()) / s[valid].std(unbiased=False)
        w = torch.where(valid, torch.sigmoid(z), torch.zeros_like(z))
        return w / w[valid].mean()


class NegativeWeightsReweighter(Reweighter):
    name = "broken_negative_weights"

    @torch.no_grad()
    def act(self, scores, batch, **ctx):
        s = scores.double()
        valid = valid_mask_for(s, batch)
        if not valid.any():
            return torch.zeros_like(s, dtype=torch.float32)
        centred = s - s[valid].mean()
        w = 1.0 + 3.0 * centred / centred[valid].abs().max().clamp(min=1e-300)
        return torch.where(valid, w, torch.zeros_like(w)).float()


class WrongDeviceReweighter(Reweighter):
    name = "broken_wrong_device_weights"

    @torch.no_grad()
    def act(self, scores, batch, **ctx):
        w, _ = _softmax(scores, batch)
        return _wrong_device(mean_one(w, batch))


class EmptyRowsZScoreReweighter(Reweighter):
    """sigmoid of z-scores whose mean and spread include the empty-response rows' scores."""

    name = "broken_empty_rows_in_zscores"

    @torch.no_grad()
    def act(self, scores, batch, **ctx):
        s = scores.double()
        z = (s - s.mean()) / (s.std(unbiased=False) + 1e-6)
        return mean_one(torch.sigmoid(z).float(), batch)


class QuadraticReweighter(Reweighter):
    """Weights from each row's rank, found by comparing every pair of rows: O(bs^2) time.

    Its second call on an instance stalls for 20 ms of CPU time, as one call
    does on a busy machine (a page fault, a collection): the scaling check
    must not read that one call as the cost and stop growing the batch at a
    size where the blocked comparison's fixed work hides the growth (CI once
    certified this component so).
    """

    name = "broken_quadratic_time"

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self._calls = 0

    @torch.no_grad()
    def act(self, scores, batch, **ctx):
        self._calls += 1
        if self._calls == 2:
            stall_until = time.thread_time() + 0.02
            while time.thread_time() < stall_until:
                pass
        s = scores.float()
        valid = valid_mask_for(s, batch)
        s = torch.where(valid, s, torch.full_like(s, torch.inf))  # never below a valid row
        rank = torch.empty_like(s)
        for start in range(0, s.shape[0], 256):  # blocks of rows, each against every row
            rank[start : start + 256] = (s[start : start + 256, None] > s[None, :]).sum(1).float()
        return mean_one(torch.where(valid, 1.0 + rank, torch.zeros_like(rank)), batch)


class GuideSoftmax(Reweighter):
    """The user guide's softmax reweighter, verbatim: every row it is given weighs, empty ones too."""

    name = "softmax"

    def __init__(self, temperature: float = 1.0, **kwargs):
        super().__init__(**kwargs)
        self.temperature = temperature

    def act(self, scores, batch, **ctx):
        s = scores.float().flatten()
        w = torch.softmax(s / self.temperature, dim=0) * s.numel()
        return w / w.mean().clamp(min=1e-8)


class ClampingRangeReweighter(Reweighter):
    """Declares it accepts [0, 1] but silently clamps anything else instead of raising."""

    name = "broken_clamps_out_of_range"
    score_range = (0.0, 1.0)

    @torch.no_grad()
    def act(self, scores, batch, **ctx):
        w, _ = _softmax(scores.float().clamp(0.0, 1.0), batch)
        return mean_one(w, batch)


class OverreachingRangeScorer(Scorer):
    """Declares [0, 1] scores but returns signed advantages."""

    name = "broken_leaves_declared_range"
    requires = ["advantages"]
    score_range = (0.0, 1.0)

    @torch.no_grad()
    def score(self, batch, step_id, **ctx):
        return masked_seq_mean(batch.batch["advantages"], batch.batch["response_mask"])


class RepeatingSelector(Selector):
    name = "broken_repeating_selector"

    @torch.no_grad()
    def act(self, scores, batch, **ctx):
        return torch.zeros(scores.shape[0], dtype=torch.long, device=scores.device)


class OverSummingMixer(Mixer):
    name = "broken_over_summing_mixer"
    accepts_granularity = ("domain",)

    @torch.no_grad()
    def act(self, scores, batch, **ctx):
        return 2.0 * torch.softmax(torch.nan_to_num(scores.float() - scores.float().max()), dim=0)


class PaddingAsRealReweighter(Reweighter):
    """Takes the framework's padding rows for real ones (a row is valid when it has a response *or* is padding):
    right on every batch without padding, wrong on verl's padded ones."""

    name = "broken_padding_as_real"

    @torch.no_grad()
    def act(self, scores, batch, **ctx):
        rows = batch.batch["response_mask"].bool().any(-1)
        padding = batch.batch.get("is_padding")
        if padding is not None:
            rows = rows | padding.bool()
        ones = torch.ones(rows.shape, dtype=torch.float32, device=rows.device)
        weights = torch.where(rows, ones, torch.zeros_like(ones))
        if scores.dim() == 2:
            weights = weights.unsqueeze(-1) * batch.batch["response_mask"].float()
            return weights * (batch.batch["response_mask"].bool().sum() / weights.sum().clamp(min=1))
        return weights


#: broken component -> the check that must catch it.
BROKEN = {
    WrongShapeScorer: "check_output_shape",
    IntegerScorer: "check_output_dtype",
    NanOnEmptyRowsScorer: "check_output_finite",
    UndeclaredFieldScorer: "check_reads_only_declared",
    UndeclaredGroupsScorer: "check_needs_groups_declared",
    MutatingScorer: "check_no_input_mutation",
    GraphScorer: "check_no_autograd_graph",
    NondeterministicScorer: "check_deterministic",
    ContiguousGroupsScorer: "check_permutation_equivariant",
    WrongDeviceScorer: "check_output_device",
    EmptyRowsInGroupMeanScorer: "check_empty_rows_ignored",
    MutatesEmptyRowsScorer: "check_no_input_mutation",
    EmptyRowsWeighedReweighter: "check_invalid_units_zero",
    MeanNotOneReweighter: "check_mean_one",
    NanOnConstantReweighter: "check_output_finite",
    NegativeWeightsReweighter: "check_weights_nonnegative",
    WrongDeviceReweighter: "check_output_device",
    EmptyRowsZScoreReweighter: "check_empty_rows_ignored",
    PaddingAsRealReweighter: "check_framework_padding_ignored",
    QuadraticReweighter: "check_scales_linearly",
    GuideSoftmax: "check_invalid_units_zero",
    ClampingRangeReweighter: "check_rejects_out_of_range",
    OverreachingRangeScorer: "check_scores_in_declared_range",
    RepeatingSelector: "check_selection_valid",
    OverSummingMixer: "check_proportions_sum_to_one",
}
