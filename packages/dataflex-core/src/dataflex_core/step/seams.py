"""The host seams: what a mechanism needs a host to do for it, beyond handing it the step's batch.

A mechanism declares the seams it needs (:attr:`~dataflex_core.mechanisms.Mechanism.seams`) and carries
their code; a host declares the seams it provides, and why not the others
(:attr:`~dataflex_core.step.HostCapabilities.seams`), and mount refuses a mechanism whose seam the host
lacks with the host's reason. The session hands the host the mounted mechanism's implementation
(:meth:`~dataflex_core.session.DataFlexSession.seam`, ``None`` when unused), so a host tests for a seam,
never for a mechanism's name. A new way of acting through the host is one more subclass of :class:`Seam`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar

import torch


class Seam:
    """One way a mechanism acts through the host; a subclass is the interface the host calls, an instance a
    mounted mechanism's implementation."""

    #: How hosts, errors and the docs name the seam.
    name: ClassVar[str] = ""
    #: What a host that provides it does, completing "the host must ...", for refusals and the docs.
    does: ClassVar[str] = ""


#: A seam class, as the accessors take and return it.
S = TypeVar("S", bound=Seam)


class LossWeights(Seam):
    """The host multiplies the step's weights into its loss: ``StepResult.applied`` (mean one in the loss's unit),
    with what the mounted mechanism decided of the host's ``hard_drop`` and ``recompute_advantage``."""

    name = "loss_weights"
    does = "multiply the step's weights into its loss"

    def __init__(self, *, recompute_advantage: bool = False, hard_drop: bool = False) -> None:
        #: The host recomputes group advantages on a selector's kept rows (``StepResult.kept``), so it reads its
        #: estimator's inputs too.
        self.recompute_advantage = recompute_advantage
        #: The host removes the rows outside ``StepResult.kept`` from its loss mask and denominator.
        self.hard_drop = hard_drop


class TrainSampler(Seam):
    """The host draws its prompts through the sampler :meth:`~dataflex_core.session.DataFlexSession.train_sampler`
    returns, in its dataloader."""

    name = "train_sampler"
    does = "draw its prompts through DataFlex's train sampler"

    def __init__(self) -> None:
        #: The sampler, once the host called ``session.train_sampler`` (``None`` before).
        self.sampler: Any = None


class StepRounds:
    """One step's generation rounds, as a :class:`GenerationRounds` seam keeps them: the host reads these."""

    #: The groups the trained batch must have.
    groups: int

    @property
    def rounds(self) -> int:
        """Generation rounds so far (the first included)."""
        raise NotImplementedError

    @property
    def admitted_groups(self) -> int:
        """Groups admitted so far, over every round."""
        raise NotImplementedError

    @property
    def needs_refill(self) -> bool:
        """The host generates one more prompt batch (too few groups admitted, and another round allowed)."""
        raise NotImplementedError

    def chosen(self) -> list[torch.Tensor]:
        """Per round, the indices of its groups (in the seam's group order) the trained batch keeps, in order."""
        raise NotImplementedError


class GenerationRounds(Seam):
    """The host generates further prompt batches within a step until enough of their groups are admitted.

    Per step the host calls :meth:`rounds`, generates a prompt batch, hands its rollouts to :meth:`admit`, and
    while ``rounds.needs_refill`` generates the next round's rows (:meth:`refill_rows`); it then trains the groups
    ``rounds.chosen()`` names, passing ``generation=rounds`` to :meth:`~dataflex_core.session.DataFlexSession.run`.
    """

    name = "generation_rounds"
    does = "generate further prompt batches within a step until the batch is full"

    def prepare(self, population: int, *, batch_size: int, seed: int) -> None:
        """Build what the rounds draw refill prompts from (``population``: the train dataset's rows), before a
        resume restores its position: where the host builds its train dataloader, after ``session.train_sampler``."""
        raise NotImplementedError

    def refill_sampler(self) -> Any:
        """The sampler of refill prompt batches (``next_block()``: one batch of dataset rows)."""
        raise NotImplementedError

    def refill_rows(self, rounds: StepRounds) -> list[int]:
        """The dataset rows of the next refill round: as many as the mechanism sizes it (``rounds.refill_size``),
        by default a batch from :meth:`refill_sampler`. The host generates exactly these."""
        return self.refill_sampler().next_block()

    def rounds(self, groups: int) -> StepRounds:
        """A new step's rounds, for a trained batch of ``groups`` groups."""
        raise NotImplementedError

    def admit(self, rounds: StepRounds, batch: Any, step: int) -> torch.Tensor:
        """Admit one round's groups (``batch`` in the canonical fields) into ``rounds``; each group's flag."""
        raise NotImplementedError


class PromptCounts(Seam):
    """The host generates a number of rollouts per prompt that DataFlex gives it, before rollout.

    Per batch of prompts the host calls :meth:`counts` with their ids (the dataset column :attr:`prompt_key`)
    and generates exactly ``counts[i]`` rollouts for prompt ``i``.
    """

    name = "prompt_counts"
    does = "generate the number of rollouts DataFlex gives each prompt"

    #: The dataset column whose value identifies each prompt.
    prompt_key: str = "index"
    #: Rollouts per batch of prompts; ``None``: its prompts times the framework's uniform count.
    budget: int | None = None

    def check_budget(self, prompts: int, rollout_n: int, where: str) -> int:
        """The budget of a batch of ``prompts`` prompts (uniform count ``rollout_n``), or a ``ConfigError`` that
        says which key to change; ``where`` names the batch in it."""
        raise NotImplementedError

    def counts(
        self, prompt_ids: Sequence[Any], step: int, *, rollout_n: int, uids: Sequence[Any] | None = None
    ) -> torch.Tensor:
        """Each prompt's rollouts, int64 ``(n,)`` in the order of ``prompt_ids``.

        :param rollout_n: the framework's uniform count; :param uids: each prompt's group id, so the step can
            check what came back.
        """
        raise NotImplementedError


@dataclass(frozen=True)
class StageRequests:
    """One generation stage: roll prompt ``prompts[i]`` (a dataset row) out ``counts[i]`` times (0 too), under
    group ``uids[i]``; all int64 ``(k,)``. A prompt requested again in a later stage of the step keeps its
    ``uid``: its rollouts of every stage are one group (same weights, so equally on-policy)."""

    prompts: torch.Tensor
    counts: torch.Tensor
    uids: torch.Tensor

    @property
    def rollouts(self) -> int:
        """Rollouts this stage asks for."""
        return int(self.counts.sum())


class StepStages:
    """One step's generation stages, as a :class:`StagedGeneration` seam keeps them: the host reads these."""

    #: The groups the trained batch must have.
    groups: int

    @property
    def stages(self) -> int:
        """Stages generated so far."""
        raise NotImplementedError

    def next(self) -> StageRequests | None:
        """The next stage's requests, decided on every stage observed so far; ``None``: the step is generated."""
        raise NotImplementedError

    def trained(self) -> list[torch.Tensor]:
        """Per stage, the indices of its rows (in the order the host handed them to ``observe``, padding rows
        included) that the trained batch keeps; the trained batch is their concatenation, stage after stage."""
        raise NotImplementedError


class StagedGeneration(Seam):
    """The host generates a step's rollouts in stages, each a set of (prompt, rollouts) requests.

    Per step the host calls :meth:`stages`; while ``stages.next()`` gives requests it generates exactly
    ``counts[i]`` rollouts of dataset row ``prompts[i]`` with ``uid`` ``uids[i]`` (all under the step's weights)
    and hands them to :meth:`observe` with their rewards; it then trains the rows ``stages.trained()`` names
    (group advantages computed on the assembled batch, where each group is whole), passing
    ``generation=stages`` to :meth:`~dataflex_core.session.DataFlexSession.run`.
    """

    name = "staged_generation"
    does = "generate a step's rollouts in stages of (prompt, rollouts) requests, each decided on the last's rewards"

    def prepare(self, population: int, *, batch_size: int, seed: int) -> None:
        """Build what the stages draw prompts from, before a resume restores its position (where the host builds
        its train dataloader, after ``session.train_sampler``)."""
        raise NotImplementedError

    def stages(self, groups: int, *, rollout_n: int, drawn: torch.Tensor | None = None) -> StepStages:
        """A new step's stages for a trained batch of ``groups`` groups of ``rollout_n`` rollouts.

        :param drawn: dataset rows the host's own dataloader already drew for the step (screened first).
        """
        raise NotImplementedError

    def observe(self, stages: StepStages, batch: Any, step: int) -> None:
        """One stage's rollouts (``batch`` in the canonical fields, ``uid`` the requests' uids) into ``stages``."""
        raise NotImplementedError


#: The seams of this release, in the order the docs list them.
SEAMS: tuple[type[Seam], ...] = (LossWeights, TrainSampler, GenerationRounds, PromptCounts, StagedGeneration)
