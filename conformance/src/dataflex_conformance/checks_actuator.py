"""Actuator checks: mean-one weights, valid selections, proportions that sum to one.

verl's loss aggregation divides by token or sequence counts, not by the sum
of the weights, so a reweighter whose weights do not average one over the
valid units silently changes the learning rate. These checks measure that
and the other numeric promises of reweighters, selectors and mixers.
"""

from __future__ import annotations

import math

import torch

from dataflex_core import InvalidOutputError, valid_mask_for
from dataflex_core.contracts import (
    MEAN_ONE_TOLERANCE,
    SUM_TOLERANCE,
    mean_one_problem,
    nearly_uniform,
    selection_mask,
    sums_to_one,
    tolerance_text,
)

from .batches import Sample, score_range_of
from .probe import STEP_ID, CheckFailure, Probe


def _weights(probe: Probe) -> tuple[torch.Tensor, Sample]:
    out, sample, _ = probe.run()
    out = probe.readable(out, sample)
    return out, sample


def _units(weights: torch.Tensor) -> str:
    return "tokens" if weights.dim() == 2 else "samples"


def check_weights_nonnegative(probe: Probe) -> None:
    """No weight is negative."""
    w, _ = _weights(probe)
    negative = w < 0
    if negative.any():
        raise probe.fail(
            f"{int(negative.sum())} of {w.numel()} weights are negative (min={w.min().item():.4g} at "
            f"{negative.nonzero()[0].tolist()}), expected weights >= 0"
        )


def _valid_units(probe: Probe, w: torch.Tensor, sample: Sample) -> torch.Tensor:
    """The valid-unit mask; weight on an invalid unit blocks the check (the component does not know
    which units are valid, and :func:`check_invalid_units_zero` says so once)."""
    valid = valid_mask_for(w, sample.batch)
    leaked = ~valid & (w != 0)
    if leaked.any():
        raise probe.blocked("check_invalid_units_zero", f"{int(leaked.sum())} invalid {_units(w)} have nonzero weight")
    return valid


def check_mean_one(probe: Probe) -> None:
    """Weights average one over valid units: valid samples for ``(bs,)``, valid tokens for ``(bs, L)``."""
    w, sample = _weights(probe)
    probe.finite(w, "check_output_finite", "weight")
    valid = _valid_units(probe, w, sample)
    problem = mean_one_problem(w, valid)  # no valid unit passes: check_invalid_units_zero wants all zeros there
    if problem is not None:
        raise probe.fail(problem.replace("valid units", f"valid {_units(w)}"))


def check_invalid_units_zero(probe: Probe) -> None:
    """Units outside the valid mask (empty-mask rows, masked tokens) get weight 0."""
    w, sample = _weights(probe)
    probe.finite(w, "check_output_finite", "weight")
    invalid = ~valid_mask_for(w, sample.batch)
    nonzero = invalid & (w != 0)
    if nonzero.any():
        raise probe.fail(
            f"{int(nonzero.sum())} of {int(invalid.sum())} invalid {_units(w)} have nonzero weight "
            f"(max {w[nonzero].abs().max().item():.4g} at {nonzero.nonzero()[0].tolist()}), "
            "expected 0 for rows with an empty response_mask and for masked tokens, with mean one over the "
            "rest (take validity from response_mask: dataflex_core.valid_mask_for / mean_one)"
        )


def check_constant_scores_uniform(probe: Probe) -> None:
    """Constant scores give uniform weights (every valid unit weighs one)."""
    w, sample = _weights(probe)
    probe.finite(w, "check_output_finite", "weight")
    valid = _valid_units(probe, w, sample)
    if not valid.any():
        return
    values = w[valid].double()
    low, high = values.min().item(), values.max().item()
    if not nearly_uniform(values, MEAN_ONE_TOLERANCE):
        raise probe.fail(
            f"weights range [{low:.4g}, {high:.4g}] over {int(valid.sum())} valid {_units(w)} for constant scores, "
            "expected uniform weights"
        )


# -- selectors ------------------------------------------------------------------------------


def kept_mask(probe: Probe, out: object, sample: Sample, *, owner: bool = False) -> torch.Tensor:
    """A selector's output as a bool ``(bs,)`` mask.

    An invalid output fails :func:`check_selection_valid` (``owner=True``)
    and blocks every other check.
    """
    bs = len(sample.batch)
    if not owner:
        try:
            return kept_mask(probe, out, sample, owner=True)
        except CheckFailure as exc:
            raise probe.blocked("check_selection_valid", str(exc).rsplit(" [", 1)[0]) from None
    if not isinstance(out, torch.Tensor):
        raise probe.fail(
            f"selection is a {type(out).__name__}, expected a LongTensor of indices or a 0/1 mask of shape ({bs},)"
        )
    if out.device != sample.device:
        raise probe.blocked("check_output_device", f"selection on {out.device}")
    try:  # the one selector-output rule, shared with every host
        return selection_mask(out, bs)
    except InvalidOutputError as exc:
        raise probe.fail(f"selection: {exc}") from None


def check_selection_valid(probe: Probe) -> None:
    """A selector returns unique in-range row indices or a 0/1 mask of shape ``(bs,)``."""
    out, sample, _ = probe.run()
    kept_mask(probe, out, sample, owner=True)


# -- mixers ---------------------------------------------------------------------------------


def check_proportions_nonnegative(probe: Probe) -> None:
    """Every domain proportion is >= 0."""
    p, _ = _weights(probe)
    if (p < 0).any():
        raise probe.fail(f"proportions min={p.min().item():.4g} at {(p < 0).nonzero()[0].tolist()}, expected >= 0")


def check_proportions_sum_to_one(probe: Probe) -> None:
    """Domain proportions sum to one."""
    p, _ = _weights(probe)
    probe.finite(p, "check_output_finite", "proportion")
    if not sums_to_one(p):
        total = p.double().sum().item()
        raise probe.fail(
            f"proportions sum={total:.6g} over {p.numel()} domains, expected 1 ± {tolerance_text(SUM_TOLERANCE)}"
        )


# -- declared score ranges ----------------------------------------------------------------------


def check_rejects_out_of_range(probe: Probe) -> None:
    """An actuator declaring ``score_range`` raises ``ValueError`` for a valid unit's score outside it,
    instead of returning weights computed from a value it cannot interpret."""
    lo, hi = score_range_of(probe.subject.cls)
    sample = probe.sample()
    scores = probe.scores(sample).clone()
    valid = valid_mask_for(scores, sample.batch) if probe.subject.granularity != "domain" else None
    position = tuple(valid.nonzero()[0].tolist()) if valid is not None and valid.any() else (0,)
    bad = hi + 1.0 if math.isfinite(hi) else lo - 1.0
    scores[position] = bad
    try:
        out = probe.component().act(scores, sample.batch, step_id=STEP_ID, **sample.ctx())
    except ValueError:
        return
    except Exception as exc:  # noqa: BLE001
        raise probe.fail(
            f"a score of {bad:g} outside score_range=({lo:g}, {hi:g}) raised {type(exc).__name__}: {exc}, "
            "expected a ValueError naming the range"
        ) from exc
    summary = f"{type(out).__name__}" if not isinstance(out, torch.Tensor) else f"a {tuple(out.shape)} tensor"
    raise probe.fail(
        f"act() returned {summary} for a score of {bad:g} at {list(position)} outside score_range=({lo:g}, {hi:g}), "
        "expected a ValueError naming the range"
    )
