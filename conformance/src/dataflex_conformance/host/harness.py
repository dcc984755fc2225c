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


@dataclass
class StagedRows:
    """Rows of a staged step: each row's group, its dataset row and its response tokens (the row's identity)."""

    #: ``(rows,)`` int64: the row's group (a stage's ``uid``; in the trained batch any label, one per group).
    group: torch.Tensor
    #: ``(rows,)`` int64: the dataset row of the row's prompt.
    prompt: torch.Tensor
    #: ``(rows, L)``: the row's response tokens, as generated.
    response: torch.Tensor


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

    def draws(self, block: Mapping[str, Any], steps: int) -> list[torch.Tensor]:
        """The prompts the framework's own dataloader draws for ``steps`` steps with ``block`` (its train sampler
        seam), as int64 tensors of their ids: the train dataset's ``index`` column, unique per prompt, over at least
        16 prompts, half of them even. Needed by hosts that provide the train-sampler seam."""
        raise NotImplementedError(
            f"{type(self).__name__}.draws(block, steps) must build the framework's train dataloader with the dataflex "
            "block over a dataset with a unique int 'index' column and return the ids each of `steps` batches drew"
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
        save. The run's seed and data are the same on every call. Needed by hosts that provide the
        staged-generation seam.

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


