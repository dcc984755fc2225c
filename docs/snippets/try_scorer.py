"""Run the tutorial scorer on a hand-made batch: two groups of three responses and one padding row."""

import numpy as np
import torch
from length_zscore import LengthZScoreScorer

from dataflex_core import Batch

lengths = torch.tensor([2, 4, 6, 5, 5, 5, 3])  # the last row is padding added by verl
response_mask = (torch.arange(8) < lengths[:, None]).long()  # (7, 8)
batch = Batch(
    {"response_mask": response_mask, "is_padding": torch.tensor([0, 0, 0, 0, 0, 0, 1]).bool()},
    {"uid": np.array(["a", "a", "a", "b", "b", "b", "pad"], dtype=object)},
)
scores = LengthZScoreScorer().score(batch, step_id=0)
print(scores)  # group a: short/average/long -> -1.22, 0, 1.22; group b: equal lengths -> 0; padding -> 0
