"""``mechanism: pilot`` (Pilot-Commit, arXiv 2605.26606): screen prompts with a few rollouts, commit the budget to
the prompts with signal.

``filter`` spends a whole group of ``rollout.n`` rollouts on a prompt before it learns the group has no
signal; ``pilot`` spends ``pilot.rollouts`` (2-4) on each of ``pilot.prompts`` x the batch's prompts, admits
with the same group scorer and selector as ``filter`` (any selector declaring ``admits_groups``, e.g.
``group_reward_variance`` + ``threshold_band``), and generates the rest of each trained group only for the
admitted prompts (:mod:`.stages`: caps, the short-step policy, keeping the pilot rollouts or not). It needs
the host's :class:`~dataflex_core.step.seams.StagedGeneration` seam; a host without it refuses the mechanism
at mount with its reason.

The loss is the framework's own on the assembled groups (advantages computed by the host within each whole
group); every generated rollout is in the ``dataflex/compute/*`` counters (the pilot rollouts outside the
trained batch as filtered), so ``dataflex compare --x rollouts`` charges the screening.

Every generated response feeds the per-prompt ledger as under ``filter`` when ``prompt_key`` names the dataset
column of the prompt ids: the step's stages are one ledger step, a committed prompt's rollouts recorded as
trained (its pilot rollouts too under ``keep: true``), every other pilot rollout as filtered; a prompt whose
pilot rewards were all equal is recorded with those rollouts and a reward without spread (all successes: too
easy, none: too hard), which is what GRESO's streak and ``solve_rate_ema`` read on later steps.

Pilot-Commit as published (``pilot: {preset: pilot-commit}``, or its parts: ``carry``, ``max_rounds``,
``one_call``, ``evict_solved``): rounds that explore 3x the batch and commit buffered prompts in one generation
call, a survivor buffer checkpointed with the mechanism (:mod:`.carry`), prompts solved on every pilot evicted from
the refill sampler (not with ``pilot.draw``: the drawing mechanism picks the prompts; the mount says so).

Config: :data:`~.settings.PILOT_KEYS`. The screened prompts come from a seeded shuffle of the dataset,
checkpointed, or with ``pilot.draw`` (as ``filter.draw``) from the train sampler it drives.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import replace
from functools import partial
from typing import Any, ClassVar

import numpy as np
import torch

from ...config import DataFlexPipeline
from ...errors import ConfigError, InvalidOutputError
from ...normalize import valid_sample_mask, valid_token_counts
from ...precomputed import moving_rows, prepare_batch
from ...step.context import StepContext
from ...step.host import HostCapabilities
from ...step.result import StepResult
from ...step.seams import S, Seam, StagedGeneration, StepStages
from ..base import Mechanism
from ..curriculum import REWARD_FIELD
from ..filter import Filter, group_rows
from .carry import SurvivorBuffer
from .settings import PILOT_COMMIT_BAND, PILOT_KEYS, PilotSettings, pilot_settings
from .stages import PILOT_PREFIX, PilotStages, screened_prompts, screening_cap, stage_rewards

logger = logging.getLogger("dataflex_core.step")


def stage_uids(batch: Any) -> torch.Tensor:
    """Each row's uid as the stage's requests gave it (integers), or an error saying the host must carry them."""
    uid = batch.non_tensor_batch.get("uid")
    try:
        return torch.as_tensor(np.asarray(uid).astype(np.int64), dtype=torch.long)
    except (TypeError, ValueError):
        raise InvalidOutputError(
            f"mechanism pilot reads each stage's rows by the uids its requests gave (integers), but the rows carry "
            f"uid {None if uid is None else np.asarray(uid)[:3].tolist()!r}...: a host of the staged_generation "
            "seam hands observe() the rows with StageRequests.uids as their uid"
        ) from None


class Pilot(Filter):
    """Screening stages admit prompts by their pilot rollouts; the commit stage tops the admitted up to ``rollout.n``.

    It shares the filter's admission (whole groups, by a selector declaring ``admits_groups``), its mount
    checks and its sampler of further prompts; what differs is the seam and the stages.
    """

    name: ClassVar[str] = "pilot"
    keys: ClassVar[Mapping[str, Any]] = PILOT_KEYS
    seams: ClassVar[tuple[type[Seam], ...]] = (StagedGeneration,)
    fallback: ClassVar[str] = "admitting every screened prompt"
    settings: PilotSettings

    def __init__(self, block: Mapping[str, Any]) -> None:
        super().__init__(block)
        #: Prompts a step screens at most, set by :meth:`prepare_refills` from the dataset's rows and the batch.
        self.max_screened: int | None = None
        #: ``pilot.carry``'s buffer, built by :meth:`prepare_refills` (it checks its rows against the dataset's).
        self.buffer: SurvivorBuffer | None = None

    def parse(self, block: Mapping[str, Any]) -> PilotSettings:
        return pilot_settings(block)

    def implement(self, seam: type[S], step: StepContext) -> S:
        if seam is StagedGeneration:
            return PilotStagedGeneration(self, step)  # type: ignore[return-value]
        return super().implement(seam, step)

    def refusal(self, seam: type[Seam], host: HostCapabilities, reason: str) -> str:
        return (
            f"{Mechanism.refusal(self, seam, host, reason)}. Use mechanism filter where the host generates further "
            "prompt batches (whole groups before admission)"
        )

    def fields(self, pipeline: DataFlexPipeline) -> list[str]:
        return list(dict.fromkeys([*super().fields(pipeline), REWARD_FIELD]))

    def mount(self, pipeline: DataFlexPipeline, host: HostCapabilities, *, grouped: bool | None) -> None:
        """Log the resolved settings (a preset's); say where the admission or eviction is not the paper's."""
        settings = self.settings
        if settings.preset is None and settings.carry is None and not settings.evict_solved:
            return
        if settings.carry is not None and settings.one_call and not host.support(StagedGeneration).mixed_counts:
            settings = self.settings = replace(settings, one_call=False)
            logger.info(
                "dataflex.pilot.one_call=false: %s generates one rollout count per call, so each round runs its "
                "counts in sequence (pilots, top-ups, fresh groups)", host.name,
            )  # fmt: skip
        actuator = pipeline.actuator
        band = {key: getattr(actuator, key, None) for key in PILOT_COMMIT_BAND}
        admission = f"{pipeline.scorer_spec.label} -> {pipeline.actuator_spec.label} {band}"
        logger.info("%s; admission: %s", settings.describe(), admission)
        paper = pipeline.scorer_spec.name == "group_solve_rate" and pipeline.actuator_spec.name == "threshold_band"
        if settings.preset is not None and not (paper and band == PILOT_COMMIT_BAND):
            logger.warning(
                "dataflex.pilot.preset=%s admits by the block's scorer and actuator (%s), not the paper's band: for "
                "it write scorer: {name: group_solve_rate}, actuator: {name: threshold_band, params: %s}",
                settings.preset, admission, PILOT_COMMIT_BAND,
            )  # fmt: skip
        if settings.evict_solved and settings.draw is not None:
            logger.warning(
                "dataflex.pilot.evict_solved does not apply with pilot.draw: the drawing %s picks the screened prompts "
                "(a curriculum's greso skips the solved ones); set evict_solved: false to silence this",
                settings.draw["mechanism"],
            )  # fmt: skip

    def prepare_refills(self, population: int, batch_size: int, seed: int) -> None:
        """Cap the prompts a step screens by the dataset's rows, build the refill sampler (as the filter's) and,
        with ``carry``, the buffer."""
        self.max_screened = screening_cap(self.settings, int(population), int(batch_size))
        super().prepare_refills(population, batch_size, seed)
        if self.settings.carry is not None and self.buffer is None:
            self.buffer = SurvivorBuffer(self.settings.carry, int(population), seed)

    def stateful(self, sampler: Any) -> dict[str, Any]:
        return {**super().stateful(sampler), **({} if self.buffer is None else {"carry": self.buffer})}

    def shared_state(self, sampler: Any) -> dict[str, Any]:
        """The filter's, and the survivor buffer as the main process left it (the others observed no stage)."""
        state = super().shared_state(sampler)
        return state if self.buffer is None else {**state, "carry": self.buffer.state_dict()}

    def load_shared_state(self, sampler: Any, state: Any) -> None:
        super().load_shared_state(sampler, state)
        if state and state.get("carry") is not None and self.buffer is not None:
            self.buffer.load_state_dict(state["carry"])

    def stages(self, groups: int, rollout_n: int, drawn: torch.Tensor | None) -> PilotStages:
        settings = self.settings
        if settings.rollouts_share is not None and isinstance(rollout_n, int) and not isinstance(rollout_n, bool):
            rollouts = max(int(rollout_n * settings.rollouts_share), 1)
            if rollouts != settings.rollouts:
                logger.info("dataflex.pilot: %d pilots of rollout.n=%d (the preset's 25 %%)", rollouts, rollout_n)
            settings = self.settings = replace(settings, rollouts=rollouts)
        if isinstance(rollout_n, bool) or not isinstance(rollout_n, int) or rollout_n < settings.rollouts:
            raise ConfigError(
                f"dataflex.pilot.rollouts={settings.rollouts} exceeds the framework's rollouts per prompt "
                f"(rollout.n={rollout_n!r}); set pilot.rollouts to at most rollout.n (2-4 of 8 or 16 is typical)"
            )
        if settings.max_screened is not None and settings.max_screened < groups:
            raise ConfigError(
                f"dataflex.pilot.max_screened={settings.max_screened} is below the batch's {groups} prompts: a step "
                "could never fill its batch; set it to at least the batch's prompts, or unset it"
            )
        if settings.carry is not None and settings.keep and rollout_n == settings.rollouts:
            raise ConfigError(
                f"dataflex.pilot.carry commits carried prompts with fresh groups, so pilot.rollouts={settings.rollouts} "
                f"must be below rollout.n={rollout_n}; lower pilot.rollouts (a quarter of rollout.n is the paper's)"
            )
        sampler = self.refill_sampler()
        cap = self.max_screened
        capped = settings if cap is None or settings.max_screened == cap else replace(settings, max_screened=cap)
        refill, floor = self.refill, settings.prompts * groups  # evictions leave at least a round's rows drawable
        evict = None if refill is None or not settings.evict_solved else (lambda rows: refill.evict(rows, floor))
        if evict is not None and drawn is not None:  # the host's own pull may hold an evicted row: not screened
            drawn = torch.as_tensor(drawn).flatten()
            drawn = drawn[~torch.isin(drawn, refill.evicted)]
        # the drawing scorer may size the screening stages after the first (GRESO's)
        size = None if settings.draw is None else partial(self.draw_size, rollout_n=settings.rollouts)
        return PilotStages(groups, rollout_n, capped, sampler.next_block, drawn, self.buffer, evict, size)

    def observe(self, step: StepContext, stages: PilotStages, batch: Any, step_id: int) -> None:
        """One stage's rows into ``stages``; a screening stage's prompts admitted by the scorer and selector."""
        prepare_batch(batch)
        uid = stage_uids(batch)
        padding = batch.batch.get("is_padding")
        if padding is not None:
            uid = torch.where(padding.bool().cpu(), torch.full_like(uid, -1), uid)
        tokens = valid_token_counts(batch).cpu()
        stages.check_generated(uid)  # before admission: every requested prompt has its rows
        prompts = self.round_prompts(step, batch, step_id)
        explored = stages.explored[-1]
        if len(explored):
            admitted, _, _ = self.admit(step, batch, step_id)  # per group, in group_rows' order of the real rows
            sub, _ = step.components_batch(batch)
            index, groups = group_rows(sub)
            per_prompt, mean, std, solved = screened_prompts(
                explored, admitted, index, groups, valid_sample_mask(sub).cpu(), stage_rewards(sub), stage_uids(sub),
                1.0 if self.settings.ledger.success_threshold is None else self.settings.ledger.success_threshold,
            )  # fmt: skip
            stages.record(uid, tokens, per_prompt, mean, std, step=step_id)
            if self.settings.evict_solved and self.draw is None:
                stages.solved.append(stages.prompt[explored][solved])  # evicted as the next stage is asked for
        else:  # a commit stage: its rows, checked
            stages.record(uid, tokens, step=step_id)
        stages.ledger_prompts.append(prompts)

    def row_groups(self, batch: Any) -> torch.Tensor:
        """Each row's uid: a stage's trained rows are those of its committed uids."""
        return stage_uids(batch)

    def run(self, step: StepContext, batch: Any, step_id: int, importance_weights: torch.Tensor | None) -> StepResult:
        """The trained batch, after the stages the host ran (``step.generation``): the pilot's metrics and counts."""
        stages = step.generation
        if not isinstance(stages, PilotStages):
            raise RuntimeError(
                "mechanism pilot runs on the batch its stages built; the host must generate them through "
                "session.seam(StagedGeneration) and pass the stages to DataFlexSession.run(generation=...)"
            )
        metrics = stages.metrics()
        advantages = batch.batch.get("advantages")
        if advantages is not None:
            sub, _ = step.components_batch(batch)
            # the counters' own pass over the advantages (the step's prepared batch): not a second one
            moving = moving_rows(sub.batch["advantages"], sub.batch["response_mask"])
            rows = valid_sample_mask(sub)  # the step's prepared counts: no pass over the tokens
            metrics[f"{PILOT_PREFIX}wasted_share"] = float((rows & ~moving).sum()) / max(int(rows.sum()), 1)
        # the ledger: the committed uids trained (a screening stage's only under keep: true), every other filtered
        metrics.update(self.feed_ledger(stages.ledger_prompts, stages.trained_uids(), step_id))
        metrics.update(self.run_draw(step, batch, step_id))
        return StepResult(metrics, compute=stages.counts())


class PilotStagedGeneration(StagedGeneration):
    """``mechanism: pilot``'s side of the staged-generation seam: what the host calls each step."""

    def __init__(self, mechanism: Pilot, step: StepContext) -> None:
        self.mechanism = mechanism
        self.step = step

    def prepare(self, population: int, *, batch_size: int, seed: int) -> None:
        self.mechanism.prepare_refills(population, batch_size, seed)

    def stages(self, groups: int, *, rollout_n: int, drawn: torch.Tensor | None = None) -> PilotStages:
        return self.mechanism.stages(int(groups), rollout_n, drawn)

    def observe(self, stages: StepStages, batch: Any, step: int) -> None:
        if not isinstance(stages, PilotStages):
            raise TypeError(f"mechanism pilot observes into the stages it made (stages()), not {stages!r}")
        self.mechanism.observe(self.step, stages, batch, step)
