"""The token step reads its (bs, L) tensors once per fact: the pass that divides the factor by its mean gives the
metrics their statistics and the step its finiteness check, the scores' check spares the actuator its own. Each
shortcut gives what the long way gives, bit for bit, and is not taken when the tensor changed."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import dataflex_core.inputs as inputs_module
import dataflex_core.step.weights as weights_module
from dataflex_core import Batch, InvalidOutputError, actuator_scores, prepare_batch
from dataflex_core.contracts import check_scores, check_weights
from dataflex_core.precomputed import StepInputs
from dataflex_core.step import SEQUENCE_UNIT, TOKEN_UNIT, finalize, weight_metrics
from dataflex_core.tensor_facts import FINITE, ROW_STATS, recall, remember


def _batch(seed: int, bs: int = 300, length: int = 1900, padding_every: int = 37) -> Batch:
    """Several numpy chunks and row blocks, empty rows, padding rows (with an empty mask, as verl pads)."""
    gen = torch.Generator().manual_seed(seed)
    lengths = torch.randint(0, length + 1, (bs,), generator=gen)
    padding = torch.zeros(bs, dtype=torch.bool)
    padding[::padding_every] = True
    lengths[padding] = 0
    mask = (torch.arange(length)[None, :] < lengths[:, None]).long()
    return prepare_batch(Batch({"response_mask": mask, "is_padding": padding}))


def _weights(batch: Batch, seed: int, junk: float) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    raw = torch.rand(batch.batch["response_mask"].shape, generator=gen) * 3
    raw[batch.batch["response_mask"] == 0] = junk  # what a plugin may leave outside the valid tokens
    return raw


def _general_path(monkeypatch, raw, valid, unit):
    """finalize and the metrics the long way: a masked copy, torch's division, a pass of the metrics."""
    with monkeypatch.context() as patched:
        patched.setattr(weights_module, "divide_with_stats", lambda *_: None)
        applied, factor = finalize(raw.clone(), valid, unit)
        return applied, weight_metrics(factor, valid, unit)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("junk", [0.0, float("nan"), 1e30])
@pytest.mark.parametrize("unit", [TOKEN_UNIT, SEQUENCE_UNIT])
def test_the_factor_and_metrics_of_the_dividing_pass_are_the_general_paths_bit_for_bit(
    monkeypatch, threads, junk, unit
):
    batch = _batch(seed=1)
    valid = batch.meta_info["dataflex_step_inputs"].valid_tokens()
    raw = check_weights(_weights(batch, seed=2, junk=junk), batch, granularity="token", owner="t", step=0)
    expected, expected_metrics = _general_path(monkeypatch, raw, valid, unit)
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        applied, factor = finalize(raw, valid, unit)
        assert recall(factor, ROW_STATS, valid=valid) is not None and recall(factor, FINITE)
        metrics = weight_metrics(factor, valid, unit)
    finally:
        torch.set_num_threads(before)
    assert applied is factor and factor.dtype == torch.float32
    assert torch.equal(applied, expected)
    assert metrics == expected_metrics  # every statistic, exactly


def test_composed_or_float64_factors_take_the_general_path():
    batch = _batch(seed=3)
    valid = batch.meta_info["dataflex_step_inputs"].valid_tokens()
    raw = _weights(batch, seed=4, junk=0.0)
    applied, factor = finalize(raw, valid, TOKEN_UNIT, torch.rand(valid.shape) + 0.5)
    assert recall(factor, ROW_STATS, valid=valid) is None and recall(applied, FINITE) is None
    applied, factor = finalize(raw.double(), valid, TOKEN_UNIT)
    assert factor.dtype == torch.float32 and recall(factor, ROW_STATS, valid=valid) is None


def test_a_fact_is_forgotten_when_the_tensor_or_its_mask_changes():
    batch = _batch(seed=5)
    valid = batch.meta_info["dataflex_step_inputs"].valid_tokens()
    values = torch.rand(valid.shape)
    remember(values, ROW_STATS, (1.0, 0.0), valid=valid)
    assert recall(values, ROW_STATS, valid=valid) == (1.0, 0.0)
    assert recall(values, ROW_STATS, valid=valid.clone()) is None  # another mask, even an equal one
    assert recall(values, ROW_STATS) is None and recall(values.detach(), ROW_STATS, valid=valid) is None
    values.mul_(2)
    assert recall(values, ROW_STATS, valid=valid) is None  # changed in place
    remember(values, FINITE, True)
    assert recall(values, FINITE) is True and recall(values, FINITE, valid=valid) is None


def test_the_actuator_reads_the_steps_check_of_its_scores_and_checks_anything_else(monkeypatch):
    batch = _batch(seed=6)
    valid = batch.meta_info["dataflex_step_inputs"].valid_tokens()
    calls = []
    real = inputs_module.nonfinite_mask
    monkeypatch.setattr(inputs_module, "nonfinite_mask", lambda *a: calls.append(1) or real(*a))
    scores = check_scores(torch.rand(valid.shape), batch, granularity="token", owner="s", step=0, valid=valid)
    actuator_scores(scores, batch, owner="a", granularity="token")
    assert calls == []  # the contract's check of these scores stands
    actuator_scores(scores.clone(), batch, owner="a", granularity="token")
    actuator_scores(scores, batch, owner="a", granularity="token", dtype=torch.float64)  # a cast is checked again
    assert len(calls) == 2
    scores.view(-1)[valid.view(-1).nonzero()[0]] = float("nan")  # changed in place since the check
    with pytest.raises(InvalidOutputError, match="non-finite"):
        actuator_scores(scores, batch, owner="a", granularity="token")


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.float32])
def test_the_response_mask_and_its_row_counts_come_from_one_pass(monkeypatch, dtype):
    gen = torch.Generator().manual_seed(7)
    mask = (torch.rand(500, 900, generator=gen) < 0.4).to(dtype)
    if dtype.is_floating_point:
        mask[3, 5] = float("nan")  # set, as bool() reads it
    counted = []
    monkeypatch.setattr("dataflex_core.precomputed.row_counts", lambda m: counted.append(1) or m.sum(-1))
    inputs = StepInputs(mask, None, None)
    assert torch.equal(inputs.response_counts(), mask.bool().sum(-1)) and counted == []
    assert torch.equal(inputs.response_tokens(), mask.bool())
    assert np.array_equal(inputs.token_counts().numpy(), mask.bool().sum(-1).numpy())
