"""``mechanism: curriculum``: a ``pre_rollout`` scorer and a sampler choose the prompts worth rolling out.

Reweighting and selection act after the rollouts exist; a curriculum spends
the rollouts themselves better. Before each batch of prompts is drawn, the
host's train sampler (:class:`~dataflex_core.step.prompt_sampler.CurriculumSampler`)
builds a batch of *candidate prompts* (every row of the train dataset, or
``candidates`` of them), with the dataset columns the components read and the
per-prompt history the host keeps (:data:`~dataflex_core.step.fields.PROMPT_FIELDS`);
the ``pre_rollout`` scorer scores them, the sampler (:class:`~dataflex_core.Sampler`)
turns the scores into probabilities, and the batch is drawn by them. After the
step's rewards exist, :meth:`Curriculum.run` feeds the history and the
scorer's :meth:`~dataflex_core.Scorer.observe` from them, keyed by the prompt
id the dataset carries (``prompt_key``), at every step, warm-up included. No
loss weights are written: the loss is the framework's own.

Config (``dataflex:`` block): :data:`CURRICULUM_KEYS`, each key with its meaning; draws are uniform before
``warmup_step``; ``ledger.load`` starts the history from an exported ledger (:mod:`dataflex_core.ledger`).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import torch

from ..batch import Batch
from ..config import DataFlexPipeline
from ..errors import ConfigError, IncompatibleComponentError
from ..keys import Key, parse_keys
from ..ledger import PromptLedger
from ..normalize import valid_sample_mask, valid_token_counts
from ..step.context import StepContext
from ..step.dataset import dataset_column
from ..step.fields import is_canonical
from ..step.history import PromptHistory, PromptIds
from ..step.host import HostCapabilities
from ..step.prompt_sampler import METRIC_PREFIX, CurriculumSampler, candidate_columns
from ..step.result import StepResult
from ..step.seams import Seam, TrainSampler
from .base import Mechanism

logger = logging.getLogger("dataflex_core.step")

#: The per-prompt ledger's keys of the ``dataflex:`` block (curriculum and allocate read them; filter and pilot
#: with ``prompt_key`` unset by default, :data:`~dataflex_core.mechanisms.filter.LEDGER_KEYS`).
PROMPT_LEDGER_KEYS = {
    "prompt_key": Key(
        str, "the dataset column that identifies each prompt", default="index",
        example="prompt_key: index (verl copies extra_info.index into it)",
    ),
    "success_threshold": Key(
        float, "a response succeeds when its reward reaches it; null: a reward in [0, 1] counts as that fraction of "
        "a success", example="success_threshold: 1.0 for rewards of 0 or 1 (or unset it)",
    ),
    "ledger": Key(
        dict, "the per-prompt ledger to start from", example="ledger: {load: run1/checkpoints/global_step_100}",
        table={"load": Key(str, "an exported ledger, a checkpoint folder or a Parquet file export_ledger wrote")},
    ),
}  # fmt: skip
#: Keys of the ``dataflex:`` block that only ``mechanism: curriculum`` (and allocate, for the ledger's) reads.
CURRICULUM_KEYS = {
    **PROMPT_LEDGER_KEYS,
    "candidates": Key(int, "prompts scored per draw; 0 scores every prompt of the dataset", default=0, low=0),
}
#: The field of the step's rows that carries the outcome reward (on the last response token).
REWARD_FIELD = "rm_scores"


@dataclass(frozen=True)
class LedgerSettings:
    """The per-prompt ledger's keys as read (:data:`PROMPT_LEDGER_KEYS`; filter and pilot: ``prompt_key`` ``None``,
    no ledger); the settings of every mechanism with a ledger hold them."""

    #: The dataset column of the prompt ids the ledger is keyed by.
    prompt_key: str | None = None
    success_threshold: float | None = None
    #: ``dataflex.ledger.load``: an exported ledger to start from.
    ledger_load: str | None = None


def ledger_keys(keys: Mapping[str, Any]) -> dict[str, Any]:
    """The parsed :data:`PROMPT_LEDGER_KEYS` of a block as :class:`LedgerSettings`' fields."""
    load = keys["ledger"]["load"]
    return {"prompt_key": keys["prompt_key"], "success_threshold": keys["success_threshold"], "ledger_load": load}


@dataclass(frozen=True, kw_only=True)
class CurriculumSettings(LedgerSettings):
    prompt_key: str = "index"
    candidates: int = 0


def curriculum_settings(block: Any) -> CurriculumSettings:
    """The curriculum keys of the ``dataflex:`` block, checked; raises :class:`ConfigError` with the fix."""
    keys = parse_keys(CURRICULUM_KEYS, block, "dataflex", partial=True)
    return CurriculumSettings(candidates=keys["candidates"], **ledger_keys(keys))


def check_components(pipeline: DataFlexPipeline, host_name: str) -> None:
    """A curriculum scorer and sampler read only what exists before rollout: history fields and dataset columns."""
    owners = [(pipeline.scorer_spec, pipeline.scorer), (pipeline.actuator_spec, pipeline.actuator)]
    for spec, component in owners:
        early = [name for name in component.requires if is_canonical(name) and name != "response_mask"]
        if early:
            raise IncompatibleComponentError(
                f"{spec.kind} {spec.label} requires {early}, but in mechanism curriculum it runs on candidate "
                f"prompts before any rollout, when {host_name} has no responses yet; a pre_rollout component reads "
                "the prompt history fields (prompt_index, times_sampled, rollouts, successes, ...) and dataset columns"
            )
        if component.needs_groups:
            raise IncompatibleComponentError(
                f"{spec.kind} {spec.label} needs GRPO groups (needs_groups=True), but candidate prompts have no "
                "rollouts and no uid yet; mechanism curriculum takes components without needs_groups"
            )


def refused_curriculum(host: HostCapabilities, reason: str) -> str:
    """Why ``host`` cannot run ``mechanism: curriculum`` (it lacks the train sampler or ``pre_rollout`` scorers)."""
    because = f" ({reason})" if reason else ""
    return (
        f"mechanism curriculum chooses which prompts are sampled, but {host.name} cannot run pre_rollout "
        f"scorers in its train sampler in this configuration{because}; use mechanism reweight, select or mix"
    )


def outcomes_batch(history: PromptHistory, outcomes: Any) -> Batch:
    """The :data:`~dataflex_core.step.fields.OUTCOME_FIELDS` batch ``Scorer.observe`` receives."""
    rows = outcomes.rows
    return Batch(
        {
            "prompt_index": rows.clone(),
            "rollouts": outcomes.rollouts.clone(),
            "successes": outcomes.successes.clone(),
            "reward_mean": outcomes.reward_mean.clone(),
            "uniform_reward": outcomes.uniform_reward.clone(),
        },
        {"prompt_id": np.asarray(history.ids.values[rows.numpy()], dtype=object)},
    )


def prompt_ledger(ledger: type[PromptLedger], settings: LedgerSettings, dataset: Any) -> Any:
    """A ``ledger`` over the train dataset's ``prompt_key`` ids, warm-started from ``ledger_load`` when set (a
    resumed checkpoint's state replaces it)."""
    key = settings.prompt_key
    ids = dataset_column(
        dataset, key, what=f"dataflex.prompt_key={key!r}",
        fix="give every row a unique id in a column and set dataflex.prompt_key to it",
    )  # fmt: skip
    book = ledger(PromptIds(ids, key), settings.success_threshold)
    if settings.ledger_load is not None:
        book.load(settings.ledger_load)
    return book


def component_columns(step: StepContext, dataset: Any, mechanism: str) -> dict[str, Any]:
    """The dataset columns the mechanism's ``pre_rollout`` components read, each over every dataset row."""
    return {
        name: dataset_column(
            dataset,
            name,
            what=f"the column {name!r} a {mechanism} component reads",
            fix="add it to the dataset or configure components that do not read it",
        )  # fmt: skip
        for name in candidate_columns(step.pipeline)
    }


def valid_rows(
    book: PromptLedger, batch: Any, prompt_key: str, mechanism: str, step_id: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(valid, rows)``: the step's rows with a response (neither padding nor empty) and their ledger rows."""
    valid = valid_sample_mask(batch)
    ids = batch.non_tensor_batch.get(prompt_key)
    if ids is None:
        raise ConfigError(
            f"mechanism {mechanism} keys its ledger by the dataset column dataflex.prompt_key={prompt_key!r}, but "
            "the step's rows do not carry it; carry it into the rollouts or set dataflex.prompt_key to a column "
            "that is carried"
        )
    rows = book.ids.rows(np.asarray(ids, dtype=object)[valid.cpu().numpy()], f"the rows of step {step_id}")
    return valid, rows


def row_rewards(batch: Any) -> torch.Tensor:
    """Each row's outcome reward: ``rm_scores`` summed over its valid response tokens (float64 ``(bs,)``)."""
    scores = batch.batch.get(REWARD_FIELD)
    if scores is None:
        raise ConfigError(
            f"mechanism curriculum feeds its history from the step's rewards, but the batch has no {REWARD_FIELD!r}"
        )
    mask = batch.batch["response_mask"].to(torch.bool)
    return torch.where(mask, scores.to(torch.float64), torch.zeros((), dtype=torch.float64)).sum(-1)


class Curriculum(Mechanism):
    """A ``pre_rollout`` scorer and a sampler draw the prompts; each step's rewards feed their history."""

    name: ClassVar[str] = "curriculum"
    actuator_kind: ClassVar[str] = "sampler"
    keys: ClassVar[Mapping[str, Any]] = CURRICULUM_KEYS
    seams: ClassVar[tuple[type[Seam], ...]] = (TrainSampler,)
    timings: ClassVar[tuple[str, ...]] = ("pre_rollout",)
    #: the history is fed at every step, warm-up included, so the curriculum starts from everything seen
    runs_in_warmup: ClassVar[bool] = True
    #: every process keeps the same history, fed the same gathered rewards, so all draw the same prompts
    runs_on_every_process: ClassVar[bool] = True
    fallback: ClassVar[str] = "drawing uniformly"
    settings: CurriculumSettings

    def parse(self, block: Mapping[str, Any]) -> CurriculumSettings:
        return curriculum_settings(block)

    def refusal(self, seam: type[Seam], host: HostCapabilities, reason: str) -> str:
        return refused_curriculum(host, reason)

    @classmethod
    def check(cls, pipeline: DataFlexPipeline, host: HostCapabilities, loss_unit: str | None) -> None:
        if "pre_rollout" not in host.timings:
            raise IncompatibleComponentError(refused_curriculum(host, ""))
        check_components(pipeline, host.name)

    def fields(self, pipeline: DataFlexPipeline) -> list[str]:
        # its components read candidate prompts in the train sampler; the step reads the rewards and prompt ids
        return ["response_mask", REWARD_FIELD, self.settings.prompt_key]

    def dataset_columns(self, pipeline: DataFlexPipeline) -> list[str]:
        return list(dict.fromkeys([self.settings.prompt_key, *candidate_columns(pipeline)]))

    def train_sampler(self, step: StepContext, dataset: Any, batch_size: int, seed: int) -> CurriculumSampler:
        history = prompt_ledger(PromptHistory, self.settings, dataset)
        columns = component_columns(step, dataset, "curriculum")
        return CurriculumSampler(step, history, columns, batch_size, seed=seed, candidates=self.settings.candidates)

    def stateful(self, sampler: CurriculumSampler | None) -> dict[str, Any]:
        return {} if sampler is None else {"history": sampler.history}

    def ledger(self, sampler: CurriculumSampler | None) -> PromptHistory | None:
        return None if sampler is None else sampler.history

    def skip(self, step: StepContext, batch: Any, step_id: int) -> dict[str, float]:
        # the next draw is for the step after this one, though nothing of this one enters the history
        sampler = step.sampler
        if sampler is not None:
            sampler.history.last_step = max(sampler.history.last_step, int(step_id))
        return {f"{METRIC_PREFIX}prompts": 0.0}

    def run(self, step: StepContext, batch: Any, step_id: int, importance_weights: torch.Tensor | None) -> StepResult:
        """Feed the step's rewards to the prompt history and to the scorer's ``observe``; the step's metrics.

        The real rows with ``response_mask``, ``rm_scores`` and the ``prompt_key`` column feed it; rows with an
        empty response (framework padding among them) stay out of the history.
        """
        sampler = step.sampler
        if sampler is None:
            raise RuntimeError(
                "mechanism curriculum draws through the train sampler, but the host never built it "
                "(DataFlexSession.train_sampler)"
            )
        valid, rows = valid_rows(sampler.history, batch, self.settings.prompt_key, "curriculum", step_id)
        rewards = row_rewards(batch)[valid]
        return StepResult(self.feed(step, rows, rewards.cpu(), valid_token_counts(batch)[valid].cpu(), step_id))

    def feed(
        self,
        step: StepContext,
        rows: torch.Tensor,
        rewards: torch.Tensor,
        tokens: torch.Tensor,
        step_id: int,
        *,
        trained: torch.Tensor | None = None,
    ) -> dict[str, float]:
        """One step's valid responses (dataset ``rows``, rewards, tokens; ``trained``: see
        :meth:`~dataflex_core.ledger.PromptLedger.record`) into the history and the scorer's ``observe``; the
        step's metrics. ``mechanism: filter`` drawing by a curriculum feeds every generation round here."""
        settings, sampler = self.settings, step.sampler
        history = sampler.history
        outcomes = history.record(rows, rewards, step_id, tokens=tokens, trained=trained)
        if outcomes.outside_unit and settings.success_threshold is None:
            logger.warning(
                "dataflex: %d rewards of step %d lie outside [0, 1] and were clipped into it to count successes; set "
                "dataflex.success_threshold for rewards on another scale",
                outcomes.outside_unit,
                step_id,
            )
        step.calls.call("scorer", "observe", outcomes_batch(history, outcomes), step_id, at_step=step_id, **step.ctx)
        prompts = len(outcomes.rows)
        success = outcomes.successes.sum() / outcomes.rollouts.to(torch.float64).sum()
        uniform = outcomes.uniform_reward.to(torch.float64).mean()
        return {
            f"{METRIC_PREFIX}prompts": float(prompts),
            f"{METRIC_PREFIX}success_rate": float(success) if prompts else 0.0,
            f"{METRIC_PREFIX}uniform_reward_fraction": float(uniform) if prompts else 0.0,
            f"{METRIC_PREFIX}seen_fraction": history.seen_fraction,
            f"{METRIC_PREFIX}rewards_outside_unit": float(outcomes.outside_unit),
            **sampler.draw_metrics,
        }
