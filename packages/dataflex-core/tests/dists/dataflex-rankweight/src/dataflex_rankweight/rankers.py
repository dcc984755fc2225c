"""One ranker: the scores themselves are the keys (or their negation), so rows rank by their score."""

import torch

from dataflex_core import valid_sample_mask

from .ranker import Ranker


class ScoreOrder(Ranker):
    """Ranks rows by score, highest first unless ``ascending``."""

    name = "score_order"

    def __init__(self, ascending: bool = False, **kwargs):
        super().__init__(**kwargs)
        self.ascending = ascending

    def act(self, scores, batch, **ctx):
        keys = scores.to(torch.float32)
        keys = -keys if self.ascending else keys
        return torch.where(valid_sample_mask(batch), keys, torch.zeros_like(keys))
