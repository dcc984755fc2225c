"""The example components: a hand-computed case each, the edge cases, and discovery.

Keep tests like these when you copy the template: they check what a user
relies on. `nox -s conformance` then checks the contract (shapes, mean one,
padding, dtypes) on many generated batches.
"""

import importlib.metadata

import pytest
import torch
from dataflex_example import CenteredLinearReweighter, ResponseLengthScorer, __version__

from dataflex_core import Batch, InvalidOutputError, get_plugin_manager

MASK = torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0], [0, 0, 0, 0], [1, 1, 1, 1]])


def batch(mask=MASK, is_padding=None):
    tensors = {"response_mask": mask}
    if is_padding is not None:
        tensors["is_padding"] = torch.tensor(is_padding)
    return Batch(tensors)


def test_response_length_counts_response_tokens():
    out = ResponseLengthScorer().score(batch(), step_id=0)
    assert out.dtype == torch.float32
    assert out.tolist() == [3.0, 1.0, 0.0, 4.0]


def test_centered_linear_hand_computed():
    # Valid rows 0, 1, 3 (row 2 is empty): scores 3, 1, 5 -> mean 3, spread 2, z = 0, -1, 1.
    w = CenteredLinearReweighter(strength=0.5).act(torch.tensor([3.0, 1.0, 100.0, 5.0]), batch())
    torch.testing.assert_close(w, torch.tensor([1.0, 0.5, 0.0, 1.5]))


def test_padding_rows_get_zero_and_do_not_move_the_others():
    scores = torch.tensor([3.0, 1.0, 7.0, 5.0])
    mask = torch.ones(4, 4, dtype=torch.long)
    plain = CenteredLinearReweighter().act(scores[[0, 1, 3]], batch(mask[:3]))
    padded = CenteredLinearReweighter().act(scores, batch(mask, [False, False, True, False]))
    assert padded[2] == 0
    torch.testing.assert_close(padded[[0, 1, 3]], plain)


@pytest.mark.parametrize("value", [0.0, -2.0, 1e6, 1e-6])
def test_constant_scores_give_uniform_weights(value):
    w = CenteredLinearReweighter(strength=1.0).act(torch.full((4,), value), batch(torch.ones(4, 2)))
    torch.testing.assert_close(w, torch.ones(4))


@pytest.mark.parametrize("scale", [1e6, 1e-6])
def test_weights_do_not_depend_on_the_scale_of_the_scores(scale):
    scores = torch.tensor([3.0, 1.0, 100.0, 5.0], dtype=torch.float64)
    expected = CenteredLinearReweighter().act(scores, batch())
    torch.testing.assert_close(CenteredLinearReweighter().act(scores * scale, batch()), expected)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_scores_give_float32_weights(dtype):
    w = CenteredLinearReweighter().act(torch.tensor([3.0, 1.0, 0.0, 5.0], dtype=dtype), batch())
    assert w.dtype == torch.float32


def test_non_finite_scores_on_valid_rows_are_refused_and_ignored_on_padding():
    with pytest.raises(InvalidOutputError, match="centered_linear"):
        CenteredLinearReweighter().act(torch.tensor([3.0, float("nan"), 1.0, 5.0]), batch())
    padded = batch(torch.ones(4, 4, dtype=torch.long), [False, False, True, False])
    w = CenteredLinearReweighter().act(torch.tensor([3.0, 1.0, float("nan"), 5.0]), padded)
    assert w[2] == 0 and torch.isfinite(w).all()


def test_bad_strength_is_rejected():
    with pytest.raises(ValueError, match="1.5"):
        CenteredLinearReweighter(strength=1.5)


def test_installed_plugin_is_discovered_with_its_version():
    registry = get_plugin_manager().registry()
    for kind, name in (("scorer", "response_length"), ("reweighter", "centered_linear")):
        spec = registry.get(kind, name)
        assert spec is not None, f"{name} not found: is the package installed (pip install -e .)?"
        assert (spec.dist, spec.version) == ("dataflex-example", __version__)
    assert importlib.metadata.version("dataflex-example") == __version__
