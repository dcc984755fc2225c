"""What a host provides the kit: one real step of its framework, a save and a resume through its checkpoints."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from dataflex_core.session import DataFlexSession, HostCapabilities


# -- what a host provides ----------------------------------------------------------------------------------------
@dataclass
class HostStep:
    """One training step of the framework on the harness's batch, as its loss saw it."""

    #: The framework's loss on the step's batch (a scalar), computed by the framework's own loss code.
    loss: torch.Tensor
    #: ``(rows, L)`` bool: the tokens the framework's loss counts, as the framework built them (before DataFlex).
    loss_mask: torch.Tensor
    #: ``(rows,)`` bool: the padding rows and empty responses of the batch (what no component may weigh).
    inert: torch.Tensor
    #: ``token`` or ``sequence``: the unit the framework's loss averages over in this configuration.
    loss_unit: str
    #: ``(rows, L)``: the weight of each token in the framework's loss that the host applied (``None``: it
    #: left the loss as the framework computes it).
    weights: torch.Tensor | None = None
    #: The step's ``dataflex/*`` metrics (empty without DataFlex).
    metrics: dict[str, float] = field(default_factory=dict)
    #: ``(rows, L)`` bool: the tokens the loss counted once DataFlex acted, where a hard drop removed rows from
    #: the loss mask (``None``: ``loss_mask``, nothing removed).
    trained_mask: torch.Tensor | None = None
    #: ``(rows,)`` or ``(rows, L)``: the advantages the loss multiplied, before any DataFlex weight (a selector's
    #: recomputed ones where the host recomputed them; ``None``: not reported, needed by the recompute suite).
    advantages: torch.Tensor | None = None
    #: The harness's own record of the step's batch (responses, rewards, groups), read back by its
    #: :meth:`HostHarness.advantages_alone` and :meth:`HostHarness.loss_alone`; the suites never read it.
    batch: Any = None


@dataclass
class RoundsStep:
    """One step of the framework's generation rounds (``mechanism: filter``), as its trained batch came out."""

    #: ``(rows,)`` int64: the prompt (dataset ``index``) of each trained row, padding rows left out.
    prompts: torch.Tensor
    #: ``(rows,)``: the group (``uid``) of each trained row, as the framework carries it.
    uids: Any
    #: Groups (prompts) a step of the framework trains, and rollouts per group.
    groups: int
    group_size: int
    #: Generation rounds the step took, the first included.
    rounds: int


@dataclass
class CountsStep:
    """One batch of prompts under per-prompt rollout counts (``mechanism: allocate``), as the framework got it."""

    #: ``(prompts,)`` int64: each prompt's dataset ``index``, in the order the host dispatched them.
    prompts: torch.Tensor
    #: ``(prompts,)``: each prompt's group id (``uid``), as the framework gave it.
    uids: Any
    #: ``(prompts,)`` int64: the rollouts the host asked the framework for, per prompt.
    counts: torch.Tensor
    #: The framework's uniform count (``rollout.n``, ``num_generations``): the budget is ``prompts x rollout_n``.
    rollout_n: int
    #: ``(rollouts,)``: the group id of every rollout the framework generated for the batch.
    generated: Any


@dataclass
class StagedRows:
    """Rows of a staged step: each row's group, its dataset row and its response tokens (the row's identity)."""

    #: ``(rows,)`` int64: the row's group (a stage's ``uid``; in the trained batch any label, one per group).
    group: torch.Tensor
    #: ``(rows,)`` int64: the dataset row of the row's prompt.
    prompt: torch.Tensor
    #: ``(rows, L)``: the row's response tokens, as generated.
    response: torch.Tensor
    #: ``(rows,)``: the row's reward as the framework scored it (summed over its tokens; NaN for a row outside the
    #: loss, an empty response); the staged suite's carry and eviction tests read it to know which prompts the kit's
    #: selector admits and which are solved.
    reward: torch.Tensor | None = None


@dataclass
class StagedStep:
    """One step a host generated in stages (the staged-generation seam), as it generated and trained it."""

    #: Per stage: the requests ``stages.next()`` gave the host.
    requests: list[Any]
    #: Per stage: the real rows the host generated for them and handed to ``observe`` (padding rows left out).
    generated: list[StagedRows]
    #: Per stage: the indices into ``generated[stage]`` of the rows ``stages.trained()`` names (padding left out).
    kept: list[torch.Tensor]
    #: The real rows of the batch the framework trained.
    trained: StagedRows
    #: The trained batch's groups (its prompts) and rollouts per group, as the host asked the seam for them.
    groups: int
    rollout_n: int
    #: The step's ``dataflex/*`` metrics.
    metrics: dict[str, float] = field(default_factory=dict)


class HostHarness:
    """A host's real framework, driven by the suite. Subclass it and implement the three methods.

    Every :meth:`step` runs on the same batch (same prompts, same responses, same rewards: seed it), built as
    the framework builds it, with at least one padding row or empty response.
    """

    def capabilities(self) -> HostCapabilities:
        """The host's declaration for the harness's configuration: the kit runs the suites of the seams it
        provides and skips the others with the host's reason. Default: the loss-weights seam alone."""
        return HostCapabilities(name=type(self).__name__)

    def draws(self, block: Mapping[str, Any], steps: int, resume_after: int | None = None) -> list[torch.Tensor]:
        """The prompts the framework's own dataloader draws for ``steps`` steps with ``block`` (its train sampler
        seam), as int64 tensors of their ids: the train dataset's ``index`` column, unique per prompt, over at least
        16 prompts, half of them even, at least ``steps`` batches of them (so a resume after 2 is mid-epoch). Seed
        them: the same call draws the same prompts. Needed by hosts that provide the train-sampler seam.

        :param resume_after: draw that many batches, save the sampler's state as the framework checkpoints it
            (its own save, or its dataloader's ``state_dict``), restore it into a fresh run's dataloader (its own
            resume) and draw the remaining batches there; the batches of both, in order.
        """
        raise NotImplementedError(
            f"{type(self).__name__}.draws(block, steps, resume_after=None) must build the framework's train "
            "dataloader with the dataflex block over a dataset with a unique int 'index' column and return the ids "
            "each of `steps` batches drew (with resume_after: the first batches, then those of a fresh loader "
            "restored from the state the framework saved after them)"
        )

    def advantages_alone(self, step: HostStep, rows: torch.Tensor) -> torch.Tensor:
        """The framework's own advantage estimator on the rows ``rows`` of ``step``'s batch alone (the same
        responses and rewards, as if only those rows had been sampled): ``(len(rows),)`` or ``(len(rows), L)``.
        Needed by hosts that recompute a selector's advantages (``HostCapabilities.recompute_advantage``)."""
        raise NotImplementedError(
            f"{type(self).__name__}.advantages_alone(step, rows) must run the framework's advantage estimator on the "
            "given rows of the step's batch (HostStep.batch) alone and return their advantages"
        )

    def loss_alone(self, step: HostStep, rows: torch.Tensor) -> torch.Tensor:
        """The framework's own loss (a scalar) on a batch of the rows ``rows`` of ``step``'s batch alone, their
        advantages computed on them alone. Needed by hosts that hard-drop rows (``HostCapabilities.hard_drop``)."""
        raise NotImplementedError(
            f"{type(self).__name__}.loss_alone(step, rows) must build the framework's batch of the given rows of the "
            "step's batch (HostStep.batch) alone, advantages computed on them, and return the framework's loss on it"
        )

    def rounds(self, block: Mapping[str, Any], steps: int) -> list[RoundsStep]:
        """``steps`` steps of the framework's generation rounds with ``block`` (its generation-rounds seam): each
        generates a batch of prompts, further ones while too few groups are admitted, and trains the chosen groups.

        The prompts come from a dataset with a unique int ``index`` column over at least 16 prompts, and the
        rewards are the kit's: every rollout of an even prompt gets the same reward, those of an odd prompt
        rewards that vary within its group (so a filter on the reward variance admits the odd prompts only).
        Seed it: the same call generates the same prompts. What a step raises propagates. Needed by hosts that
        provide the generation-rounds seam.
        """
        raise NotImplementedError(
            f"{type(self).__name__}.rounds(block, steps) must run `steps` steps of the framework's generation "
            "rounds with the dataflex block (even prompts: one reward per group; odd: varied) and return a "
            "RoundsStep per step"
        )

    def counts(self, block: Mapping[str, Any], steps: int) -> list[CountsStep]:
        """``steps`` batches of prompts dispatched by the framework with ``block`` (its per-prompt counts seam):
        the counts the host asked for and the rollouts the framework's own generation started for each.

        The prompts come from a dataset with a unique int ``index`` column, more than ``steps`` batches of them;
        the budget is left to the framework's uniform count. Where the rollouts themselves need the framework's
        model servers (GPUs), stand in for the model's sessions only: the framework's own code reads the counts
        and starts the rollouts. Needed by hosts that provide the per-prompt counts seam.
        """
        raise NotImplementedError(
            f"{type(self).__name__}.counts(block, steps) must dispatch `steps` batches of prompts through the "
            "framework with the dataflex block and return a CountsStep per batch: the counts asked, the rollouts begun"
        )

    def step(self, block: Mapping[str, Any] | None) -> HostStep:
        """One step of the framework with the ``dataflex:`` ``block`` (``None``: the framework without DataFlex).

        Run the framework's real step up to its loss on the batch and return a :class:`HostStep`; what the
        step raises propagates.
        """
        raise NotImplementedError(
            f"{type(self).__name__}.step(block) must run one real step of the framework on the harness's batch "
            "(with padding rows or empty responses) and return a HostStep: the framework's loss, its loss mask, the "
            "inert rows, the loss unit and the weights the host applied"
        )

    def staged_steps(
        self, block: Mapping[str, Any], steps: int, *, save_at: int | None = None
    ) -> tuple[list[StagedStep], Path | None]:
        """A run of ``steps`` steps with ``block`` (a staged-generation mechanism), each generated in stages through
        the framework's own generation; with ``save_at``, checkpointed after that step through the framework's own
        save. The run's seed and data are the same on every call, and hold prompts whose pilot rewards spread, some
        solved on every rollout (reward >= 1) and more than a step trains (the carry and eviction tests meet them);
        give each row's ``reward``. Needed by hosts that provide the staged-generation seam.

        :returns: each step as a :class:`StagedStep`, and the checkpoint folder (``None`` without ``save_at``).
        """
        raise NotImplementedError(
            f"{type(self).__name__}.staged_steps(block, steps, save_at=None) must train `steps` steps of a run with "
            "the dataflex block, generating each step's stages through the framework, and return a StagedStep per "
            "step (the requests, the rows generated and kept per stage, the trained rows) and the checkpoint folder"
        )

    def staged_resume(self, block: Mapping[str, Any], folder: Path, steps: int) -> list[StagedStep]:
        """A new run with ``block`` resumed from ``folder`` through the framework's own resume, trained until step
        ``steps``: the :class:`StagedStep` of each step after the checkpoint."""
        raise NotImplementedError(
            f"{type(self).__name__}.staged_resume(block, folder, steps) must resume a run with the dataflex block "
            "from the checkpoint folder through the framework's resume and return a StagedStep per step it trains"
        )

    def save(self, block: Mapping[str, Any]) -> tuple[Path, DataFlexSession]:
        """Train a run with ``block`` for at least one step and checkpoint it through the framework's own save.

        :returns: the checkpoint folder holding DataFlex's files, and the run's session.
        """
        raise NotImplementedError(
            f"{type(self).__name__}.save(block) must train a real run with the dataflex block for a step or more, "
            "write a checkpoint through the framework's own checkpointing and return (the checkpoint folder, the "
            "run's DataFlexSession)"
        )

    def resume(self, block: Mapping[str, Any], folder: Path) -> DataFlexSession:
        """Start a new run with ``block`` resuming from ``folder`` through the framework's own resume.

        The run stops where the saved one did (no step after the resume), so its components hold what was saved.

        :returns: the run's session once the framework and DataFlex restored their state; what the resume
            raises propagates.
        """
        raise NotImplementedError(
            f"{type(self).__name__}.resume(block, folder) must start a new run with the dataflex block, resume it "
            "from the checkpoint folder through the framework's own resume path and return its DataFlexSession"
        )
