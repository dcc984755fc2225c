"""Select and mix pieces of the step: the one selector-output rule, selection metrics, domains, the mixture sampler."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from dataflex_core import ConfigError, InvalidOutputError
from dataflex_core.contracts import check_selection as kept_rows
from dataflex_core.contracts import selection_mask
from dataflex_core.mechanisms.mix import domain_ids
from dataflex_core.step import DomainMixtureSampler, selection_metrics, systematic_counts
from dataflex_lab.testing import rows_batch


def batch(lengths, padding=None, uid=None):
    return rows_batch(lengths, width=4, padding=padding, uid=uid)


@pytest.mark.parametrize(
    "output",
    [
        torch.tensor([True, False, True, True, False]),
        torch.tensor([1.0, 0.0, 1.0, 1.0, 0.0]),
        torch.tensor([3, 0, 2]),  # integer tensors are indices, in any order
    ],
)
def test_kept_rows_reads_masks_and_indices_and_never_keeps_padding_or_empty_rows(output):
    b = batch([2, 2, 0, 2, 2], padding=[False, False, False, True, False])
    assert kept_rows(output, b, owner="selector x", step=3).tolist() == [True, False, False, False, False]


@pytest.mark.parametrize(
    ("output", "message"),
    [
        (torch.tensor([0.5, 1.0, 0.0]), "only 0 and 1"),
        (torch.tensor([0, 0]), "unique"),
        (torch.tensor([0, 3]), r"lie in 0\.\.2"),
        (torch.ones(2, dtype=torch.bool), r"shape \(2,\), expected \(3,\)"),
        ([0, 1], "got list"),
    ],
)
def test_kept_rows_rejects_bad_output_naming_the_selector_and_step(output, message):
    with pytest.raises(InvalidOutputError, match=f"selector x returned an invalid selection at step 3: .*{message}"):
        kept_rows(output, batch([1, 1, 1]), owner="selector x", step=3)


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32])
def test_int64_and_int32_tensors_are_indices(dtype):
    assert selection_mask(torch.tensor([2, 0], dtype=dtype), 4).tolist() == [True, False, True, False]


@pytest.mark.parametrize("dtype", [torch.uint8, torch.int8, torch.int16])
def test_other_integer_dtypes_are_refused_not_read_as_indices(dtype):
    # a uint8 0/1 "mask" read as indices would keep rows 0 and 1 whatever it said
    with pytest.raises(InvalidOutputError, match=f"dtype {dtype}, expected") as info:
        selection_mask(torch.tensor([1, 0, 0, 1], dtype=dtype), 4)
    assert ("return torch.bool" in str(info.value)) == (dtype == torch.uint8)


def test_an_integer_mask_of_full_length_is_told_to_be_bool():
    with pytest.raises(InvalidOutputError, match="must be bool or float, not integer"):
        selection_mask(torch.tensor([1, 0, 1, 1]), 4)


def test_selection_metrics_hand_case():
    # Groups a (rows 0-1), b (rows 2-3), c (row 4, padding only): b fully dropped, c not a real group.
    b = batch([1, 1, 1, 1, 1], padding=[False, False, False, False, True], uid=["a", "a", "b", "b", "c"])
    kept = torch.tensor([True, False, False, False, True])
    metrics = selection_metrics(kept, b)
    assert metrics == {
        "dataflex/kept_fraction": 0.25,
        "dataflex/groups_total": 2.0,
        "dataflex/groups_fully_dropped": 1.0,
        "dataflex/groups_fully_dropped_fraction": 0.5,
    }


def test_systematic_counts_are_exact_in_total_within_one_and_unbiased():
    gen = torch.Generator().manual_seed(0)
    p = torch.tensor([0.9, 0.07, 0.03], dtype=torch.float64)
    draws = torch.stack([systematic_counts(p, 16, gen) for _ in range(4000)])
    assert torch.all(draws.sum(1) == 16)
    assert torch.all((draws - p * 16).abs() < 1)
    assert draws.double().mean(0).tolist() == pytest.approx((p * 16).tolist(), abs=0.03)


def test_domain_ids_maps_names_and_names_unknown_ones():
    assert domain_ids(np.array(["code", "math", "code"], dtype=object), ["math", "code"], "x").tolist() == [1, 0, 1]
    with pytest.raises(ConfigError, match=r"\['bio'\]"):
        domain_ids(["math", "bio"], ["math", "code"], "x")


def test_sampler_refuses_mass_on_a_domain_without_rows():
    with pytest.raises(ConfigError, match=r"\['code'\] a positive share"):
        DomainMixtureSampler([0, 0, 0], ["math", "code"], 2, torch.tensor([0.5, 0.5]))
    sampler = DomainMixtureSampler([0, 0, 0], ["math", "code"], 2, torch.tensor([1.0, 0.0]))
    assert len(sampler) == 2  # whole blocks only


def test_sampler_state_round_trip_mid_epoch_continues_identically():
    rows = [i % 3 for i in range(30)]
    first = DomainMixtureSampler(rows, ["a", "b", "c"], 4, torch.tensor([0.5, 0.3, 0.2]), seed=3)
    it = iter(first)
    head = [next(it) for _ in range(6)]  # stop inside a block
    state = first.state_dict()
    second = DomainMixtureSampler(rows, ["a", "b", "c"], 4, torch.tensor([1.0, 0.0, 0.0]), seed=99)
    second.load_state_dict(state)
    resumed = iter(second)
    assert [next(it) for _ in range(20)] == [next(resumed) for _ in range(20)]
    assert len(set(head)) == 6
    assert all(isinstance(p, torch.Tensor) and p.dtype == torch.long for p in state["perms"])  # never n-id lists
    older = DomainMixtureSampler(rows, ["a", "b", "c"], 4, torch.tensor([1.0, 0.0, 0.0]), seed=99)
    older.load_state_dict({**state, "perms": [p.tolist() for p in state["perms"]]})  # what 0.x states hold
    again = DomainMixtureSampler(rows, ["a", "b", "c"], 4, torch.tensor([1.0, 0.0, 0.0]), seed=99)
    again.load_state_dict(state)
    assert [next(iter(older)) for _ in range(8)] == [next(iter(again)) for _ in range(8)]
