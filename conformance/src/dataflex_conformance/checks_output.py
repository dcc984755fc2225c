"""Output checks shared by the kinds: shape, dtype, finiteness, and invariance to row order and empty rows."""

from __future__ import annotations

import torch

from dataflex_core import valid_mask_for

from .batches import clone_sample, group_permutation, permute_sample, row_permutation, score_range_of
from .checks_common import close, empty_rows_outputs, max_difference, run_twice
from .probe import Probe


def _what(probe: Probe) -> str:
    return {"scorer": "scores", "reweighter": "weights", "mixer": "proportions"}.get(probe.subject.kind, "output")


def check_output_shape(probe: Probe) -> None:
    """Scores are ``(bs,)`` (prompt/response), ``(bs, L)`` (token) or ``(num_domains,)`` (domain);
    actuator outputs match the granularity of their scores."""
    out, sample, _ = probe.run()
    expected = probe.expected_shape(sample)
    if not isinstance(out, torch.Tensor):
        raise probe.fail(f"{_what(probe)} is a {type(out).__name__}, expected a torch.Tensor of shape {expected}")
    if tuple(out.shape) != expected:
        raise probe.fail(
            f"{_what(probe)}.shape={tuple(out.shape)}, expected {expected} for granularity {probe.subject.granularity!r}"
        )


def check_output_dtype(probe: Probe) -> None:
    """Scores and proportions are floating; reweighter weights are float32 (float64 for float64 scores)."""
    out, _, scores = probe.run()
    if not isinstance(out, torch.Tensor):
        raise probe.blocked("check_output_shape", f"output is a {type(out).__name__}, not a tensor")
    if probe.subject.kind == "reweighter":
        allowed = (
            (torch.float32, torch.float64) if scores is not None and scores.dtype == torch.float64 else (torch.float32,)
        )
        if out.dtype not in allowed:
            raise probe.fail(
                f"weights dtype={out.dtype} for {scores.dtype} scores, expected "
                f"{' or '.join(map(str, allowed))} (bf16/fp16 scores must give float32 weights)"
            )
    elif not out.is_floating_point():
        raise probe.fail(f"{_what(probe)} dtype={out.dtype}, expected a floating dtype")


def check_output_finite(probe: Probe) -> None:
    """Every output value is finite when every input is (empty-response rows included)."""
    out, sample, _ = probe.run()
    out = probe.readable(out, sample, shape=False)
    bad = ~torch.isfinite(out.float())
    if bad.any():
        first = bad.nonzero()[0].tolist()
        raise probe.fail(
            f"{int(bad.sum())} of {out.numel()} {_what(probe)} are not finite (first at {first}: "
            f"{out.reshape(-1)[bad.reshape(-1)][0].item()}), expected finite values for finite inputs"
        )


def check_permutation_equivariant(probe: Probe) -> None:
    """Reordering rows (or whole ``uid`` groups) reorders per-row scores the same way."""
    sample = probe.sample()
    out = probe.readable(run_twice(probe, sample), sample)
    if probe.case.permutation == "groups":
        perm = group_permutation(sample.batch.non_tensor_batch["uid"], probe.case.seed + 1)
    else:
        perm = row_permutation(len(sample.batch), probe.case.seed + 1)
    moved = permute_sample(clone_sample(sample), perm, probe.subject.granularity)
    out_moved = probe.readable(probe.run(moved)[0], moved)
    expected = out if probe.subject.granularity == "domain" else out[perm.to(out.device)]
    if not close(out_moved, expected):
        diff, where = max_difference(out_moved, expected)
        raise probe.fail(
            f"{_what(probe)} on {probe.case.permutation}-permuted input differ from permuted {_what(probe)} by up to "
            f"{diff:.4g} at {where}, expected f(batch[perm]) == f(batch)[perm]"
        )


def check_empty_rows_ignored(probe: Probe) -> None:
    """Rows with an empty response stay out of every statistic and group: removing them changes
    nothing for the other rows; reweighters give them weight 0.

    Framework padding is :func:`~dataflex_conformance.check_framework_padding_ignored`'s; here
    a real row has an empty response (``response_mask`` all 0), and it sits
    in its ``uid`` group beside rows that have one.
    """
    out_full, out_reduced, full, reduced = empty_rows_outputs(probe)
    kind = probe.subject.kind
    keep = full.nonempty
    dropped = int((~keep).sum())
    if kind == "selector":
        from .checks_actuator import kept_mask

        keep_full = kept_mask(probe, out_full, full)[keep.to(full.device)]
        keep_reduced = kept_mask(probe, out_reduced, reduced)
        if not torch.equal(keep_full.cpu(), keep_reduced.cpu()):
            changed = int((keep_full.cpu() != keep_reduced.cpu()).sum())
            raise probe.fail(
                f"removing the {dropped} empty-response rows changed the selection of {changed} of "
                f"{int(keep.sum())} other rows, expected empty rows to be left out of the selection's statistics"
            )
        return
    out_full = probe.readable(out_full, full)
    out_reduced = probe.readable(out_reduced, reduced)
    per_row = kind != "mixer" and probe.subject.granularity != "domain"
    if kind == "reweighter":
        probe.finite(out_full, "check_output_finite", "weight")
        on_empty = out_full[~keep.to(out_full.device)]
        if (on_empty != 0).any():
            raise probe.blocked(
                "check_invalid_units_zero", f"empty rows got weights up to {on_empty.abs().max().item():.4g}"
            )
    rest = out_full[keep.to(out_full.device)] if per_row else out_full
    if not close(rest, out_reduced):
        diff, where = max_difference(rest, out_reduced)
        raise probe.fail(
            f"removing the {dropped} empty-response rows changed the other rows' {_what(probe)} by up to "
            f"{diff:.4g} at {where}, expected empty rows to be left out of every statistic and group "
            "(take row validity from response_mask: dataflex_core.valid_sample_mask)"
        )


def check_scores_in_declared_range(probe: Probe) -> None:
    """A scorer declaring ``score_range`` keeps every valid unit's score inside it
    (actuators are paired with it on the strength of that declaration)."""
    lo, hi = score_range_of(probe.subject.cls)
    out, sample, _ = probe.run()
    out = probe.readable(out, sample)
    probe.finite(out, "check_output_finite", "score")
    valid = (
        torch.ones_like(out, dtype=torch.bool)
        if probe.subject.granularity == "domain"
        else valid_mask_for(out, sample.batch)
    )
    values = out.double()
    outside = valid & ((values < lo) | (values > hi))
    if outside.any():
        where = outside.nonzero()[0].tolist()
        raise probe.fail(
            f"{int(outside.sum())} of {int(valid.sum())} valid scores lie outside score_range=({lo:g}, {hi:g}) "
            f"(e.g. {values[tuple(where)].item():.6g} at {where}), expected every valid score inside the declared range"
        )
