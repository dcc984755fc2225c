"""Why weights have mean one in the unit of verl's loss_agg_mode: a small, runnable illustration.

verl's agg_loss divides by token or sequence counts, never by the sum of the
weights, so whatever the weights average to multiplies the learning rate.
"""

import torch

from dataflex_core import Batch, masked_seq_mean, normalize_mean_one, valid_sample_mask, valid_token_mask


def agg_loss(loss, mask, mode):
    """verl's loss aggregations on one batch (per-token loss (bs, L), mask (bs, L))."""
    mask = mask.float()
    if mode == "token-mean":
        return (loss * mask).sum() / mask.sum()
    if mode == "seq-mean-token-sum":
        return (loss * mask).sum(-1).mean()
    if mode == "seq-mean-token-mean":
        return ((loss * mask).sum(-1) / mask.sum(-1).clamp(min=1)).mean()
    raise ValueError(mode)


def token_weights(weights, batch, mode):
    """(bs,) or (bs, L) weights -> per-token weights with mean one in the unit ``mode`` averages over."""
    valid = valid_token_mask(batch)
    w = weights[:, None].expand(valid.shape) if weights.dim() == 1 else weights
    w = torch.where(valid, w.float(), 0.0)
    if mode == "seq-mean-token-mean":  # the mean over valid sequences is one
        rows = valid_sample_mask(batch)
        return w / masked_seq_mean(w, valid)[rows].mean()
    return normalize_mean_one(w, valid)  # the mean over valid tokens is one


mask = torch.tensor([[1, 1, 1, 1, 1, 1], [1, 1, 0, 0, 0, 0], [1, 1, 1, 0, 0, 0]])
batch = Batch({"response_mask": mask})
sample_w = torch.tensor([0.5, 1.5, 1.0])  # mean one over samples: fine per sample ...
loss = torch.full(mask.shape, 2.0)  # every token has loss 2: the weighted loss should be 2 too

for mode in ("token-mean", "seq-mean-token-sum", "seq-mean-token-mean"):
    naive = agg_loss(loss * sample_w[:, None], mask, mode) / agg_loss(loss, mask, mode)
    fixed = agg_loss(loss * token_weights(sample_w, batch, mode), mask, mode) / agg_loss(loss, mask, mode)
    print(f"{mode:22s} step scale: broadcast only {naive.item():.3f}, renormalised {fixed.item():.3f}")
