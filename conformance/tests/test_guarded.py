"""The guarded batch hands out declared fields only and remembers every other read."""

from __future__ import annotations

import pytest

from dataflex_conformance import BatchFactory, Case, GuardedBatch, UndeclaredFieldError
from dataflex_conformance.guarded import FieldGuard


def _guarded(requires, needs_groups=False):
    sample = BatchFactory([]).build(Case("g", bs=10), "cpu")
    guard = FieldGuard("scorer 'x'", requires, needs_groups)
    return GuardedBatch(sample.batch, guard), guard


def test_declared_and_always_present_fields_are_readable():
    batch, guard = _guarded(["advantages"])
    assert batch.batch["advantages"].shape == (10, 16)
    assert batch.batch.get("is_padding") is None and "response_mask" in batch.batch  # readable, absent
    assert len(batch) == 10 and not guard.violations


def test_undeclared_field_raises_a_key_error_naming_the_fix_and_is_recorded_even_if_caught():
    batch, guard = _guarded(["advantages"])
    with pytest.raises(UndeclaredFieldError, match=r"read batch.batch\['values'\].*add 'values' to requires"):
        batch.batch["values"]
    try:
        batch.batch.get("entropy")
    except KeyError:
        pass
    assert "values" not in batch.batch
    assert len(guard.violations) == 2


def test_uid_needs_groups_and_survives_select_rows():
    batch, guard = _guarded([])
    with pytest.raises(UndeclaredFieldError, match="set needs_groups = True"):
        batch.non_tensor_batch["uid"]
    grouped, _ = _guarded([], needs_groups=True)
    assert len(grouped.non_tensor_batch["uid"]) == 10
    import torch

    subset = batch.select_rows(torch.tensor([0, 1]))
    with pytest.raises(UndeclaredFieldError):
        subset.batch["values"]
    assert len(guard.violations) == 2
