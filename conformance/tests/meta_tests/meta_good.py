"""Small correct components: the suite must certify every one of them.

They are written the way the core contract asks (core helpers for validity,
groups and mean-one), so a check that fails on them is a bug in the suite.
"""

from __future__ import annotations

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
    valid_sample_mask,
    valid_token_mask,
)


class MeanAbsAdvantage(Scorer):
    name = "good_mean_abs_advantage"
    requires = ["advantages"]
    granularity = "prompt"

    @torch.no_grad()
    def score(self, batch, step_id, **ctx):
        adv = batch.batch["advantages"]
        return masked_seq_mean(adv.abs(), batch.batch["response_mask"])


class GroupSolveRate(Scorer):
    name = "good_group_solve_rate"
    requires = ["rm_scores"]
    granularity = "prompt"
    needs_groups = True
    score_range = (0.0, 1.0)

    @torch.no_grad()
    def score(self, batch, step_id, **ctx):
        mask = batch.batch["response_mask"]
        reward = (batch.batch["rm_scores"].float() * mask).sum(-1)
        index, groups = group_index(batch.non_tensor_batch["uid"], device=reward.device)
        rate = segment_mean((reward > 0.5).float(), index, groups, valid_sample_mask(batch))
        return rate[index]


class TokenProb(Scorer):
    name = "good_token_prob"
    requires = ["old_log_probs"]
    granularity = "token"

    @torch.no_grad()
    def score(self, batch, step_id, **ctx):
        return batch.batch["old_log_probs"].float().exp() * batch.batch["response_mask"]


class DomainReward(Scorer):
    name = "good_domain_reward"
    requires = ["rm_scores"]
    granularity = "domain"

    @torch.no_grad()
    def score(self, batch, step_id, domains=(), domain_index=None, **ctx):
        reward = batch.batch["rm_scores"].float().sum(-1)
        valid = valid_sample_mask(batch)
        return segment_mean(reward, domain_index, len(domains), valid)


class Softmax(Reweighter):
    name = "good_softmax"
    accepts_granularity = ("prompt", "response", "token")

    def __init__(self, temperature: float = 1.0, **kwargs):
        super().__init__(**kwargs)
        self.temperature = temperature

    @torch.no_grad()
    def act(self, scores, batch, **ctx):
        s = scores.float() / self.temperature
        valid = valid_sample_mask(batch) if s.dim() == 1 else valid_token_mask(batch)
        s = torch.where(valid, s, torch.full_like(s, float("-inf")))
        if valid.any():
            s = s - s[valid].max()
        w = torch.where(valid, torch.exp(s), torch.zeros_like(s))
        return mean_one(w, batch)


class Focal(Reweighter):
    """(1 - p)^gamma on solve rates; anything outside [0, 1] is rejected."""

    name = "good_focal"
    accepts_granularity = ("prompt", "response")
    score_range = (0.0, 1.0)

    def __init__(self, gamma: float = 2.0, **kwargs):
        super().__init__(**kwargs)
        self.gamma = gamma

    @torch.no_grad()
    def act(self, scores, batch, **ctx):
        p = scores.float()
        valid = valid_sample_mask(batch) if p.dim() == 1 else valid_token_mask(batch)
        outside = valid & ((p < 0) | (p > 1))
        if outside.any():
            raise ValueError(f"good_focal reads solve rates in [0, 1], got {p[outside][0].item()}")
        w = torch.where(valid, (1.0 - p.clamp(0, 1)) ** self.gamma + 1e-3, torch.zeros_like(p))
        return mean_one(w, batch)


class ResponseMaskSoftmax(Reweighter):
    """Takes row validity from ``response_mask`` alone, as a plugin written for verl may:
    correct, because hosts remove padding rows before calling components."""

    name = "good_response_mask_validity"
    accepts_granularity = ("prompt", "response", "token")

    @torch.no_grad()
    def act(self, scores, batch, **ctx):
        s = scores.float()
        mask = batch.batch["response_mask"].bool()
        valid = mask.any(-1) if s.dim() == 1 else mask
        s = torch.where(valid, s, torch.full_like(s, float("-inf")))
        if valid.any():
            s = s - s[valid].max()
        w = torch.where(valid, torch.exp(s), torch.zeros_like(s))
        return (w * valid.sum() / w.sum()).float() if valid.any() else w


class CentredOnNonEmptyRows(Scorer):
    """Centres scores on the mean over rows with a response (no ``is_padding`` needed: hosts strip padding)."""

    name = "good_centred_on_nonempty_rows"
    requires = ["advantages"]

    @torch.no_grad()
    def score(self, batch, step_id, **ctx):
        mask = batch.batch["response_mask"]
        per_row = masked_seq_mean(batch.batch["advantages"].abs().float(), mask)
        nonempty = mask.bool().any(-1)
        centre = per_row[nonempty].mean() if nonempty.any() else per_row.new_zeros(())
        return per_row - centre


class KeyedReward(Scorer):
    """Reads the reward field its ``reward_key`` names: ``requires`` is set per instance."""

    name = "good_keyed_reward"
    requires = ["rm_scores"]

    def __init__(self, reward_key: str = "rm_scores", **kwargs):
        super().__init__(**kwargs)
        self.reward_key = reward_key
        self.requires = [reward_key]

    @torch.no_grad()
    def score(self, batch, step_id, **ctx):
        return (batch.batch[self.reward_key].float() * batch.batch["response_mask"]).sum(-1)


class TopHalf(Selector):
    name = "good_top_half"

    @torch.no_grad()
    def act(self, scores, batch, **ctx):
        valid = valid_sample_mask(batch)
        s = torch.where(valid, scores.float(), torch.full_like(scores, float("-inf"), dtype=torch.float32))
        k = int(valid.sum()) // 2 + (1 if int(valid.sum()) % 2 else 0)
        order = torch.argsort(s, descending=True, stable=True)
        return torch.sort(order[:k]).values


class SoftmaxMixer(Mixer):
    name = "good_softmax_mixer"
    accepts_granularity = ("domain",)

    @torch.no_grad()
    def act(self, scores, batch, **ctx):
        s = scores.float()
        s = torch.nan_to_num(s - s.max())
        return torch.softmax(s, dim=0)


GOOD = [
    MeanAbsAdvantage,
    GroupSolveRate,
    TokenProb,
    DomainReward,
    Softmax,
    Focal,
    ResponseMaskSoftmax,
    CentredOnNonEmptyRows,
    KeyedReward,
    TopHalf,
    SoftmaxMixer,
]
