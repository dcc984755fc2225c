"""The interface every mechanism implements, and the parts the mechanisms that weigh the loss share.

A mechanism is one module: a :class:`Mechanism` subclass declares its name, actuator kind, keys, seams,
timings, fields, what it does each step and, when it draws prompts, its sampler and state. The step around it
(:class:`~dataflex_core.step.StepContext`) does what every mechanism needs, so a new mechanism is one class.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import torch

from ..config import DataFlexPipeline
from ..contracts import check_selection, check_weights, expected_shape, valid_for
from ..errors import IncompatibleComponentError
from ..precomputed import inputs_of
from ..step.calls import component_label
from ..step.context import StepContext
from ..step.fields import is_canonical
from ..step.host import HostCapabilities
from ..step.metrics import weight_metrics
from ..step.outputs import checked_scores
from ..step.result import StepResult
from ..step.seams import LossWeights, S, Seam, TrainSampler
from ..step.weights import finalize

#: The timings of scorers that run on a step's rollouts, once the rewards (and advantages) exist.
ROLLOUT_TIMINGS = ("post_reward", "post_advantage")


class Mechanism:
    """One way DataFlex acts on training; subclass, set the class attributes, register with ``register_mechanism``.

    An instance holds the mechanism's parsed block keys (``settings``) and the decisions taken at mount.
    """

    #: The ``dataflex.mechanism`` value.
    name: ClassVar[str] = ""
    #: The component kind its ``dataflex.actuator`` must be (``reweighter``, ``selector``, ``mixer``, ``sampler``).
    actuator_kind: ClassVar[str] = ""
    #: Keys of the ``dataflex:`` block only this mechanism reads: name -> :class:`~dataflex_core.keys.Key` (or, for
    #: a mechanism that checks them itself, name -> default).
    keys: ClassVar[Mapping[str, Any]] = {}
    #: The scorer timings it runs.
    timings: ClassVar[tuple[str, ...]] = ROLLOUT_TIMINGS
    #: The host seams it needs (:mod:`dataflex_core.step.seams`); mount refuses a host that lacks one, with the
    #: host's reason, and :meth:`implement` gives the session each one's implementation for the host.
    seams: ClassVar[tuple[type[Seam], ...]] = ()
    #: True when :meth:`run` runs before ``warmup_step`` too (it records what it needs while its components wait).
    runs_in_warmup: ClassVar[bool] = False
    #: A host with several processes runs the step on each of them with the same gathered batch (True: each
    #: keeps a replica of the mechanism's state) or on the main process only, then hands the others
    #: :meth:`shared_state` (False).
    runs_on_every_process: ClassVar[bool] = False
    #: What ``on_invalid: uniform`` does instead of the invalid output, for the log line.
    fallback: ClassVar[str] = "using uniform weights"

    def __init__(self, block: Mapping[str, Any]) -> None:
        #: The parsed :attr:`keys` (``None`` for a mechanism without keys).
        self.settings: Any = self.parse(block)

    def parse(self, block: Mapping[str, Any]) -> Any:
        """This mechanism's :attr:`keys` of the ``dataflex:`` block (a plain mapping), checked."""
        return None

    @classmethod
    def check(cls, pipeline: DataFlexPipeline, host: HostCapabilities, loss_unit: str | None) -> None:
        """Raise one clear error if ``pipeline`` cannot run on ``host``; the scorer's timing is checked already."""

    def mount(self, pipeline: DataFlexPipeline, host: HostCapabilities, *, grouped: bool | None) -> None:
        """Decisions taken once the pipeline and the host are known (``grouped``: the estimator uses ``uid``)."""

    def fields(self, pipeline: DataFlexPipeline) -> list[str]:
        """The fields the step reads each time (``response_mask`` first)."""
        return list(pipeline.requires)

    # -- the host seams ------------------------------------------------------------------------------
    def implement(self, seam: type[S], step: StepContext) -> S:
        """Its implementation of ``seam`` (one of :attr:`seams`) on the running ``step``, for the host; the default
        covers the seams without methods (:class:`LossWeights`, :class:`TrainSampler`)."""
        if seam in (LossWeights, TrainSampler):
            return seam()  # type: ignore[return-value]
        raise NotImplementedError(
            f"mechanism {self.name!r} ({type(self).__qualname__}) declares the seam {seam.name!r} but does not "
            "implement it (implement())"
        )

    def refusal(self, seam: type[Seam], host: HostCapabilities, reason: str) -> str:
        """The mount error when ``host`` lacks ``seam``, with the host's ``reason`` (a mechanism words its own)."""
        why = reason or f"it does not declare the {seam.name} seam (HostCapabilities.seams)"
        return f"mechanism {self.name!r} needs the host to {seam.does}, but {host.name} cannot: {why}"

    def nested(self) -> dict[str, Mapping[str, Any]]:
        """The ``dataflex:`` blocks of the mechanisms this one drives, by role (``filter.draw``); the runner mounts
        each against the same host and hands it back through :meth:`adopt`."""
        return {}

    def adopt(self, role: str, mechanism: Mechanism, step: StepContext) -> None:
        """Take the mounted mechanism of :meth:`nested`'s ``role``, with the step it runs in."""

    def describe_nested(self, role: str, text: str) -> str:
        """How :meth:`~dataflex_core.runner.DataFlexStep.describe` names the nested mechanism of ``role``."""
        return f"{role}: {text}"

    def state_labels(self) -> dict[str, str]:
        """How state errors name what :meth:`stateful` returns besides the components, by role (``name (dist==v)``)."""
        return {}

    def run(self, step: StepContext, batch: Any, step_id: int, importance_weights: torch.Tensor | None) -> StepResult:
        """Act on one step's batch (every row, framework padding tagged ``is_padding``; ``prepare_batch`` done).

        :param importance_weights: ``(bs, L)`` weights the framework already applies, if any.
        :raises InvalidOutputError: invalid component output (the step applies ``on_invalid``).
        """
        raise NotImplementedError(f"mechanism {self.name!r} ({type(self).__qualname__}) must implement run()")

    def skip(self, step: StepContext, batch: Any, step_id: int) -> dict[str, float]:
        """A step with no valid token, which the step leaves to the framework: what the mechanism notes of it
        without calling a component (a history's step count), and its metrics. The default notes nothing."""
        return {}

    # -- the train sampler (mechanisms that draw the prompts) ---------------------------------------
    def dataset_columns(self, pipeline: DataFlexPipeline) -> list[str]:
        """The train dataset's columns its train sampler reads (a host that knows them checks at mount)."""
        return []

    def train_sampler(self, step: StepContext, dataset: Any, batch_size: int, seed: int) -> Any:
        """The dataloader sampler that draws the prompts (``None``: the host keeps its own).

        :param dataset: the train dataset's columns (:class:`~dataflex_core.session.TrainDataset`).
        :param batch_size: prompts per batch; :param seed: the run's data seed.
        """
        return None

    def stateful(self, sampler: Any) -> dict[str, Any]:
        """State besides the scorer's and the actuator's that travels with a checkpoint, by role."""
        return {}

    def ledger(self, sampler: Any) -> Any:
        """The per-prompt ledger (:class:`~dataflex_core.ledger.PromptLedger`) it feeds, exported beside each
        checkpoint's state; ``None`` for a mechanism without one."""
        return None

    def restored(self, sampler: Any, host: HostCapabilities) -> None:
        """After the components' state came back from a checkpoint (``host.checkpoints_sampler`` says whether
        the framework restored the train sampler too)."""

    def shared_state(self, sampler: Any) -> Any:
        """What the main process hands the others after the step (:attr:`runs_on_every_process` False)."""
        return None

    def load_shared_state(self, sampler: Any, state: Any) -> None:
        """Take what :meth:`shared_state` gave on the main process."""


# -- checks shared by the mechanisms that run on a step's rollouts ---------------------------------------


def check_rollout_time(pipeline: DataFlexPipeline, host: HostCapabilities, mechanism: str) -> None:
    """A scorer of the step's rollouts on ``host``: its timing runs there, its groups are whole, its fields exist."""
    timing = pipeline.scorer.timing
    if timing not in host.timings:
        raise IncompatibleComponentError(
            f"scorer {pipeline.scorer_spec.label} has timing={timing!r}, but {host.name} runs scorers once the "
            f"rewards and advantages exist ({', '.join(t for t in host.timings if t in ROLLOUT_TIMINGS)}); a "
            f"{timing} scorer cannot run in mechanism {mechanism!r}. Pick a scorer with one of those timings"
        )
    if pipeline.needs_groups and not host.complete_groups:
        owner = pipeline.scorer_spec if pipeline.scorer.needs_groups else pipeline.actuator_spec
        raise IncompatibleComponentError(
            f"{owner.kind} {owner.label} needs whole GRPO groups (needs_groups=True), but {host.name} hands "
            "components partial groups in this configuration"
        )
    check_fields(pipeline, host)


def check_fields(pipeline: DataFlexPipeline, host: HostCapabilities) -> None:
    """Every field the configured scorer and actuator read must be one this run provides."""
    owners = [(pipeline.scorer_spec, pipeline.scorer), (pipeline.actuator_spec, pipeline.actuator)]
    for spec, component in owners:
        for name in component.requires:  # the configured instance: a param may change what it reads
            support = host.fields.get(name)
            if support is not None:
                if not support.provided:
                    raise IncompatibleComponentError(
                        f"{spec.kind} {spec.label} requires the field {name!r}, which this {host.name} "
                        f"configuration does not provide: {support.fix}"
                    )
            elif is_canonical(name):
                raise IncompatibleComponentError(
                    f"{spec.kind} {spec.label} requires the field {name!r}, which {host.name} never provides; "
                    f"it provides {', '.join(sorted(n for n, s in host.fields.items() if s.provided))}"
                )
            elif not host.dataset_columns:
                raise IncompatibleComponentError(
                    f"{spec.kind} {spec.label} requires {name!r}, which is not a canonical field, and {host.name} "
                    "passes no dataset columns to components"
                )


# -- mechanisms that weigh the loss ---------------------------------------------------------------------


class LossMechanism(Mechanism):
    """A mechanism whose result is weights the framework's loss multiplies in, mean one in the loss's unit.

    A subclass says how the raw weights come about (:meth:`weights`); the rest (padding rows at weight 0, normalisation
    in the loss unit, composition with the framework's importance weights, the ``dataflex/weight/*`` metrics) is shared.
    """

    seams: ClassVar[tuple[type[Seam], ...]] = (LossWeights,)

    def weights(self, step: StepContext, batch: Any, step_id: int) -> torch.Tensor:
        """Raw non-negative weights ``(bs,)`` or ``(bs, L)`` for ``batch``, its padding rows shown as empty rows
        (:meth:`~dataflex_core.step.StepContext.on_real_rows`); what they get there is not used."""
        raise NotImplementedError(f"mechanism {self.name!r} ({type(self).__qualname__}) must implement weights()")

    def run(self, step: StepContext, batch: Any, step_id: int, importance_weights: torch.Tensor | None) -> StepResult:
        raw = step.on_real_rows(batch, inputs_of(batch), lambda rows: self.weights(step, rows, step_id))
        return self.applied(step, batch, raw, step_id, importance_weights)

    def applied(
        self, step: StepContext, batch: Any, raw: torch.Tensor, step_id: int, importance_weights: torch.Tensor | None
    ) -> StepResult:
        """The loss weights of ``raw``: normalised in the loss unit, composed with ``importance_weights``."""
        inputs = inputs_of(batch)  # the step prepared them: the valid tokens and their counts, once per step
        valid_tokens, counts, unit = inputs.valid_tokens, inputs.token_counts, step.loss_unit
        owner = component_label(step.pipeline, "actuator")
        applied, factor = finalize(
            raw, valid_tokens, unit, importance_weights, token_counts=counts, owner=owner, step=step_id
        )
        metrics = weight_metrics(
            factor, valid_tokens, unit, token_counts=counts, applied=applied, importance_weights=importance_weights
        )
        return StepResult(metrics, applied=applied, factor=factor)


def scored_weights(step: StepContext, batch: Any, step_id: int) -> torch.Tensor:
    """``scorer.score`` then ``reweighter.act`` on ``batch``: the checked weights at the scorer's granularity."""
    granularity = step.pipeline.scorer.granularity
    valid = valid_for(expected_shape(granularity, batch), batch)
    scores = checked_scores(step.calls, batch, step_id, step.ctx, valid=valid)
    weights = step.calls.call("actuator", "act", scores, batch, at_step=step_id, step_id=step_id, **step.ctx)
    owner = component_label(step.pipeline, "actuator")
    return check_weights(weights, batch, granularity=granularity, owner=owner, step=step_id, valid=valid)


def selected_rows(step: StepContext, batch: Any, step_id: int) -> torch.Tensor:
    """``scorer.score`` then ``selector.act`` on ``batch``: the kept rows, checked by the selection contract."""
    scores = checked_scores(step.calls, batch, step_id, step.ctx)
    output = step.calls.call("actuator", "act", scores, batch, at_step=step_id, step_id=step_id, **step.ctx)
    return check_selection(output, batch, owner=component_label(step.pipeline, "actuator"), step=step_id)
