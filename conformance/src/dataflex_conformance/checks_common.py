"""Checks every component kind must pass: device, declared fields, purity, determinism.

Each ``check_<property>(probe)`` measures one property and raises
:class:`~dataflex_conformance.probe.CheckFailure` when it does not hold.
"""

from __future__ import annotations

import io
from typing import Any

import numpy as np
import torch

from dataflex_core.contracts import GROUPS_RULE

from .batches import Sample, clone_sample, subset_sample
from .guarded import FieldGuard, GuardedBatch
from .probe import STEP_ID, Probe

#: What a component that changed its input is told: the contract and the fix.
INPUTS_UNTOUCHED = (
    "inputs left untouched: clone a tensor before changing it (x = x.clone()), or use out-of-place ops "
    "(x = x * w, not x.mul_(w))"
)


def _who(probe: Probe) -> str:
    return f"{probe.subject.kind} {probe.subject.name!r}"


def max_difference(a: torch.Tensor, b: torch.Tensor) -> tuple[float, list[int]]:
    """Largest ``|a - b|`` (NaN equal to NaN) and where it is."""
    a64, b64 = a.detach().double().cpu(), b.detach().double().cpu()
    both_nan = torch.isnan(a64) & torch.isnan(b64)
    diff = torch.where(both_nan, torch.zeros_like(a64), (a64 - b64).abs())
    diff = torch.nan_to_num(diff, nan=float("inf"))
    if diff.numel() == 0:
        return 0.0, []
    flat = int(diff.reshape(-1).argmax())
    index = list(np.unravel_index(flat, tuple(diff.shape))) if diff.dim() else []
    return float(diff.reshape(-1)[flat]), [int(i) for i in index]


def close(a: torch.Tensor, b: torch.Tensor, rtol: float = 1e-5) -> bool:
    """Equal up to float reordering noise (and NaN where the other is NaN)."""
    if a.shape != b.shape:
        return False
    if a.dtype in (torch.bool, torch.int64, torch.int32) or b.dtype in (torch.bool, torch.int64, torch.int32):
        return torch.equal(a.cpu(), b.cpu())
    a64, b64 = a.detach().double().cpu(), b.detach().double().cpu()
    finite = torch.isfinite(a64) & torch.isfinite(b64)
    scale = float(a64[finite].abs().max()) if finite.any() else 1.0
    return torch.allclose(a64, b64, rtol=rtol, atol=rtol * max(scale, 1e-30) * 1e-2, equal_nan=True)


# -- device --------------------------------------------------------------------------------


def check_output_device(probe: Probe) -> None:
    """The output lives on the device of the input batch."""
    out, sample, _ = probe.run()
    if not isinstance(out, torch.Tensor):
        raise probe.blocked(_shape_check(probe), f"output is a {type(out).__name__}, not a tensor")
    if out.device != sample.device:
        raise probe.fail(f"output.device={out.device}, expected the input's device {sample.device}")


def _shape_check(probe: Probe) -> str:
    return "check_selection_valid" if probe.subject.kind == "selector" else "check_output_shape"


# -- declared fields ---------------------------------------------------------------------


def _guarded_call(probe: Probe, guard: FieldGuard) -> None:
    sample = probe.sample()
    scores = None if probe.subject.kind == "scorer" else probe.scores(sample)
    try:
        probe.call(probe.component(), sample, scores, batch=GuardedBatch(sample.batch, guard))
    except AssertionError:
        if not guard.violations:
            raise
    if guard.violations:
        unique = list(dict.fromkeys(guard.violations))
        raise probe.fail(unique[0] + (f" (and {len(unique) - 1} more undeclared reads)" if len(unique) > 1 else ""))


def check_reads_only_declared(probe: Probe) -> None:
    """Only fields in ``requires`` (plus ``response_mask``, ``is_padding``, ``uid``) are read.

    ``requires`` is read from the configured instance, as hosts read it. ``uid`` is
    left to :func:`check_needs_groups_declared`, so a scorer that reads groups
    without declaring them fails that check alone.
    """
    declared = probe.instance()
    _guarded_call(probe, FieldGuard(_who(probe), declared.requires, declared.needs_groups, guard_uid=False))


def check_needs_groups_declared(probe: Probe) -> None:
    """``uid`` is read only by a component that declares ``needs_groups = True``."""
    declared = probe.instance()
    if "uid" in declared.requires and not declared.needs_groups:
        raise probe.fail(
            f"requires={declared.requires!r} lists 'uid' with needs_groups=False, expected needs_groups=True "
            f"for a component that reads groups ({GROUPS_RULE})"
        )
    if declared.needs_groups:
        return
    sample = probe.sample()
    guard = FieldGuard(_who(probe), declared.requires, False)
    guard.allowed |= {k for k in (*sample.batch.batch, *sample.batch.non_tensor_batch) if k != "uid"}
    _guarded_call(probe, guard)


# -- purity -------------------------------------------------------------------------------


def changed_batch(where: str, b: Any, a: Any) -> list[str]:
    """What differs between batch ``b`` (a snapshot) and ``a`` (after a call), each change named under ``where``:
    the one comparison behind every purity check, the batch side's and the prompt side's."""
    changes = []
    for part, old, new in (
        (f"{where}.batch", b.batch, a.batch),
        (f"{where}.non_tensor_batch", b.non_tensor_batch, a.non_tensor_batch),
    ):
        for key in sorted(set(old) | set(new)):
            if key not in new:
                changes.append(f"{part}[{key!r}] removed")
            elif key not in old:
                changes.append(f"{part}[{key!r}] added")
            elif isinstance(old[key], torch.Tensor):
                o, n = old[key], new[key]
                if o.shape != n.shape or o.dtype != n.dtype:
                    changes.append(f"{part}[{key!r}] became {tuple(n.shape)} {n.dtype}")
                elif not torch.equal(o, n):
                    count = int((o != n).sum())
                    changes.append(f"{part}[{key!r}] ({count} of {o.numel()} values changed)")
            elif not np.array_equal(old[key], new[key]):
                changes.append(f"{part}[{key!r}] changed")
    return changes


def _changed_fields(before: Sample, after: Sample) -> list[str]:
    changes = changed_batch("batch", before.batch, after.batch)
    if not torch.equal(before.domain_index, after.domain_index):
        changes.append("ctx['domain_index'] changed")
    return changes


def check_no_input_mutation(probe: Probe) -> None:
    """The batch (empty rows included) and the scores given to an actuator are left exactly as they were.

    Scores are made before the snapshot, so a scorer that mutates the batch is
    caught by its own check, never by the actuator it feeds.
    """
    sample = probe.sample()
    scores = None if probe.subject.kind == "scorer" else probe.scores(sample)
    before = clone_sample(sample)
    scores_before = None if scores is None else scores.clone()
    # Pass the sample's own ctx tensors so in-place edits to them are seen.
    component = probe.component()
    try:
        if probe.subject.kind == "scorer":
            component.score(sample.batch, STEP_ID, domains=sample.domains, domain_index=sample.domain_index)
        else:
            component.act(
                scores, sample.batch, step_id=STEP_ID, domains=sample.domains, domain_index=sample.domain_index
            )
    except Exception as exc:  # noqa: BLE001
        raise probe.fail(f"call raised {type(exc).__name__}: {exc}") from exc
    changes = _changed_fields(before, sample)
    if scores is not None and not torch.equal(scores, scores_before):
        changes.append(f"scores ({int((scores != scores_before).sum())} of {scores.numel()} values changed)")
    if changes:
        raise probe.fail(f"modified its input: {'; '.join(changes)}, expected {INPUTS_UNTOUCHED}")


def check_no_autograd_graph(probe: Probe) -> None:
    """The output carries no autograd graph, even when in-loss inputs require grad."""
    sample = probe.sample()
    if probe.subject.kind == "scorer" and getattr(probe.subject.cls, "timing", "") == "in_loss":
        for value in sample.batch.batch.values():
            if value.is_floating_point():
                value.requires_grad_(True)
    scores = None if probe.subject.kind == "scorer" else probe.scores(sample)
    out = probe.call(probe.component(), sample, scores)
    if not isinstance(out, torch.Tensor):
        raise probe.blocked(_shape_check(probe), f"output is a {type(out).__name__}, not a tensor")
    if out.requires_grad or out.grad_fn is not None:
        raise probe.fail(
            f"output requires_grad={out.requires_grad} grad_fn={type(out.grad_fn).__name__ if out.grad_fn else None}, "
            "expected a tensor without autograd graph (compute under torch.no_grad() or .detach())"
        )


# -- determinism and invariances ------------------------------------------------------------


def run_twice(probe: Probe, sample: Sample) -> Any:
    """The output on ``sample``, after confirming a second fresh call gives the same (else Blocked)."""
    twin = clone_sample(sample)
    first, _, _ = probe.run(sample)
    second, _, _ = probe.run(twin)
    if isinstance(first, torch.Tensor) and isinstance(second, torch.Tensor):
        if first.device == sample.device and second.device == sample.device and not close(first, second):
            raise probe.blocked("check_deterministic", "two calls on identical input differ")
    return first


def check_deterministic(probe: Probe) -> None:
    """Two fresh instances on identical input give the same output."""
    sample = probe.sample()
    twin = clone_sample(sample)
    first, _, _ = probe.run(sample)
    second, _, _ = probe.run(twin)
    for out in (first, second):
        if not isinstance(out, torch.Tensor):
            raise probe.blocked(_shape_check(probe), f"output is a {type(out).__name__}, not a tensor")
        if out.device != sample.device:
            raise probe.blocked("check_output_device", f"output on {out.device}")
    if first.shape != second.shape:
        raise probe.fail(
            f"two calls on identical input gave shapes {tuple(first.shape)} and {tuple(second.shape)}, expected identical outputs"
        )
    if not close(first, second):
        diff, where = max_difference(first, second)
        raise probe.fail(
            f"two calls on identical input differ by up to {diff:.4g} at {where}, expected identical outputs"
        )


def empty_rows_outputs(probe: Probe) -> tuple[Any, Any, Sample, Sample]:
    """Outputs on the case's batch and on the same batch without its empty-response rows.

    An actuator gets the same scores for the rows both batches share (its
    scorer's, computed once on the full batch, or the case's synthetic ones).
    """
    full = probe.sample()
    granularity = probe.subject.granularity if probe.subject.kind != "scorer" else probe.subject.cls.granularity
    if probe.subject.kind == "scorer":
        out_full = run_twice(probe, full)
        reduced = subset_sample(clone_sample(full), full.nonempty, granularity)
        return out_full, probe.call(probe.component(), reduced), full, reduced
    scores = probe.scores(full)
    full.scores = scores
    reduced = subset_sample(clone_sample(full), full.nonempty, granularity)
    out_full = probe.call(probe.component(), full, scores.clone())
    twin = probe.call(probe.component(), clone_sample(full), scores.clone())
    if isinstance(out_full, torch.Tensor) and isinstance(twin, torch.Tensor) and out_full.device == full.device:
        if not close(out_full, twin):
            raise probe.blocked("check_deterministic", "two calls on identical input differ")
    return out_full, probe.call(probe.component(), reduced, reduced.scores.clone()), full, reduced


def resumed(probe: Any, used: Any) -> Any:
    """A fresh instance loaded with ``used.state_dict()`` as a checkpoint holds it (``torch.save``, then
    ``torch.load(weights_only=True)``); state that does not survive that fails the calling check."""
    buffer = io.BytesIO()
    try:
        torch.save(used.state_dict(), buffer)
        buffer.seek(0)
        fresh = probe.component()
        fresh.load_state_dict(torch.load(buffer, weights_only=True))
    except Exception as exc:  # noqa: BLE001
        raise probe.fail(
            f"saving and restoring state_dict() raised {type(exc).__name__}: {exc}, expected data-only state that "
            "torch.save writes and load_state_dict restores"
        ) from exc
    return fresh
