"""The framework's padding rows are empty rows to a component: they change nothing on the real rows.

verl's V1 trainer appends padding rows to a step's batch (``is_padding`` True, an empty ``response_mask``, one
shared ``pad...`` uid, whatever values its template row had in the other fields) and then reorders the whole
batch, so they sit anywhere. The loss mechanisms hand components the batch with those rows in it, as the empty
rows the contract already has (no copy of the real rows): a component must leave them out of every statistic,
mean and group, and a reweighter must give them weight 0. This check inserts padding rows at scattered
positions into a case's batch and compares the component's output on the real rows with its output on the batch
without them.
"""

from __future__ import annotations

import numpy as np
import torch

from .batches import EMPTY_ROW_JUNK_SCALE, Sample, clone_sample, subset_sample
from .checks_common import close, max_difference, run_twice
from .probe import Probe

#: The uid every padding row shares, as verl's ``pad<uuid hex>``.
PAD_UID = "pad5f0c3b1e9a7d4c2b8e6f1a0d3c5b7e9f"
#: Padding rows inserted into a batch of ``bs`` rows: a few, never fewer than one.
PADDING_ROWS = 3


def padded_sample(sample: Sample, granularity: str, seed: int) -> tuple[Sample, torch.Tensor]:
    """``sample`` with :data:`PADDING_ROWS` padding rows inserted at seeded random positions (the real rows keep
    their order), and the position of each real row in it (real row ``i`` is row ``positions[i]``).

    A padding row copies a real row's fields (its scores too, so a synthetic score stays in range), then gets an
    empty mask, ``is_padding``, the shared :data:`PAD_UID` and its float fields scaled far from the real rows'.
    """
    bs = len(sample.batch)
    gen = torch.Generator().manual_seed(seed)
    sources = torch.randint(0, max(bs, 1), (PADDING_ROWS,), generator=gen)
    is_padding = torch.zeros(bs + PADDING_ROWS, dtype=torch.bool)
    is_padding[torch.randperm(bs + PADDING_ROWS, generator=gen)[:PADDING_ROWS]] = True
    positions = (~is_padding).nonzero(as_tuple=True)[0]  # the real rows keep their order (ties stay ties)
    index = torch.empty(bs + PADDING_ROWS, dtype=torch.long)
    index[positions] = torch.arange(bs)
    index[is_padding] = sources
    padded = subset_sample(sample, index, granularity)
    tensors = padded.batch.batch
    rows = is_padding.to(sample.device)
    for name, value in tensors.items():
        if name == "response_mask":
            value[rows] = 0
        elif value.is_floating_point():
            value[rows] = value[rows] * EMPTY_ROW_JUNK_SCALE + EMPTY_ROW_JUNK_SCALE
    tensors["is_padding"] = rows
    if "uid" in padded.batch.non_tensor_batch:
        uid = np.asarray(padded.batch.non_tensor_batch["uid"], dtype=object).copy()
        uid[is_padding.numpy()] = PAD_UID
        padded.batch.non_tensor_batch["uid"] = uid
    return padded, positions.to(sample.device)


def check_framework_padding_ignored(probe: Probe) -> None:
    """Framework padding rows (empty mask, shared pad uid, junk fields, anywhere in the batch) change nothing on
    the real rows, and reweighters give them weight 0."""
    from .checks_actuator import kept_mask
    from .checks_output import _what

    kind = probe.subject.kind
    granularity = probe.subject.granularity if kind != "scorer" else probe.subject.cls.granularity
    plain = probe.sample()
    if kind != "scorer":
        plain.scores = probe.scores(plain)
    padded, positions = padded_sample(plain, granularity, probe.case.seed + 11)
    pad = padded.batch.batch["is_padding"]
    scores = (lambda s: None) if kind == "scorer" else (lambda s: s.scores.clone())
    if kind == "scorer":
        out_plain = run_twice(probe, plain)  # a nondeterministic scorer is check_deterministic's, not this one's
    else:
        out_plain = probe.call(probe.component(), plain, scores(plain))
        twin = probe.call(probe.component(), clone_sample(plain), scores(plain))
        same_device = all(isinstance(t, torch.Tensor) and t.device == plain.device for t in (out_plain, twin))
        if same_device and not close(out_plain, twin):
            raise probe.blocked("check_deterministic", "two calls on identical input differ")
    out_padded = probe.call(probe.component(), padded, scores(padded))
    inserted = f"{PADDING_ROWS} padding rows (empty response_mask, is_padding, uid {PAD_UID!r})"
    if kind == "selector":
        kept_plain = kept_mask(probe, out_plain, plain)
        kept_padded = kept_mask(probe, out_padded, padded)
        valid = plain.nonempty.to(kept_plain.device)
        changed = (kept_padded[positions.to(kept_padded.device)] != kept_plain) & valid
        if changed.any():
            raise probe.fail(
                f"inserting {inserted} changed the selection of {int(changed.sum())} of {int(valid.sum())} real rows, "
                "expected padding rows to be left out of the selection's statistics"
            )
        return
    out_plain = probe.readable(out_plain, plain)
    out_padded = probe.readable(out_padded, padded)
    if kind == "reweighter":
        empty = (~plain.nonempty).to(out_plain.device)
        if (out_plain[empty] != 0).any():  # it weighs empty rows too: that check's problem, not padding's
            raise probe.blocked("check_invalid_units_zero", "empty rows got weights")
        on_padding = out_padded[pad.to(out_padded.device)]
        if not torch.isfinite(on_padding.float()).all() or (on_padding != 0).any():
            raise probe.fail(
                f"padding rows got weights up to {on_padding.abs().max().item():.4g}, expected 0: a padding row "
                "has an empty response_mask (dataflex_core.valid_sample_mask / valid_token_mask leave it out)"
            )
    per_row = granularity != "domain"
    real = out_padded[positions.to(out_padded.device)] if per_row else out_padded
    if not close(real, out_plain):
        if _empty_rows_counted(probe, plain, out_plain, granularity, scores):
            raise probe.blocked("check_empty_rows_ignored", "empty rows change the other rows' output")
        diff, where = max_difference(real, out_plain)
        raise probe.fail(
            f"inserting {inserted} changed the real rows' {_what(probe)} by up to {diff:.4g} at {where}, expected "
            "padding rows to stay out of every statistic, mean and group (take validity from response_mask: "
            "dataflex_core.valid_sample_mask)"
        )


def _empty_rows_counted(probe: Probe, plain: Sample, out_plain: torch.Tensor, granularity: str, scores) -> bool:
    """Whether removing ``plain``'s empty rows changes the other rows' output: a padding row is an empty row, so
    a component that counts empty rows is :func:`check_empty_rows_ignored`'s to report."""
    keep = plain.nonempty
    if bool(keep.all()):
        return False
    reduced = subset_sample(clone_sample(plain), keep, granularity)
    out = probe.call(probe.component(), reduced, scores(reduced))
    if not isinstance(out, torch.Tensor) or out.device != plain.device:
        return False
    rest = out_plain[keep.to(out_plain.device)] if granularity != "domain" else out_plain
    return rest.shape != out.shape or not close(rest, out)
