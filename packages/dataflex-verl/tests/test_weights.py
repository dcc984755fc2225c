"""The unit each verl aggregation normalises in, and the queue's jagged layout (no Ray needed).

Normalisation, composition and the weight metrics are core's: ``packages/dataflex-core/tests/test_step_weights.py``.
"""

from __future__ import annotations

import pytest
import torch

from dataflex_core import ConfigError
from dataflex_core.step import SEQUENCE_UNIT, TOKEN_UNIT
from dataflex_verl.queue_io import padded_to_jagged, rows_to_jagged
from dataflex_verl.weights import loss_unit


@pytest.mark.parametrize(
    ("mode", "policy", "unit"),
    [
        ("token-mean", "vanilla", TOKEN_UNIT),
        ("token-sum", "vanilla", TOKEN_UNIT),
        ("seq-mean-token-sum", "vanilla", TOKEN_UNIT),
        ("seq-mean-token-sum-norm", "gspo", TOKEN_UNIT),
        ("seq-mean-token-mean", "vanilla", SEQUENCE_UNIT),
        ("token-mean", "sapo", SEQUENCE_UNIT),
    ],
)
def test_loss_unit_follows_the_aggregation_verl_uses(mode, policy, unit):
    assert loss_unit(mode, policy) == unit


def test_unknown_loss_agg_mode_is_refused():
    with pytest.raises(ConfigError, match="loss_agg_mode='seq-mean'"):
        loss_unit("seq-mean")


def test_rows_to_jagged_repeats_each_rows_weight_over_its_masked_tokens():
    offsets = torch.tensor([0, 1, 4, 4])
    mask = torch.tensor([True, True, False, True])
    jagged = rows_to_jagged(torch.tensor([2.0, 3.0, 4.0]), offsets, mask)
    assert [row.tolist() for row in jagged.unbind()] == [[2.0], [3.0, 0.0, 3.0], []]


def test_rows_to_jagged_leaves_the_row_values_it_was_given_unchanged():
    # the zeros are filled in place into the repeat: a row of length 1 must not alias the caller's tensor
    weights = torch.tensor([2.0, 3.0])
    out = rows_to_jagged(weights, torch.tensor([0, 1, 2]), torch.tensor([False, True]))
    assert [row.tolist() for row in out.unbind()] == [[0.0], [3.0]]
    assert weights.tolist() == [2.0, 3.0]


def test_padded_to_jagged_keeps_each_rows_length():
    offsets = torch.tensor([0, 1, 4, 4])
    jagged = padded_to_jagged(torch.arange(9.0).reshape(3, 3), offsets)
    assert [row.tolist() for row in jagged.unbind()] == [[0.0], [3.0, 4.0, 5.0], []]
