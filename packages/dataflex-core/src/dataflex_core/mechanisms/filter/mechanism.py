"""``mechanism: filter``: admit or evict whole groups after reward, and refill until the batch is full.

``select`` drops groups and the batch shrinks; ``filter`` keeps it full. A
scorer and a selector decide which GRPO groups are *admitted* (every valid row
kept: keeping part of a group is invalid output). While fewer than the step's
``groups`` are admitted, the host generates a further prompt batch (a refill,
deterministic given the run's seed, checkpointed) and admits from it, up to
``max_rounds`` rounds (:class:`AdmissionRounds`). The trained batch is the
first ``groups`` admitted groups in generation order; a step still short
follows ``on_short`` (``raise``, or ``backfill`` with evicted groups): it never
trains on a smaller batch. The loss is the framework's own on the admitted
groups, whose advantages were computed within each group.

With ``prompt_key`` every generated response feeds the per-prompt ledger, as
trained or filtered, so its counts are the run's ``dataflex/compute/*``
totals; on a host with several processes the main one hands the others what it
recorded (:meth:`Filter.shared_state`), so every process's ledger is the same.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import replace
from typing import Any, ClassVar

import numpy as np
import torch

from ...config import DataFlexPipeline
from ...contracts import group_admission
from ...errors import ConfigError, IncompatibleComponentError, InvalidOutputError
from ...groups import group_index, segment_count
from ...ledger import PromptLedger
from ...normalize import valid_sample_mask, valid_token_counts
from ...precomputed import prepare_batch
from ...step.calls import component_label
from ...step.context import StepContext
from ...step.host import HostCapabilities
from ...step.result import StepResult
from ...step.seams import GenerationRounds, S, Seam, StepRounds
from ..base import Mechanism, check_rollout_time, selected_rows
from ..curriculum import REWARD_FIELD, Curriculum, curriculum_settings, prompt_ledger, row_rewards, valid_rows
from .refill import RefillSampler
from .rounds import FILTER_PREFIX, AdmissionRounds, LedgerFeed, RoundPrompts
from .settings import DRAW_INHERITS, FILTER_KEYS, FilterSettings, filter_settings

logger = logging.getLogger("dataflex_core.step")


def group_rows(batch: Any) -> tuple[torch.Tensor, int]:
    """``(index, groups)``: each row's group (by ``uid``, in sorted order) and the number of groups."""
    uid = batch.non_tensor_batch.get("uid")
    if uid is None:
        raise ConfigError("mechanism filter admits whole GRPO groups, but the step's rows carry no 'uid'")
    index, groups = group_index(uid)
    return torch.as_tensor(index, dtype=torch.long), int(groups)


class Filter(Mechanism):
    """A selector admits whole groups; the host refills rounds until ``groups`` are admitted."""

    name: ClassVar[str] = "filter"
    actuator_kind: ClassVar[str] = "selector"
    keys: ClassVar[Mapping[str, Any]] = FILTER_KEYS
    seams: ClassVar[tuple[type[Seam], ...]] = (GenerationRounds,)
    fallback: ClassVar[str] = "admitting every group"
    settings: FilterSettings

    def __init__(self, block: Mapping[str, Any]) -> None:
        super().__init__(block)
        self.prompt_ledger: PromptLedger | None = None
        #: ``filter.draw``: the mix or curriculum that draws the prompts, and the step it runs in (the runner
        #: mounts it and hands it over, :meth:`adopt`).
        self.draw: StepContext | None = None
        self.draw_mechanism: Mechanism | None = None
        self.refill: RefillSampler | None = None
        self._inherited = {key: block[key] for key in DRAW_INHERITS if key in block}
        #: The last step's ledger feed, until :meth:`shared_state` hands it to a host's other processes.
        self._fed: LedgerFeed | None = None
        #: Generation rounds a step runs at most, set by the seam's ``prepare`` (:func:`rounds_cap`).
        self.max_rounds: int | None = None

    @property
    def draw_curriculum(self) -> bool:
        """A curriculum draws the prompts: its history is the ledger, fed with every round."""
        return isinstance(self.draw_mechanism, Curriculum)

    def nested(self) -> dict[str, Mapping[str, Any]]:
        draw = self.settings.draw
        return {} if draw is None else {"draw": {**self._inherited, **draw}}

    def adopt(self, role: str, mechanism: Mechanism, step: StepContext) -> None:
        self.draw, self.draw_mechanism = step, mechanism

    def describe_nested(self, role: str, text: str) -> str:
        return f"prompts drawn by {text}"

    def state_labels(self) -> dict[str, str]:
        draw = self.draw
        if draw is None:
            return {}
        return {"draw_scorer": draw.pipeline.scorer_spec.label, "draw_actuator": draw.pipeline.actuator_spec.label}

    def refusal(self, seam: type[Seam], host: HostCapabilities, reason: str) -> str:
        return (
            f"mechanism filter keeps the batch full by generating further prompt batches within a step, but "
            f"{host.name} cannot refill: {reason or 'it has no generation rounds'}. Use mechanism "
            "select to train on the admitted groups alone (the batch shrinks)"
        )

    def implement(self, seam: type[S], step: StepContext) -> S:
        if seam is GenerationRounds:
            return FilterRounds(self, step)  # type: ignore[return-value]
        return super().implement(seam, step)

    def prepare_refills(self, population: int, batch_size: int, seed: int) -> None:
        """Build the refill sampler (once), unless ``filter.draw``'s train sampler draws the refills."""
        if self.draw is None and self.refill is None:
            self.refill = RefillSampler(population, batch_size, seed)

    def refill_sampler(self) -> Any:
        """With ``filter.draw`` the train sampler it drives (refills are drawn as the dataloader's prompts are),
        else the filter's own."""
        if self.draw is not None:
            if self.draw.sampler is None:
                raise RuntimeError(
                    "filter.draw refills from the train sampler, but the host has not built it yet "
                    "(DataFlexSession.train_sampler)"
                )
            return self.draw.sampler
        if self.refill is None:
            raise RuntimeError(
                "mechanism filter's refill sampler is not built yet: the host calls "
                "session.seam(GenerationRounds).prepare(...) where it builds its train dataloader"
            )
        return self.refill

    @property
    def ledger_key(self) -> str | None:
        """The dataset column the step's rows must carry for the ledger (``None``: no ledger)."""
        draw = self.settings.draw
        if draw is not None and draw["mechanism"] == "curriculum":
            return curriculum_settings(draw).prompt_key
        return self.settings.ledger.prompt_key

    def parse(self, block: Mapping[str, Any]) -> FilterSettings:
        return filter_settings(block)

    @classmethod
    def check(cls, pipeline: DataFlexPipeline, host: HostCapabilities, loss_unit: str | None) -> None:
        check_rollout_time(pipeline, host, cls.name)
        if not getattr(pipeline.actuator, "admits_groups", False):
            raise IncompatibleComponentError(
                f"{pipeline.actuator_spec.kind} {pipeline.actuator_spec.label} does not declare admits_groups; "
                f"mechanism {cls.name} admits or evicts whole groups, so its selector must promise to keep or drop "
                "each group whole on a group scorer's scores: use threshold_band, or declare "
                "admits_groups = True on your selector and certify it (nox -s conformance)"
            )
        if bool(pipeline.actuator.recompute_advantage):
            raise IncompatibleComponentError(
                f"{pipeline.actuator_spec.kind} {pipeline.actuator_spec.label} keeps part of each group "
                f"(recompute_advantage=True); mechanism {cls.name} admits or evicts whole groups: pick a selector of "
                "whole groups (threshold_band on a group scorer)"
            )

    def fields(self, pipeline: DataFlexPipeline) -> list[str]:
        key = self.ledger_key
        ledger = [] if key is None else [REWARD_FIELD, key]
        return list(dict.fromkeys([*pipeline.requires, "uid", *ledger]))

    def dataset_columns(self, pipeline: DataFlexPipeline) -> list[str]:
        draw, mechanism, key = self.draw, self.draw_mechanism, self.settings.ledger.prompt_key
        drawn = [] if draw is None or mechanism is None else mechanism.dataset_columns(draw.pipeline)
        return list(dict.fromkeys([*([] if key is None else [key]), *drawn]))

    def train_sampler(self, step: StepContext, dataset: Any, batch_size: int, seed: int) -> Any:
        """With ``filter.draw``, the draw mechanism's sampler (a curriculum's history is then the ledger); else
        ``None``: the host keeps its prompt order, and with ``prompt_key`` the ledger is keyed by ``dataset``."""
        draw, mechanism = self.draw, self.draw_mechanism
        if draw is not None and mechanism is not None and draw.sampler is None:
            draw.sampler = mechanism.train_sampler(draw, dataset, batch_size, seed)
        if draw is not None and self.draw_curriculum:
            self.prompt_ledger = draw.sampler.history
        elif self.settings.ledger.prompt_key is not None and self.prompt_ledger is None:
            self.prompt_ledger = prompt_ledger(PromptLedger, self.settings.ledger, dataset)
        return None if draw is None else draw.sampler

    def stateful(self, sampler: Any) -> dict[str, Any]:
        draw, mechanism = self.draw, self.draw_mechanism
        roles: dict[str, Any] = {} if self.refill is None else {"refill": self.refill}  # none with filter.draw
        if draw is not None and mechanism is not None:
            roles.update(draw_scorer=draw.pipeline.scorer, draw_actuator=draw.pipeline.actuator)
            roles.update({f"draw_{role}": value for role, value in mechanism.stateful(draw.sampler).items()})
        if self.prompt_ledger is not None and not self.draw_curriculum:
            roles["ledger"] = self.prompt_ledger
        return roles

    def restored(self, sampler: Any, host: HostCapabilities) -> None:
        if self.draw is not None and self.draw_mechanism is not None:
            self.draw_mechanism.restored(self.draw.sampler, host)

    def ledger(self, sampler: Any) -> PromptLedger | None:
        return self.prompt_ledger

    def round_prompts(self, step: StepContext, batch: Any, step_id: int) -> RoundPrompts | None:
        """One round's valid responses for the ledger (``None`` without one): ledger rows, rewards, tokens, group."""
        if self.prompt_ledger is None:
            return None
        sub, _ = step.components_batch(batch)
        valid, rows = valid_rows(self.prompt_ledger, sub, self.ledger_key, self.name, step_id)
        valid = valid.cpu()
        tokens = valid_token_counts(sub).cpu()[valid]
        return RoundPrompts(rows, row_rewards(sub)[valid].cpu(), tokens, self.row_groups(sub)[valid])

    def row_groups(self, batch: Any) -> torch.Tensor:
        """Each row's group, as :meth:`feed_ledger` matches it against the groups kept: by ``uid``."""
        return group_rows(batch)[0]

    def feed_ledger(
        self, prompts: list[RoundPrompts | None], chosen: list[torch.Tensor], step_id: int
    ) -> dict[str, float]:
        """Each part's valid responses into the ledger, or the drawing curriculum (what every prompt did, evicted
        ones included): trained where their ``group`` is in the part's ``chosen``, else filtered."""
        ledger = self.prompt_ledger
        parts = [(p, keep) for p, keep in zip(prompts, chosen) if p is not None]
        if ledger is None or not parts:
            return {}
        rows = torch.cat([p.rows for p, _ in parts])
        trained = torch.cat([torch.isin(p.group, keep) for p, keep in parts])
        rewards = torch.cat([p.rewards for p, _ in parts])
        tokens = torch.cat([p.tokens for p, _ in parts])
        self._fed = LedgerFeed(rows, rewards, tokens, trained, int(step_id))
        return self.apply_feed(self._fed)

    def apply_feed(self, feed: LedgerFeed) -> dict[str, float]:
        """One step's responses into the ledger, or the drawing curriculum (whose metrics it returns)."""
        rows, rewards, tokens, trained = feed.rows, feed.rewards, feed.tokens, feed.trained
        if isinstance(self.draw_mechanism, Curriculum) and self.draw is not None:
            return self.draw_mechanism.feed(self.draw, rows, rewards, tokens, feed.step, trained=trained)
        assert self.prompt_ledger is not None
        self.prompt_ledger.record(rows, rewards, feed.step, tokens=tokens, trained=trained)
        skip = getattr(self.settings, "skip_constant", None)
        if skip is None or self.refill is None:
            return {}
        seen = torch.unique(rows)
        constant = seen[self.prompt_ledger.uniform_reward_streak[seen] >= skip]
        skipped = self.refill.evict(constant, self.refill.batch_size, "dataflex.filter.skip_constant")
        return {f"{FILTER_PREFIX}skipped_constant_prompts": float(skipped)}

    def shared_state(self, sampler: Any) -> dict[str, Any]:
        """The step's ledger feed (the other processes record the same responses, so a curriculum's draws stay
        equal) and a drawing mix's proportions."""
        fed, self._fed = self._fed, None
        draw, mechanism = self.draw, self.draw_mechanism
        mixing = draw is not None and mechanism is not None and not self.draw_curriculum
        mix = mechanism.shared_state(draw.sampler) if mixing else None  # type: ignore[union-attr]
        return {"ledger": fed, "draw": mix}

    def load_shared_state(self, sampler: Any, state: Any) -> None:
        if not state:
            return
        if state.get("ledger") is not None and self.prompt_ledger is not None:
            self.apply_feed(state["ledger"])
        draw, mechanism = self.draw, self.draw_mechanism
        if state.get("draw") is not None and draw is not None and mechanism is not None:
            mechanism.load_shared_state(draw.sampler, state["draw"])

    def run_draw(self, step: StepContext, batch: Any, step_id: int) -> dict[str, float]:
        """A mix drawing the prompts: its step on the trained batch (its scorer, then new proportions)."""
        draw, mechanism = self.draw, self.draw_mechanism
        if draw is None or mechanism is None or self.draw_curriculum or draw.idle(step_id) is not None:
            return {}
        result, _ = draw.on_invalid.attempt(
            lambda: mechanism.run(draw, batch, step_id, None), step=step_id, instead=mechanism.fallback
        )
        return {} if result is None else result.metrics

    def draw_size(
        self, *, missing: int, zero: int, groups: int, rollout_n: int, default: int, step_id: int
    ) -> int | None:
        """The prompts a step's next draw takes: the drawing curriculum scorer's
        :meth:`~dataflex_core.Scorer.next_draw_size` given the last round (``zero`` of its ``groups`` without signal,
        ``missing`` groups still to admit), ``None`` where it has none, a whole number in ``[1, the dataset's rows]``
        or invalid output (under ``on_invalid: uniform``, ``None``)."""
        draw = self.draw
        if draw is None or not self.draw_curriculum or not draw.active(step_id):
            return None
        rows, label = len(draw.sampler.history), component_label(draw.pipeline, "scorer")
        asked = {
            "missing_groups": int(missing), "zero_variance_groups": int(zero), "groups": int(groups),
            "rollout_n": int(rollout_n), "default_size": int(default),
        }  # fmt: skip

        def ask() -> int | None:
            size = draw.calls.call("scorer", "next_draw_size", at_step=step_id, **asked)
            if size is None:
                return None
            if isinstance(size, bool) or not isinstance(size, (int, np.integer)) or not 1 <= size <= rows:
                raise InvalidOutputError(
                    f"{label} gave next_draw_size {size!r} at step {step_id}; a refill round draws a whole number "
                    f"of prompts from 1 to the train dataset's {rows}"
                )
            return int(size)

        size, _ = draw.on_invalid.attempt(ask, step=step_id, instead="drawing the batch's size")
        return size

    def admit(self, step: StepContext, batch: Any, step_id: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """One round's ``(admitted, rollouts, tokens)`` per group in sorted ``uid`` order; under ``on_invalid:
        uniform`` an invalid selection admits every group with a valid row."""
        sub, _ = step.components_batch(batch)
        index, groups = group_rows(sub)
        valid = valid_sample_mask(sub).cpu()
        rollouts = segment_count(index, groups, torch.ones_like(valid)).to(torch.long)
        tokens = torch.zeros(groups, dtype=torch.long).index_add_(0, index, valid_token_counts(sub).cpu())
        has_valid = segment_count(index, groups, valid) > 0
        keep, _ = step.on_invalid.attempt(
            lambda: selected_rows(step, sub, step_id), step=step_id, instead=self.fallback
        )
        if keep is None:
            return has_valid, rollouts, tokens
        admitted, partial = group_admission(keep, index, groups, valid)
        if bool(partial.any()):
            raise InvalidOutputError(
                f"{component_label(step.pipeline, 'actuator')} kept part of {int(partial.sum())} group(s) at step "
                f"{step_id}; mechanism {self.name} admits or evicts whole groups: use a group scorer (granularity "
                "prompt, e.g. group_reward_variance) with a band selector (threshold_band)"
            )
        return admitted, rollouts, tokens

    def run(self, step: StepContext, batch: Any, step_id: int, importance_weights: torch.Tensor | None) -> StepResult:
        """The trained batch, after the rounds the host ran (``step.generation``): its metrics and compute counts."""
        rounds = step.generation
        if not isinstance(rounds, AdmissionRounds):
            raise RuntimeError(
                "mechanism filter runs on the batch its generation rounds built; the host must admit each round "
                "through session.seam(GenerationRounds) and pass the rounds to DataFlexSession.run(generation=...)"
            )
        chosen = rounds.chosen()
        metrics = rounds.metrics(chosen)
        metrics.update(self.feed_ledger(rounds.prompts, chosen, step_id))
        metrics.update(self.run_draw(step, batch, step_id))
        return StepResult(metrics, compute=rounds.counts(chosen))


def rounds_cap(settings: FilterSettings, population: int, batch_size: int) -> int:
    """``max_rounds``, capped (with a warning) where a step's refills would draw more prompts than the dataset's
    ``population`` rows, so a step never runs on through passes of the dataset."""
    refills = (settings.max_rounds - 1) * batch_size
    if refills <= population:
        return settings.max_rounds
    cap = 1 + -(-population // max(batch_size, 1))
    logger.warning(
        "dataflex.filter: (max_rounds=%d - 1) x the batch's %d prompts = %d refill prompts a step may draw, more than "
        "the train dataset's %d rows; a step runs at most %d generation rounds",
        settings.max_rounds, batch_size, refills, population, cap,
    )  # fmt: skip
    return cap


class FilterRounds(GenerationRounds):
    """``mechanism: filter``'s side of the generation-rounds seam: what the host calls each step."""

    def __init__(self, mechanism: Filter, step: StepContext) -> None:
        self.mechanism = mechanism
        self.step = step

    def prepare(self, population: int, *, batch_size: int, seed: int) -> None:
        self.mechanism.max_rounds = rounds_cap(self.mechanism.settings, int(population), int(batch_size))
        self.mechanism.prepare_refills(population, batch_size, seed)

    def refill_sampler(self) -> Any:
        return self.mechanism.refill_sampler()

    def refill_rows(self, rounds: StepRounds) -> list[int]:
        sampler, size = self.mechanism.refill_sampler(), getattr(rounds, "refill_size", None)
        return sampler.next_block() if size is None else sampler.next_block(size)

    def rounds(self, groups: int) -> AdmissionRounds:
        cap, settings = self.mechanism.max_rounds, self.mechanism.settings
        return AdmissionRounds(int(groups), settings if cap is None else replace(settings, max_rounds=cap))

    def admit(self, rounds: StepRounds, batch: Any, step: int) -> torch.Tensor:
        if not isinstance(rounds, AdmissionRounds):
            raise TypeError(f"mechanism filter admits into the rounds it made (rounds()), not {rounds!r}")
        prepare_batch(batch)
        mechanism = self.mechanism
        admitted, rollouts, tokens = mechanism.admit(self.step, batch, step)
        rounds.add(admitted, rollouts, tokens, mechanism.round_prompts(self.step, batch, step))
        draw, last, rounds.refill_size = mechanism.draw, rounds.prompts[-1], None
        if rounds.needs_refill and draw is not None and last is not None:  # the next refill's size: the last round's
            zero, groups = last.zero_variance()
            rounds.refill_size = mechanism.draw_size(
                missing=rounds.groups - rounds.admitted_groups, zero=zero, groups=groups,
                rollout_n=int(rounds.rollouts[-1].max()), default=int(draw.sampler.batch_size), step_id=step,
            )  # fmt: skip
        return admitted
