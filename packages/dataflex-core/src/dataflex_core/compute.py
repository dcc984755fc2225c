"""Where a step's rollout compute went: generated, trained, filtered, wasted, in rollouts and tokens.

Every host logs the same ``dataflex/compute/*`` counters on every step, so runs compare against compute rather
than steps (``dataflex compare --x rollouts|tokens``); docs/is-it-working.md says what each counter means. The
counts are a pure function of the batch (:func:`compute_counters`, usable by a baseline run without DataFlex);
the ``*_total`` values live in a checkpointed :class:`ComputeTotals`, so a resumed run continues them.
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch

from .precomputed import StepInputs, moving_rows
from .state_fields import StateFieldError, count

#: The prefix of every compute counter.
COMPUTE_PREFIX = "dataflex/compute/"
#: The per-step counters, in the order they are logged; each also has a ``<name>_total``.
COUNTERS = (
    "rollouts_generated",
    "rollouts_trained",
    "rollouts_filtered",
    "rollouts_wasted",
    "tokens_generated",
    "tokens_trained",
    "generation_rounds",
    "refills",
)
#: The suffix of a counter's cumulative total.
TOTAL_SUFFIX = "_total"
#: ``(part, whole)``: counters that count a part of another's (checked on resume).
PARTS = (
    ("rollouts_trained", "rollouts_generated"),
    ("rollouts_filtered", "rollouts_generated"),
    ("rollouts_wasted", "rollouts_trained"),
    ("tokens_trained", "tokens_generated"),
    ("rollouts_trained", "tokens_trained"),
    ("refills", "generation_rounds"),
)
#: ``(total, per, ceiling, what)``: on resume a ``total`` is at most ``ceiling`` times the ``per`` total (``steps``:
#: the steps the totals count); per-step ceilings no run comes near, as core does not know a host's batch.
CEILINGS = (
    ("generation_rounds", "steps", 2**16, "generation rounds a step runs"),
    ("rollouts_generated", "generation_rounds", 2**24, "rollouts a generation round makes"),
    ("tokens_generated", "rollouts_generated", 2**24, "response tokens a rollout has"),
)
#: The DataFlex steps one framework step runs at most (TRL: one per micro-batch of its gradient accumulation).
MOST_STEPS_PER_GLOBAL_STEP = 2**10


def compute_counters(
    response_mask: torch.Tensor,
    advantages: torch.Tensor | None = None,
    *,
    is_padding: torch.Tensor | None = None,
    kept: torch.Tensor | None = None,
    evicted_rollouts: int = 0,
    evicted_tokens: int = 0,
    generation_rounds: int = 1,
    refills: int = 0,
    totals: ComputeTotals | None = None,
    inputs: StepInputs | None = None,
) -> dict[str, float]:
    """The step's ``dataflex/compute/*`` counters, and their ``_total`` when ``totals`` is given (and updated).

    :param response_mask: ``(bs, L)`` the trained batch's response tokens (any dtype; nonzero is a token).
    :param advantages: ``(bs, L)`` or ``(bs,)`` the advantages the loss uses; ``None``: nothing counts as wasted.
    :param is_padding: ``(bs,)`` bool rows the framework added as padding (never counted).
    :param kept: ``(bs,)`` bool rows the loss trains on (a selector's kept rows); ``None``: every row.
    :param evicted_rollouts: rows generated this step that are not in the batch (a filter's evicted groups).
    :param evicted_tokens: their response tokens.
    :param generation_rounds: generation passes this step; :param refills: prompt batches beyond the first.
    :param totals: the run's cumulative counts; updated in place with this step's.
    :param inputs: the step's prepared values of this ``response_mask`` (its token counts and boolean form are
        then not computed again); ``None``: made here from ``response_mask``.
    """
    if inputs is None or inputs.response_mask is not response_mask:
        inputs = StepInputs(response_mask, None, None)
    counts = inputs.response_counts
    real = torch.ones(counts.shape[0], dtype=torch.bool, device=counts.device)
    if is_padding is not None:
        real = ~is_padding.to(counts.device).bool()
    trained = real & (counts > 0)
    filtered = torch.zeros_like(real)
    if kept is not None:
        kept = kept.to(counts.device).bool()
        filtered = real & ~kept
        trained = trained & kept
    wasted = 0
    if advantages is not None:
        wasted = int((trained & ~moving_rows(advantages.to(counts.device), inputs.response_tokens)).sum())
    real_counts = torch.where(real, counts, torch.zeros((), dtype=counts.dtype, device=counts.device))
    step = {
        "rollouts_generated": int(real.sum()) + int(evicted_rollouts),
        "rollouts_trained": int(trained.sum()),
        "rollouts_filtered": int(filtered.sum()) + int(evicted_rollouts),
        "rollouts_wasted": wasted,
        "tokens_generated": int(real_counts.sum()) + int(evicted_tokens),
        "tokens_trained": int(torch.where(trained, counts, torch.zeros_like(counts)).sum()),
        "generation_rounds": int(generation_rounds),
        "refills": int(refills),
    }
    out = {f"{COMPUTE_PREFIX}{name}": float(step[name]) for name in COUNTERS}
    if totals is not None:
        out.update(totals.add(step))
    return out


class ComputeTotals:
    """The run's cumulative compute counters; travels with the component state so a resume continues them."""

    kind: ClassVar[str] = "counters"
    name: ClassVar[str] = "compute"

    def __init__(self) -> None:
        self.totals: dict[str, int] = dict.fromkeys(COUNTERS, 0)
        #: The steps these totals count (what bounds them on resume: :data:`CEILINGS`).
        self.steps = 0

    def add(self, step: dict[str, int]) -> dict[str, float]:
        """Add one step's counts (by bare counter name); the ``dataflex/compute/<name>_total`` metrics after it."""
        self.steps += 1
        for name in COUNTERS:
            self.totals[name] += int(step.get(name, 0))
        return {f"{COMPUTE_PREFIX}{name}{TOTAL_SUFFIX}": float(self.totals[name]) for name in COUNTERS}

    def state_dict(self) -> dict[str, Any]:
        return {**self.totals, "steps": self.steps}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Take :meth:`state_dict`, checked field by field: whole numbers, never negative, no part larger than its
        whole, none above what its steps allow (:data:`CEILINGS`)."""
        unknown = sorted(set(state) - {*COUNTERS, "steps"})
        if unknown:
            raise StateFieldError(unknown[0], state[unknown[0]], f"an unknown counter; the totals are {list(COUNTERS)}")
        totals = {name: count(state, name) if name in state else 0 for name in (*COUNTERS, "steps")}
        for part, whole in PARTS:
            if totals[part] > totals[whole]:
                raise StateFieldError(part, totals[part], f"it is at most {whole} ({totals[whole]})")
        for name, per, ceiling, what in CEILINGS:
            if totals[name] > ceiling * totals[per]:
                raise StateFieldError(
                    name, totals[name], f"it is at most {per} ({totals[per]}) x {ceiling} (the most {what}) = "
                    f"{ceiling * totals[per]}",
                )  # fmt: skip
        self.steps = totals.pop("steps")
        self.totals = totals
