"""Tutorial scorer: how long each response is compared with the other answers to the same prompt."""

import torch

from dataflex_core import Scorer, group_index, register_scorer, segment_mean, segment_var, valid_sample_mask


@register_scorer("length_zscore")
class LengthZScoreScorer(Scorer):
    """Response length as a z-score within its GRPO group.

    score_i = (len_i - mean_g(len)) / (std_g(len) + eps), where len_i is the
    number of response tokens of sample i and g its group (same ``uid``).
    Padding rows and rows with an empty response are left out of the group
    statistics and score 0; a group whose responses all have the same length
    scores 0. Output: float32 of shape (bs,).
    """

    requires = []  # response_mask (and is_padding) are always there
    timing = "post_advantage"
    granularity = "response"  # one score per sample: shape (bs,)
    needs_groups = True  # reads uid, so it is refused under PPO+GAE

    def __init__(self, eps: float = 1e-6, **kwargs):
        super().__init__(**kwargs)
        self.eps = eps

    @torch.no_grad()
    def score(self, batch, step_id, **ctx):
        mask = batch.batch["response_mask"]  # (bs, L)
        length = mask.sum(-1).to(torch.float32)  # (bs,)
        valid = valid_sample_mask(batch)  # (bs,) False for padding and empty rows
        index, groups = group_index(batch.non_tensor_batch["uid"], device=length.device)
        mean = segment_mean(length, index, groups, valid)  # (groups,)
        std = segment_var(length, index, groups, valid).sqrt()
        z = (length - mean[index]) / (std[index] + self.eps)
        return torch.where(valid, z, torch.zeros_like(z))
