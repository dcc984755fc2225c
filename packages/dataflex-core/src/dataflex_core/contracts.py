"""Every rule on what a component returns, written once: the step, conformance and plugins all call these.

So a component certified by conformance is accepted by every host. What passes is returned detached from any
autograd graph. Every check raises :class:`~dataflex_core.InvalidOutputError` naming the component
(``owner``) and the step (``step=None`` outside a step).
"""

from __future__ import annotations

from typing import Any

import torch

from .components import SAMPLE_GRANULARITIES
from .errors import InvalidOutputError
from .groups import group_index, segment_count
from .inputs import negative_mask, nonfinite_mask
from .normalize import valid_sample_mask, valid_token_mask
from .precomputed import step_inputs

#: How far a mixer's proportions or a sampler's probabilities may sum from one (float32 rounding of a
#: softmax over many prompts).
SUM_TOLERANCE = 1e-4
#: How far a reweighter's weights may average from one over the valid units.
MEAN_ONE_TOLERANCE = 1e-4
#: Relative slack when comparing a sampler's probabilities with the floor it declares.
FLOOR_TOLERANCE = 1e-6
#: Integer dtypes a selection is read as kept row indices in.
INDEX_DTYPES = (torch.int64, torch.int32)
#: Who gets the GRPO group ids, in every host and in conformance.
GROUPS_RULE = (
    "non_tensor_batch['uid'] (the GRPO group id) is read only by components that declare needs_groups = True; "
    "every host hands it to them, and may hand it to the others of a step whose mechanism reads groups itself "
    "(select's group metrics)"
)


def tolerance_text(tolerance: float) -> str:
    """A tolerance as the messages write it: ``1e-4``."""
    mantissa, exponent = f"{tolerance:.0e}".split("e")
    return f"{mantissa}e{int(exponent)}"


def _at(step: int | None) -> str:
    return "" if step is None else f" at step {step}"


# -- scores and weights -------------------------------------------------------------------------


def expected_shape(granularity: str, batch: Any) -> tuple[int, ...]:
    """``(bs,)`` for per-sample granularities, ``response_mask``'s shape for ``token``."""
    mask = batch.batch["response_mask"]
    return (mask.shape[0],) if granularity in SAMPLE_GRANULARITIES else tuple(mask.shape)


def valid_for(shape: tuple[int, ...], batch: Any) -> torch.Tensor:
    """The batch's validity mask for output of ``shape``: per sample ``(bs,)`` or per token ``(bs, L)``."""
    return valid_sample_mask(batch) if len(shape) == 1 else valid_token_mask(batch)


def _check_units(
    value: Any, batch: Any, what: str, owner: str, step: int | None, granularity: str, valid: Any, *, non_negative: bool
) -> torch.Tensor:
    def fail(problem: str) -> InvalidOutputError:
        return InvalidOutputError(f"{owner} returned invalid {what}{_at(step)}: {problem}")

    if not isinstance(value, torch.Tensor):
        raise fail(f"expected a torch.Tensor, got {type(value).__name__}")
    shape = expected_shape(granularity, batch)
    if tuple(value.shape) != shape:
        raise fail(f"shape {tuple(value.shape)}, but {granularity} granularity on this batch needs {shape}")
    if not (value.is_floating_point() or value.dtype in (torch.int32, torch.int64, torch.bool)):
        raise fail(f"dtype {value.dtype} is not numeric")
    device = batch.batch["response_mask"].device
    if value.device != device:
        raise fail(f"it is on device {value.device}, but the batch is on {device}; return it on the batch's device")
    value = value.detach()
    valid = (valid_for(shape, batch) if valid is None else valid).to(value.device)
    # One reduction each on the common path; the per-entry masks are built only to describe a failure.
    bad = nonfinite_mask(value, valid)
    if bad is not None:
        raise fail(f"{int(bad.sum())} of {int(torch.count_nonzero(valid))} valid entries are NaN or inf")
    if non_negative:
        negative = negative_mask(value, valid)
        if negative is not None:
            raise fail(f"{int(negative.sum())} valid entries are negative (min {value[negative].min().item():.4g})")
    return value


def check_scores(
    value: Any, batch: Any, *, granularity: str, owner: str, step: int | None, valid: torch.Tensor | None = None
) -> torch.Tensor:
    """A scorer's output: a numeric tensor of the granularity's shape on the batch's device, finite on valid units
    (``valid``: their mask, if already computed); returned detached."""
    return _check_units(value, batch, "scores", owner, step, granularity, valid, non_negative=False)


def check_weights(
    value: Any, batch: Any, *, granularity: str, owner: str, step: int | None, valid: torch.Tensor | None = None
) -> torch.Tensor:
    """A reweighter's output: as :func:`check_scores`, and non-negative on valid units; returned detached."""
    return _check_units(value, batch, "weights", owner, step, granularity, valid, non_negative=True)


def mean_one_problem(weights: torch.Tensor, valid: torch.Tensor) -> str | None:
    """What keeps ``weights`` from averaging one over ``valid`` units (within :data:`MEAN_ONE_TOLERANCE`), or
    None; weights on no valid unit have nothing to average and pass."""
    count = int(valid.sum())
    if count == 0:
        return None
    mean = weights[valid].double().mean().item()
    if abs(mean - 1.0) <= MEAN_ONE_TOLERANCE:
        return None
    return f"weights mean={mean:.6g} over {count} valid units, expected 1 ± {tolerance_text(MEAN_ONE_TOLERANCE)}"


def nearly_uniform(values: torch.Tensor, tolerance: float) -> bool:
    """True when ``values`` spread by at most ``tolerance`` relative to the largest (what "uniform" means here)."""
    if values.numel() == 0:
        return True
    low, high = values.double().min().item(), values.double().max().item()
    return high - low <= tolerance * max(abs(high), 1e-12)


# -- selections ---------------------------------------------------------------------------------


def selection_mask(output: Any, bs: int) -> torch.Tensor:
    """A selector's output (a 0/1 bool or float mask ``(bs,)``, or unique in-range int64/int32 row indices) as a
    bool ``(bs,)`` mask on the output's device. Other integer dtypes are refused: a ``uint8`` 0/1 mask (old
    PyTorch's) read as indices would keep rows 0 and 1 silently.

    :raises InvalidOutputError: ``"<what was seen>, expected <the contract>"``; callers add the selector
        and the step (hosts) or the case (conformance).
    """
    accepted = f"a bool or float 0/1 mask of shape ({bs},), or a 1-D int64/int32 tensor of kept row indices"
    if not isinstance(output, torch.Tensor):
        raise InvalidOutputError(f"got {type(output).__name__}, expected {accepted}")
    if output.dtype == torch.bool or output.is_floating_point():
        if tuple(output.shape) != (bs,):
            raise InvalidOutputError(f"mask shape {tuple(output.shape)}, expected ({bs},)")
        if output.dtype == torch.bool:
            return output.detach()
        values = output.detach()
        if not bool(((values == 0) | (values == 1)).all()):
            bad = values[(values != 0) & (values != 1)]
            raise InvalidOutputError(f"mask holds {bad[:3].tolist()}, expected only 0 and 1")
        return values == 1
    if output.dtype not in INDEX_DTYPES:
        hint = " (for a mask, return torch.bool)" if output.dtype == torch.uint8 else ""
        raise InvalidOutputError(f"dtype {output.dtype}, expected {accepted}{hint}")
    if output.dim() != 1:
        raise InvalidOutputError(f"indices shape {tuple(output.shape)}, expected a 1-D tensor")
    indices = output.detach().long()
    if indices.numel() and (int(indices.min()) < 0 or int(indices.max()) >= bs):
        raise InvalidOutputError(
            f"indices span [{int(indices.min())}, {int(indices.max())}], expected them to lie in 0..{bs - 1}"
        )
    if torch.unique(indices).numel() != indices.numel():
        hint = " (a 0/1 mask must be bool or float, not integer)" if indices.numel() == bs else ""
        raise InvalidOutputError(f"indices repeat a row{hint}, expected unique indices, each kept row once")
    keep = torch.zeros(bs, dtype=torch.bool, device=output.device)
    keep[indices] = True
    return keep


def check_selection(output: Any, batch: Any, *, owner: str, step: int | None) -> torch.Tensor:
    """:func:`selection_mask` restricted to valid rows (padding and empty rows are never kept), on the CPU.

    :raises InvalidOutputError: ``"<owner> returned an invalid selection at step <step>: <problem>"``.
    """
    try:
        keep = selection_mask(output, len(batch))
    except InvalidOutputError as exc:
        raise InvalidOutputError(f"{owner} returned an invalid selection{_at(step)}: {exc}") from None
    return keep.cpu() & valid_sample_mask(batch).cpu()


def group_admission(
    keep: torch.Tensor, index: torch.Tensor, groups: int, valid: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(admitted, partial)`` per group from the kept rows (the rule of ``mechanism: filter``): a group is
    admitted when it has a valid row and every valid row is kept; ``partial`` flags one with some kept and some
    not, which filter refuses (it admits or evicts whole groups)."""
    keep, index, valid = keep.cpu().bool(), index.cpu().long(), valid.cpu().bool()
    valid_rows = segment_count(index, groups, valid)
    kept_rows = segment_count(index, groups, keep & valid)
    partial = (kept_rows > 0) & (kept_rows < valid_rows)
    return (kept_rows == valid_rows) & (valid_rows > 0), partial


# -- distributions: a mixer's proportions, a sampler's probabilities ------------------------------


def sums_to_one(p: torch.Tensor) -> bool:
    """True when ``p`` sums to one within :data:`SUM_TOLERANCE`."""
    return abs(float(p.detach().to(torch.float64).sum()) - 1.0) <= SUM_TOLERANCE


def _problem_and_sum(p: torch.Tensor) -> tuple[str | None, torch.Tensor]:
    """Why float64 ``p`` is not a distribution (``non-finite``, ``negative``, ``sum 1.2``) or None, and its sum."""
    total = p.sum()
    if p.numel():
        low, high = torch.aminmax(p)  # NaN propagates into both
        if not (torch.isfinite(low) and torch.isfinite(high)):
            return "non-finite", total
        if low < 0:
            return "negative", total
    if not sums_to_one(total):
        return f"sum {float(total):.6g}", total
    return None, total


def _check_one_per(value: Any, n: int, *, what: str, over: str, owner: str, step: int | None) -> None:
    """``value`` is a tensor of shape ``(n,)``: one entry per ``over``."""
    if not isinstance(value, torch.Tensor) or tuple(value.shape) != (n,):
        shape = tuple(value.shape) if isinstance(value, torch.Tensor) else type(value).__name__
        raise InvalidOutputError(
            f"{owner} returned {what} of shape {shape}{_at(step)}; expected ({n},), one per {over}"
        )


def _check_distribution(value: Any, n: int, *, what: str, over: str, owner: str, step: int | None) -> torch.Tensor:
    _check_one_per(value, n, what=what, over=over, owner=owner, step=step)
    p = value.detach().to(torch.float64).cpu()
    problem, total = _problem_and_sum(p)
    if problem is not None:
        raise InvalidOutputError(
            f"{owner} returned {what} over {n} {over}s{_at(step)} that are not a distribution ({problem}); they "
            f"must be finite, non-negative and sum to one (± {tolerance_text(SUM_TOLERANCE)})"
        )
    return p / total


def check_proportions(value: Any, num_domains: int, *, owner: str, step: int | None) -> torch.Tensor:
    """A mixer's proportions as float64 ``(D,)`` on the CPU, renormalised, or :class:`InvalidOutputError`."""
    return _check_distribution(value, num_domains, what="proportions", over="domain", owner=owner, step=step)


def check_probabilities(value: Any, num_candidates: int, *, owner: str, step: int | None) -> torch.Tensor:
    """A sampler's probabilities as float64 ``(n,)`` on the CPU, renormalised, or :class:`InvalidOutputError`."""
    return _check_distribution(
        value, num_candidates, what="probabilities", over="candidate prompt", owner=owner, step=step
    )


def below_floor(p: torch.Tensor, floor: float) -> torch.Tensor:
    """Bool mask of the candidates whose probability lies under the sampler's declared ``min_probability``."""
    return p.double() < floor * (1 - FLOOR_TOLERANCE) - 1e-12


# -- pre-rollout scores -------------------------------------------------------------------------


def check_prompt_scores(value: Any, num_candidates: int, *, owner: str, step: int | None) -> torch.Tensor:
    """A ``pre_rollout`` scorer's scores: a finite numeric tensor of shape ``(n,)``; returned detached."""
    _check_one_per(value, num_candidates, what="scores", over="candidate prompt", owner=owner, step=step)
    if not (value.is_floating_point() or value.dtype in (torch.int32, torch.int64, torch.bool)):
        raise InvalidOutputError(f"{owner} returned scores of dtype {value.dtype}{_at(step)}; expected numbers")
    # a finite sum means every score is finite (one reduction, no mask); only a sum that is not looks closer
    if value.is_floating_point() and not torch.isfinite(value.detach().sum()):
        finite = torch.isfinite(value.detach())
        if not finite.all():
            raise InvalidOutputError(
                f"{owner} returned {int((~finite).sum())} non-finite scores of {num_candidates} candidates{_at(step)}"
            )
    return value.detach()


# -- rollout counts -----------------------------------------------------------------------------

#: The fewest rollouts per prompt a group estimator (GRPO, RLOO) learns from: one response has no baseline.
GROUP_MIN_ROLLOUTS = 2


def allocation_problem(num_prompts: int, budget: int, n_min: int, n_max: int | None) -> str | None:
    """Why ``budget`` rollouts cannot go to ``num_prompts`` prompts with ``n_min <= n_i <= n_max`` (``None``: they
    can; ``n_max`` ``None``: no cap besides the budget)."""
    if num_prompts < 1:
        return f"there are no prompts to give {budget} rollouts to"
    if num_prompts * n_min > budget:
        return f"{num_prompts} prompts x n_min={n_min} = {num_prompts * n_min} rollouts exceed the budget of {budget}"
    if n_max is not None and num_prompts * n_max < budget:
        return f"{num_prompts} prompts x n_max={n_max} = {num_prompts * n_max} rollouts fall short of the budget of {budget}"
    return None


def check_allocation(
    value: Any, num_prompts: int, *, budget: int, n_min: int, n_max: int | None, owner: str, step: int | None
) -> torch.Tensor:
    """An allocator's counts as int64 ``(n,)`` on the CPU: one whole number per prompt (an integral float too),
    summing to ``budget``, each in ``[n_min, n_max]`` (``n_max`` ``None``: the budget is the only cap)."""
    _check_one_per(value, num_prompts, what="rollout counts", over="prompt", owner=owner, step=step)
    counts = value.detach().cpu()
    if counts.dtype == torch.bool or not (counts.is_floating_point() or counts.dtype in INDEX_DTYPES):
        raise InvalidOutputError(f"{owner} returned rollout counts of dtype {counts.dtype}{_at(step)}; expected int64")
    if counts.is_floating_point():
        wrong = ~torch.isfinite(counts) | (counts != counts.round())
        if wrong.any():
            raise InvalidOutputError(
                f"{owner} returned {int(wrong.sum())} rollout counts that are not whole numbers{_at(step)} "
                f"(e.g. {float(counts[wrong][0])!r}); return int64 counts"
            )
    # Each count in [n_min, budget] before any sum: counts near 2^63 would wrap the int64 sum onto the budget.
    low = counts < n_min
    if low.any():
        raise InvalidOutputError(
            f"{owner} gave {int(low.sum())} prompt(s) fewer than n_min={n_min} rollouts{_at(step)} (least "
            f"{counts.min().item()!r}); every prompt gets at least n_min"
        )
    high = counts > budget
    if high.any():
        raise InvalidOutputError(
            f"{owner} gave {int(high.sum())} prompt(s) more rollouts than the whole budget, {budget}{_at(step)} "
            f"(most {counts.max().item()!r}); the counts must sum to the budget"
        )
    counts = counts.to(torch.int64)
    total = int(counts.sum())
    if total != budget:
        raise InvalidOutputError(
            f"{owner} gave {total} rollouts to {num_prompts} prompts{_at(step)}; they must sum to the budget, {budget}"
        )
    if n_max is not None and bool((counts > n_max).any()):
        raise InvalidOutputError(
            f"{owner} gave {int((counts > n_max).sum())} prompt(s) more than n_max={n_max} rollouts{_at(step)} "
            f"(most {int(counts.max())})"
        )
    return counts


# -- groups -------------------------------------------------------------------------------------


class MissingGroupsError(KeyError):
    """A component that needs GRPO groups got a batch without ``uid``."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0])


def require_groups(batch: Any, owner: str, *, device: torch.device | str | None = None) -> tuple[torch.Tensor, int]:
    """The dense group index ``(bs,)`` and the group count from ``uid``, for a component with ``needs_groups``.

    :raises MissingGroupsError: the batch has no ``uid`` (a ``KeyError``).
    """
    uid = batch.non_tensor_batch.get("uid")
    if uid is None:
        raise MissingGroupsError(
            f"{owner} needs GRPO group ids in non_tensor_batch['uid'] (it declares needs_groups=True), but the "
            "batch has none; run it under a group-based advantage estimator (grpo, rloo, ...) in a host that "
            f"passes them ({GROUPS_RULE})"
        )
    rows = batch.batch["response_mask"].shape[0]
    if len(uid) != rows:
        raise ValueError(f"{owner}: non_tensor_batch['uid'] has {len(uid)} entries for {rows} rows")
    inputs = step_inputs(batch)
    if inputs is not None and inputs.uid is uid:  # the step's own index: grouped once per step
        index, count = inputs.groups
        return index.to(device or index.device), count
    return group_index(uid, device=device)
