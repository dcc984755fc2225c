"""Batches for the mixer tests, built the way a host hands them over."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from dataflex_core import Batch


def make_batch(lengths, uid=None, padding=None, max_len=None) -> Batch:
    """A batch whose row ``i`` has ``lengths[i]`` response tokens."""
    lengths = torch.as_tensor(lengths)
    width = int(max_len or max(int(lengths.max()), 1))
    mask = (torch.arange(width).unsqueeze(0) < lengths.unsqueeze(1)).long()
    tensors = {"response_mask": mask}
    if padding is not None:
        tensors["is_padding"] = torch.as_tensor(padding, dtype=torch.bool)
    non_tensor = {} if uid is None else {"uid": np.asarray(uid, dtype=object)}
    return Batch(tensors, non_tensor)


@pytest.fixture
def batch_factory():
    return make_batch
