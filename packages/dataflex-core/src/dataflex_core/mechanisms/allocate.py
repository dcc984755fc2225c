"""``mechanism: allocate``: each of a step's prompts gets its own number of rollouts, under a fixed budget.

Uniform counts spend as much on a prompt the policy always (or never) solves as on one at the edge of its ability.
Before rolling out, the host calls :meth:`Allocate.allocate` with the prompts' ids: a ``pre_rollout`` scorer scores them
from the ledger, the :class:`~dataflex_core.Allocator` gives each a count, and the counts are checked
(:func:`~dataflex_core.contracts.check_allocation`). After the rewards, :meth:`Allocate.run` feeds the ledger, checks
each prompt came back with its rollouts and logs the allocation; the loss is the framework's own. Before ``warmup_step``
and on a fallback the budget is split evenly. The keys (``budget``, ``n_min``, ``n_max``) are in docs/rollout-budget.md.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import torch

from ..allocation import even_split
from ..config import DataFlexPipeline
from ..contracts import GROUP_MIN_ROLLOUTS, allocation_problem, check_allocation, check_prompt_scores
from ..errors import ConfigError
from ..keys import Key, parse_keys
from ..ledger import PromptLedger
from ..normalize import valid_token_counts
from ..step.calls import component_label
from ..step.context import StepContext
from ..step.host import HostCapabilities
from ..step.prompt_sampler import candidate_batch, candidate_columns, candidate_fields
from ..step.result import PREFIX, StepResult
from ..step.seams import PromptCounts, S, Seam
from .base import Mechanism
from .curriculum import (
    PROMPT_LEDGER_KEYS,
    REWARD_FIELD,
    LedgerSettings,
    check_components,
    component_columns,
    ledger_keys,
    outcomes_batch,
    prompt_ledger,
    row_rewards,
    valid_rows,
)

logger = logging.getLogger("dataflex_core.step")

#: The prefix of the allocation's metrics.
ALLOCATE_PREFIX = f"{PREFIX}allocate/"
#: ``n_max`` unset: a prompt gets at most this many times the batch's mean count (16 rollouts a prompt on
#: average: at most 128 for one).
N_MAX_FACTOR = 8
#: The most rollouts any ``dataflex.allocate`` count may name (2^40, a trillion): far past any real batch, and
#: low enough that a step's counts (10^5 prompts of at most this each) sum in int64 without wrapping.
MAX_ROLLOUTS = 2**40
#: Keys of the ``dataflex:`` block only ``mechanism: allocate`` (and curriculum, for the ledger's) reads.
ALLOCATE_KEYS = {
    **PROMPT_LEDGER_KEYS,
    "allocate": Key(dict, "the budget's split", example="allocate: {budget: null, n_min: 2, n_max: 16}", table={
        "budget": Key(
            int, "rollouts of one batch of prompts the host submits, at most 2^40, more than any host can generate; "
            "null: prompts x rollout.n", low=1, high=MAX_ROLLOUTS, example="budget: null",
        ),
        "n_min": Key(int, "the fewest rollouts a prompt gets", default=GROUP_MIN_ROLLOUTS, low=1, high=MAX_ROLLOUTS),
        "n_max": Key(
            int, f"the most rollouts a prompt gets; null: {N_MAX_FACTOR} times the batch's mean count", low=1,
            high=MAX_ROLLOUTS,
        ),
    }),
}  # fmt: skip


@dataclass(frozen=True, kw_only=True)
class AllocateSettings(LedgerSettings):
    prompt_key: str = "index"
    #: Rollouts per submitted prompt batch; ``None``: its prompts times the framework's ``rollout.n``.
    budget: int | None
    n_min: int
    n_max: int | None

    def n_max_for(self, num_prompts: int, budget: int) -> int:
        """The most rollouts one prompt of the batch gets: ``n_max``, or unset :data:`N_MAX_FACTOR` times the
        batch's mean count (``ceil(budget / prompts)``, at least ``n_min``): finite, so an allocator's work and
        memory stay ``prompts x levels`` however large the budget."""
        if self.n_max is not None:
            return self.n_max
        return max(self.n_min, N_MAX_FACTOR * -(-int(budget) // max(int(num_prompts), 1)))

    def check(self, num_prompts: int, rollout_n: int, where: str) -> int:
        """The budget of such a batch, or a :class:`ConfigError` saying which key to change. Without ``n_max`` a
        budget is at most :data:`N_MAX_FACTOR` times the uniform run's rollouts (prompts x ``rollout_n``), as a
        prompt is at most that times the mean: a budget past it is refused naming the product, never generated."""
        uniform = int(num_prompts) * int(rollout_n)
        budget = uniform if self.budget is None else self.budget
        if self.n_max is None and num_prompts >= 1 and budget > N_MAX_FACTOR * uniform:
            raise ConfigError(
                f"dataflex.allocate.budget={budget} for {where} is more than {N_MAX_FACTOR} x {num_prompts} prompts "
                f"x rollout.n={rollout_n} = {N_MAX_FACTOR * uniform} rollouts, {N_MAX_FACTOR} times the uniform "
                "run's; lower the budget, raise rollout.n, or set dataflex.allocate.n_max (then the budget is at "
                "most prompts x n_max)"
            )
        problem = allocation_problem(num_prompts, budget, self.n_min, self.n_max)
        if problem is not None:
            raise ConfigError(
                f"mechanism allocate cannot split {where}: {problem}; set dataflex.allocate.budget between "
                f"prompts x n_min and prompts x n_max (null: prompts x rollout.n = {num_prompts * rollout_n}) or "
                "change n_min / n_max"
            )
        return budget


def allocate_settings(block: Mapping[str, Any]) -> AllocateSettings:
    """The ``dataflex.allocate`` keys and the ledger keys, checked; raises :class:`ConfigError` with the fix."""
    keys = parse_keys(ALLOCATE_KEYS, block, "dataflex", partial=True)
    split = keys["allocate"]
    if split["n_max"] is not None and split["n_max"] < split["n_min"]:
        raise ConfigError(
            f"dataflex.allocate.n_max={split['n_max']} is below n_min={split['n_min']}; every prompt gets n_min to "
            "n_max: raise n_max or lower n_min"
        )
    return AllocateSettings(**split, **ledger_keys(keys))


@dataclass(frozen=True)
class Allocation:
    """One submitted prompt batch's counts: the ledger rows, the counts, the budget and how they came about."""

    rows: torch.Tensor
    counts: torch.Tensor
    budget: int
    #: True when the allocator was not asked and the budget was split evenly instead (before ``warmup_step``,
    #: or after invalid output under ``on_invalid: uniform``); an allocator may still split evenly itself.
    fallback: bool
    #: The share of these prompts the ledger had seen before (rolled out at an earlier step): with none, a
    #: ledger-based scorer has nothing to tell them apart and the allocator splits evenly.
    seen_before: float = 0.0

    def metrics(self, n_min: int, n_max: int) -> dict[str, float]:
        counts = self.counts.to(torch.float64)
        return {
            f"{ALLOCATE_PREFIX}budget": float(self.budget),
            f"{ALLOCATE_PREFIX}prompts": float(len(counts)),
            f"{ALLOCATE_PREFIX}n_min": float(counts.min()),
            f"{ALLOCATE_PREFIX}n_mean": float(counts.mean()),
            f"{ALLOCATE_PREFIX}n_max": float(counts.max()),
            f"{ALLOCATE_PREFIX}prompts_at_n_min": float((self.counts == n_min).sum()),
            f"{ALLOCATE_PREFIX}prompts_at_n_max": float((self.counts == n_max).sum()),
            f"{ALLOCATE_PREFIX}fallback": 1.0 if self.fallback else 0.0,
            f"{ALLOCATE_PREFIX}seen_before": self.seen_before,
        }


class Allocate(Mechanism):
    """A ``pre_rollout`` scorer and an allocator give each prompt its rollout count; the rewards feed the ledger."""

    name: ClassVar[str] = "allocate"
    actuator_kind: ClassVar[str] = "allocator"
    keys: ClassVar[Mapping[str, Any]] = ALLOCATE_KEYS
    seams: ClassVar[tuple[type[Seam], ...]] = (PromptCounts,)
    timings: ClassVar[tuple[str, ...]] = ("pre_rollout",)
    #: the ledger is fed at every step, warm-up included
    runs_in_warmup: ClassVar[bool] = True
    #: every process keeps the same ledger, fed the same gathered rewards, so all allocate alike
    runs_on_every_process: ClassVar[bool] = True
    fallback: ClassVar[str] = "splitting the budget evenly"
    settings: AllocateSettings

    def __init__(self, block: Mapping[str, Any]) -> None:
        super().__init__(block)
        #: The per-prompt ledger (built with the train dataset's ids, :meth:`train_sampler`).
        self.book: PromptLedger | None = None
        self.columns: dict[str, np.ndarray] = {}
        #: The count each submitted group (by the framework's group id) was given, until its rewards come back.
        self.pending: dict[str, int] = {}
        #: The last allocation, for the step's metrics.
        self.last: Allocation | None = None

    def parse(self, block: Mapping[str, Any]) -> AllocateSettings:
        return allocate_settings(block)

    def refusal(self, seam: type[Seam], host: HostCapabilities, reason: str) -> str:
        return (
            f"mechanism allocate gives each prompt its own number of rollouts, but {host.name} cannot vary "
            f"them: {reason or 'it generates the same number for every prompt'}. Use mechanism "
            "curriculum to choose which prompts are rolled out instead"
        )

    @classmethod
    def check(cls, pipeline: DataFlexPipeline, host: HostCapabilities, loss_unit: str | None) -> None:
        check_components(pipeline, host.name)

    def implement(self, seam: type[S], step: StepContext) -> S:
        if seam is PromptCounts:
            return AllocatedCounts(self, step)  # type: ignore[return-value]
        return super().implement(seam, step)

    def mount(self, pipeline: DataFlexPipeline, host: HostCapabilities, *, grouped: bool | None) -> None:
        if grouped and self.settings.n_min < GROUP_MIN_ROLLOUTS:
            raise ConfigError(
                f"dataflex.allocate.n_min={self.settings.n_min}, but the advantage estimator compares each prompt's "
                f"responses with each other (GRPO groups by uid): a group needs at least {GROUP_MIN_ROLLOUTS}; set "
                f"n_min >= {GROUP_MIN_ROLLOUTS}"
            )

    def fields(self, pipeline: DataFlexPipeline) -> list[str]:
        return ["response_mask", REWARD_FIELD, self.settings.prompt_key, "uid"]

    def dataset_columns(self, pipeline: DataFlexPipeline) -> list[str]:
        return list(dict.fromkeys([self.settings.prompt_key, *candidate_columns(pipeline)]))

    def train_sampler(self, step: StepContext, dataset: Any, batch_size: int, seed: int) -> None:
        """Build the ledger over the train dataset's prompt ids; the framework keeps its own sampler."""
        self.book = prompt_ledger(PromptLedger, self.settings, dataset)
        columns = component_columns(step, dataset, "allocate")
        self.columns = {name: np.asarray(list(values), dtype=object) for name, values in columns.items()}

    def _ledger(self) -> PromptLedger:
        if self.book is None:
            raise RuntimeError(
                "mechanism allocate reads the per-prompt ledger, but the host never built it "
                "(DataFlexSession.train_sampler with the train dataset)"
            )
        return self.book

    def stateful(self, sampler: Any) -> dict[str, Any]:
        return {} if self.book is None else {"ledger": self.book}

    def ledger(self, sampler: Any) -> PromptLedger | None:
        return self.book

    # -- before rollout ------------------------------------------------------------------------------
    def allocate(
        self, step: StepContext, prompt_ids: Sequence[Any], step_id: int, *, rollout_n: int,
        uids: Sequence[Any] | None = None,
    ) -> torch.Tensor:  # fmt: skip
        """The rollout count of each prompt of a batch about to be rolled out, int64 ``(n,)`` in its order.

        :param prompt_ids: each prompt's ``prompt_key`` value; :param rollout_n: the framework's uniform count
            (the default budget is ``len(prompt_ids) * rollout_n``); :param uids: the framework's group id of
            each prompt, so :meth:`run` can check the rollouts that come back.
        """
        book = self._ledger()
        rows = book.ids.rows(np.asarray(list(prompt_ids), dtype=object), f"the prompts of step {step_id}")
        n = len(rows)
        settings = self.settings
        budget = settings.check(n, rollout_n, f"the {n} prompts of step {step_id}")
        counts, fallback = None, True
        if step.pipeline.active(step_id):
            counts, _ = step.on_invalid.attempt(
                lambda: self._counts(step, book, rows, budget, step_id), step=step_id, instead=self.fallback
            )
            fallback = counts is None
        if counts is None:
            counts = even_split(n, budget)
        seen = float((book.times_sampled[rows] > 0).to(torch.float64).mean()) if n else 0.0
        self.last = Allocation(rows, counts, budget, fallback, seen)
        if uids is not None:
            uids = [str(u) for u in uids]
            if len(uids) != n:
                raise ValueError(f"{len(uids)} group ids for {n} prompts; give one uid per prompt")
            self.pending.update(zip(uids, counts.tolist()))
        return counts.clone()

    def _counts(
        self, step: StepContext, book: PromptLedger, rows: torch.Tensor, budget: int, step_id: int
    ) -> torch.Tensor:
        pipeline, settings, calls, ctx = step.pipeline, self.settings, step.calls, step.ctx
        batch = candidate_batch(book, rows, candidate_fields(pipeline), self.columns)
        n = len(rows)
        n_max = settings.n_max_for(n, budget)
        scores = calls.call("scorer", "score", batch, step_id, at_step=step_id, **ctx)
        scores = check_prompt_scores(scores, n, owner=component_label(pipeline, "scorer"), step=step_id)
        counts = calls.call(
            "actuator", "act", scores, batch, at_step=step_id, step_id=step_id,
            budget=budget, n_min=settings.n_min, n_max=n_max, **ctx,
        )  # fmt: skip
        return check_allocation(
            counts, n, budget=budget, n_min=settings.n_min, n_max=n_max,
            owner=component_label(pipeline, "actuator"), step=step_id,
        )  # fmt: skip

    # -- after the rewards ---------------------------------------------------------------------------
    def generated(self, batch: Any) -> tuple[list[str], torch.Tensor]:
        """``(uids, rollouts)``: each group of the real rows in ``batch`` and how many rows it has."""
        uid = batch.non_tensor_batch.get("uid")
        if uid is None:
            raise ConfigError("mechanism allocate checks the rollouts of each prompt by uid, but the rows carry none")
        padding = batch.batch.get("is_padding")
        if padding is not None:  # the framework's padding rows are no prompt's rollouts
            uid = np.asarray(uid, dtype=object)[~padding.bool().cpu().numpy()]
        names, inverse = np.unique(np.asarray([str(u) for u in uid], dtype=object), return_inverse=True)
        return names.tolist(), torch.bincount(torch.from_numpy(inverse.astype(np.int64)), minlength=len(names))

    def skip(self, step: StepContext, batch: Any, step_id: int) -> dict[str, float]:
        if self.book is not None:
            self.book.last_step = max(self.book.last_step, int(step_id))
        return self._check_counts(step, batch)

    def run(self, step: StepContext, batch: Any, step_id: int, importance_weights: torch.Tensor | None) -> StepResult:
        """Feed the ledger and the scorer's ``observe`` from the step's rewards; check and log the allocation.

        Rows with an empty response stay out of the ledger's rewards but count as rollouts the prompt got.
        """
        book = self._ledger()
        metrics = self._check_counts(step, batch)
        valid, rows = valid_rows(book, batch, self.settings.prompt_key, "allocate", step_id)
        outcomes = book.record(
            rows, row_rewards(batch)[valid].cpu(), step_id, tokens=valid_token_counts(batch)[valid].cpu()
        )
        step.calls.call("scorer", "observe", outcomes_batch(book, outcomes), step_id, at_step=step_id, **step.ctx)
        return StepResult(metrics)

    def _check_counts(self, step: StepContext, batch: Any) -> dict[str, float]:
        """The allocation's metrics, and how many of the step's groups came back with another count than given."""
        uids, rollouts = self.generated(batch)
        given = [self.pending.pop(uid, None) for uid in uids]
        unknown = sum(1 for g in given if g is None)
        wrong = [(u, g, int(r)) for u, g, r in zip(uids, given, rollouts.tolist()) if g is not None and g != r]
        if wrong:
            uid, want, got = wrong[0]
            logger.warning(
                "dataflex: %d prompt group(s) came back with another number of rollouts than mechanism allocate "
                "gave them (e.g. uid %s: %d given, %d generated)", len(wrong), uid, want, got,
            )  # fmt: skip
        settings = self.settings
        last = self.last
        metrics = {} if last is None else last.metrics(settings.n_min, settings.n_max_for(len(last.rows), last.budget))
        metrics.update({
            f"{ALLOCATE_PREFIX}groups": float(len(uids)),
            f"{ALLOCATE_PREFIX}rollouts": float(rollouts.sum()),
            f"{ALLOCATE_PREFIX}mismatched_groups": float(len(wrong)),
            f"{ALLOCATE_PREFIX}unallocated_groups": float(unknown),
        })  # fmt: skip
        return metrics


class AllocatedCounts(PromptCounts):
    """``mechanism: allocate``'s side of the per-prompt counts seam: what the host calls before each rollout."""

    def __init__(self, mechanism: Allocate, step: StepContext) -> None:
        self.mechanism = mechanism
        self.step = step
        self.prompt_key = mechanism.settings.prompt_key
        self.budget = mechanism.settings.budget

    def check_budget(self, prompts: int, rollout_n: int, where: str) -> int:
        return self.mechanism.settings.check(prompts, rollout_n, where)

    def counts(
        self, prompt_ids: Sequence[Any], step: int, *, rollout_n: int, uids: Sequence[Any] | None = None
    ) -> torch.Tensor:
        return self.mechanism.allocate(self.step, prompt_ids, step, rollout_n=rollout_n, uids=uids)
