"""The host-agnostic step: real rows in, checked and normalised weights (or a kept mask) and metrics out.

Every host runs the same step once per training step, on the whole step's
batch in the canonical vocabulary (:mod:`dataflex_core.step.fields`):

1. prepare the batch's shared values once (:func:`~dataflex_core.prepare_batch`:
   valid masks, token counts, the ``uid`` group index) and drop the rows the
   framework added as padding (``is_padding``), so components see only real
   rows;
2. run the mechanism (scorer -> reweighter / selector, :mod:`.runners`) and
   check its output (:mod:`.outputs`, :mod:`.selection`);
3. normalise in the loss's unit and compose with any importance weights the
   framework already applies (:mod:`.weights`);
4. emit the ``dataflex/*`` metrics (:mod:`.metrics`).

Invalid plugin output raises, or with ``on_invalid: uniform`` leaves the
step's loss as the framework would compute it (a counted fallback). The host
does the rest: reading its framework's fields, writing the weights where its
loss multiplies them in (verl: ``rollout_is_weights``; TRL: the advantages).
``mechanism: mix`` acts on the host's sampler through :meth:`DataFlexStep.mix`;
``mechanism: curriculum`` draws prompts in the host's sampler
(:class:`~dataflex_core.step.prompt_sampler.CurriculumSampler`) and feeds its
history through :meth:`DataFlexStep.curriculum`.

Components get ``ctx`` keyword arguments: ``loss_unit`` in every host plus the
host's own (verl: ``loss_agg_mode``, ``adv_estimator``; TRL: ``loss_type``,
``adv_estimator``), and actuators also ``step_id``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from ..batch import Batch
from ..config import DataFlexPipeline, build_from_config, dataflex_block
from ..errors import ConfigError, InvalidOutputError
from ..inputs import nonfinite_mask
from ..normalize import valid_token_mask
from ..precomputed import prepare_batch
from . import curriculum as curriculum_mechanism
from . import mix as mix_mechanism
from .host import HostCapabilities, check_pipeline
from .metrics import PREFIX, weight_metrics
from .runners import RUNNERS
from .selection import selection_metrics
from .weights import finalize

logger = logging.getLogger("dataflex_core.step")

#: Keys of the ``dataflex:`` block every host reads besides the core's, with their defaults
#: (``plugins`` holds ``lock`` / ``allow_drift``, read by the host's plugin pinning).
HOST_KEYS = {"on_invalid": "raise", "plugins": None}
ON_INVALID = ("raise", "uniform")


@dataclass
class MountedStep:
    """A pipeline validated against a host's capabilities, with what the step needs each time."""

    pipeline: DataFlexPipeline
    host: HostCapabilities
    on_invalid: str
    #: ``token`` or ``sequence``: the unit the weights have mean one in.
    loss_unit: str
    #: Fields the step reads each time: ``response_mask`` first, the components' fields, ``uid`` when groups
    #: are needed (and for select's group metrics), the domain column for mix.
    fields: list[str] = field(default_factory=list)
    #: Keyword context every component call gets (besides ``step_id`` for actuators).
    ctx: dict[str, Any] = field(default_factory=dict)
    #: ``mechanism: mix`` settings; ``None`` for the other mechanisms.
    mix: mix_mechanism.MixSettings | None = None
    #: ``mechanism: curriculum`` settings; ``None`` for the other mechanisms.
    curriculum: curriculum_mechanism.CurriculumSettings | None = None

    @property
    def mechanism(self) -> str:
        return self.pipeline.mechanism

    @property
    def hard_drop(self) -> bool:
        """Select whose selector asks for advantages on its kept rows, on a host that can drop rows."""
        return self.mechanism == "select" and self.host.hard_drop and bool(self.pipeline.actuator.recompute_advantage)

    def describe(self) -> str:
        p = self.pipeline
        return (
            f"{p.mechanism}: scorer {p.scorer_spec.label} -> {p.actuator_spec.kind} {p.actuator_spec.label}; "
            f"mean one per {self.loss_unit}, warmup_step={p.warmup_step}, on_invalid={self.on_invalid}, "
            f"reads {self.fields}"
        )


def host_settings(block: Any) -> dict[str, Any]:
    """The :data:`HOST_KEYS` of a ``dataflex:`` block, checked."""
    plain = dataflex_block(block)
    settings = {key: plain.get(key, default) for key, default in HOST_KEYS.items()}
    if settings["on_invalid"] not in ON_INVALID:
        raise ConfigError(
            f"dataflex.on_invalid={settings['on_invalid']!r} is not one of {', '.join(ON_INVALID)}; "
            "raise (default) stops the run on invalid plugin output, uniform uses weights 1 for that step"
        )
    return settings


def step_fields(
    pipeline: DataFlexPipeline,
    mix: mix_mechanism.MixSettings | None,
    curriculum: curriculum_mechanism.CurriculumSettings | None = None,
) -> list[str]:
    """Fields the step reads: the components' fields plus what the mechanism needs.

    ``select`` reads ``uid`` for its group metrics; ``mix`` reads the domain column; ``curriculum`` reads the
    rewards and the prompt id of each row (its components read candidate prompts, in the host's sampler).
    """
    if curriculum is not None:
        return ["response_mask", curriculum_mechanism.REWARD_FIELD, curriculum.prompt_key]
    fields = list(pipeline.requires)
    if pipeline.mechanism == "select":
        fields.append("uid")
    if mix is not None:
        fields.append(mix.domain_key)
    return list(dict.fromkeys(fields))


def mount_step(
    block: Any,
    host: HostCapabilities,
    *,
    loss_unit: str,
    ctx: Mapping[str, Any] | None = None,
    adv_estimator: str | None = None,
    is_group_estimator: Any = None,
    extra_keys: Iterable[str] = (),
) -> MountedStep:
    """Build the ``dataflex:`` block and check it against ``host``; one clear error on the first problem.

    :param loss_unit: the unit of this run's loss (``token`` or ``sequence``).
    :param ctx: the host's own context for components (``loss_unit`` is added).
    :param adv_estimator: the host's advantage estimator, for the ``needs_groups`` check.
    :param is_group_estimator: the host's answer to "does this estimator use ``uid`` groups?".
    :param extra_keys: further block keys the host reads itself.
    """
    settings = host_settings(block)
    pipeline = build_from_config(
        block,
        adv_estimator=adv_estimator,
        is_group_estimator=is_group_estimator,
        extra_keys=(*HOST_KEYS, *mix_mechanism.MIX_KEYS, *curriculum_mechanism.CURRICULUM_KEYS, *extra_keys),
    )
    mix = mix_mechanism.mix_settings(block) if pipeline.mechanism == "mix" else None
    curriculum = curriculum_mechanism.curriculum_settings(block) if pipeline.mechanism == "curriculum" else None
    for name, keys, chosen in (
        ("mix", mix_mechanism.MIX_KEYS, mix),
        ("curriculum", curriculum_mechanism.CURRICULUM_KEYS, curriculum),
    ):
        stray = sorted(k for k in keys if k in pipeline.extra) if chosen is None else []
        if stray:
            raise ConfigError(
                f"dataflex.{stray[0]} is read only by mechanism: {name}, but dataflex.mechanism="
                f"{pipeline.mechanism!r}; remove {stray} or set mechanism: {name}"
            )
    check_pipeline(pipeline, host, loss_unit=loss_unit)
    return MountedStep(
        pipeline=pipeline,
        host=host,
        on_invalid=settings["on_invalid"],
        loss_unit=loss_unit,
        fields=step_fields(pipeline, mix, curriculum),
        ctx={**(ctx or {}), "loss_unit": loss_unit},
        mix=mix,
        curriculum=curriculum,
    )


@dataclass
class StepResult:
    """What one step gives the host.

    ``applied`` is what the framework's loss must multiply in: ``(bs,)`` (one weight for each of a row's
    valid tokens) or ``(bs, L)``, float32, 0 on invalid tokens; with importance weights it already
    contains them. ``factor`` is the DataFlex part alone. Both are ``None`` when the step leaves the
    loss as it is (inactive before ``warmup_step``, a uniform fallback, mix).
    """

    metrics: dict[str, float]
    applied: torch.Tensor | None = None
    factor: torch.Tensor | None = None
    #: select: bool ``(bs,)`` of kept rows over every row of the batch (padding never kept).
    kept: torch.Tensor | None = None
    #: True when ``on_invalid: uniform`` replaced invalid output by the framework's own loss.
    fallback: bool = False


class DataFlexStep:
    """Runs a :class:`MountedStep` once per training step; counts uniform fallbacks across steps."""

    def __init__(self, mounted: MountedStep) -> None:
        self.mounted = mounted
        self.uniform_fallbacks = 0

    @property
    def pipeline(self) -> DataFlexPipeline:
        return self.mounted.pipeline

    def active(self, step: int) -> bool:
        return self.pipeline.active(step)

    def components_batch(self, batch: Batch) -> tuple[Batch, torch.Tensor | None]:
        """``batch`` without framework padding rows, and the kept-row mask (``None`` when nothing was removed)."""
        padding = batch.batch.get("is_padding")
        if padding is None or not bool(padding.any()):
            return _without_padding_field(batch), None
        real = ~padding.bool()
        return _without_padding_field(batch.select_rows(real)), real

    def run(
        self,
        batch: Batch,
        step: int,
        *,
        importance_weights: torch.Tensor | None = None,
        start: float | None = None,
    ) -> StepResult:
        """Weights (or a kept mask) for ``batch``, normalised in the mounted loss unit.

        :param batch: the step's fields (:attr:`MountedStep.fields`) plus ``response_mask`` and optionally a
            bool ``is_padding`` ``(bs,)``; components see only the non-padding rows.
        :param importance_weights: ``(bs, L)`` weights the framework already applies; the result composes
            with them (:func:`~dataflex_core.step.weights.finalize`).
        :param start: ``time.perf_counter()`` when the host's hook began, so ``dataflex/hook_time_s`` counts
            the host's own I/O too.
        :raises InvalidOutputError: invalid plugin output, with ``on_invalid: raise``.
        """
        start = time.perf_counter() if start is None else start
        if not self.active(step):
            return StepResult({f"{PREFIX}active": 0.0})
        prepare_batch(batch)  # masks, token counts and uid groups: computed once for the whole step
        valid_tokens = valid_token_mask(batch)
        try:
            raw = self.raw_weights(batch, step)
            applied, factor = self._finalize(raw, valid_tokens, importance_weights, step)
        except InvalidOutputError as exc:
            if self.mounted.on_invalid == "raise":
                raise
            self.uniform_fallbacks += 1
            logger.warning("dataflex: %s; using uniform weights for step %d (dataflex.on_invalid=uniform)", exc, step)
            return StepResult(self._metrics(None, None, valid_tokens, None, start, fallback=True), fallback=True)
        metrics = {}
        kept = None
        if self.mounted.mechanism == "select":
            kept = raw > 0
            metrics.update(selection_metrics(kept, batch))
        metrics.update(self._metrics(factor, applied, valid_tokens, importance_weights, start, fallback=False))
        return StepResult(metrics, applied=applied, factor=factor, kept=kept)

    def mix(
        self, batch: Batch, step: int, sampler: mix_mechanism.ProportionSink, *, start: float | None = None
    ) -> dict:
        """``mechanism: mix``: feed the step's per-domain signal to the mixer; ``sampler`` gets new proportions.

        :returns: the step's ``dataflex/`` metrics (``dataflex/mix/...``, ``dataflex/active``, ...).
        """
        start = time.perf_counter() if start is None else start
        if not self.active(step):
            return {f"{PREFIX}active": 0.0}
        prepare_batch(batch)
        sub, _ = self.components_batch(batch)
        try:
            metrics = mix_mechanism.mix_step(self.pipeline, self.mounted.mix, sub, step, self.mounted.ctx, sampler)
        except InvalidOutputError as exc:
            if self.mounted.on_invalid == "raise":
                raise
            self.uniform_fallbacks += 1
            logger.warning(
                "dataflex: %s; keeping the current mixture for step %d (dataflex.on_invalid=uniform)", exc, step
            )
            return {f"{PREFIX}active": 1.0, f"{PREFIX}uniform_fallback": 1.0}
        metrics[f"{PREFIX}active"] = 1.0
        metrics[f"{PREFIX}hook_time_s"] = time.perf_counter() - start
        return metrics

    def curriculum(self, batch: Batch, step: int, sampler: Any, *, start: float | None = None) -> dict:
        """``mechanism: curriculum``: feed the step's rewards to ``sampler.history`` and the scorer's ``observe``.

        :param sampler: the host's :class:`~dataflex_core.step.prompt_sampler.CurriculumSampler` (its
            ``history``, and the metrics of the draw that chose this step's prompts).
        :returns: the step's ``dataflex/`` metrics (``dataflex/curriculum/...``, ``dataflex/active``, ...).

        The history is fed at every step, warm-up included, so the curriculum starts from everything seen.
        """
        start = time.perf_counter() if start is None else start
        prepare_batch(batch)
        sub, _ = self.components_batch(batch)
        metrics = curriculum_mechanism.curriculum_step(
            self.pipeline, self.mounted.curriculum, sub, step, self.mounted.ctx, sampler.history
        )
        metrics.update(sampler.draw_metrics)
        metrics[f"{PREFIX}active"] = 1.0 if self.active(step) else 0.0
        metrics[f"{PREFIX}uniform_fallback_total"] = float(self.uniform_fallbacks)
        metrics[f"{PREFIX}hook_time_s"] = time.perf_counter() - start
        return metrics

    # -- the parts ---------------------------------------------------------------------
    def raw_weights(self, batch: Batch, step: int) -> torch.Tensor:
        """The mechanism on the real rows; its checked raw weights scattered back to every row (0 on padding)."""
        runner = RUNNERS[self.mounted.mechanism]
        sub, real = self.components_batch(batch)
        weights = runner(self.pipeline, sub, step, self.mounted.ctx)
        if real is None:
            return weights
        full = torch.zeros((len(batch), *weights.shape[1:]), dtype=torch.float32, device=weights.device)
        full[real.to(weights.device)] = weights.to(torch.float32)
        return full

    def _finalize(
        self, raw: torch.Tensor, valid_tokens: torch.Tensor, importance_weights: torch.Tensor | None, step: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        spec = self.pipeline.actuator_spec
        try:
            applied, factor = finalize(raw, valid_tokens, self.mounted.loss_unit, importance_weights)
        except InvalidOutputError as exc:
            raise InvalidOutputError(
                f"{spec.kind} {spec.label} returned invalid weights at step {step}: {exc}"
            ) from exc
        if nonfinite_mask(applied, torch.ones((), dtype=torch.bool, device=applied.device)) is not None:
            raise InvalidOutputError(
                f"{spec.kind} {spec.label} at step {step}: the normalised weights are not finite "
                "(weights too extreme to scale to mean one)"
            )
        return applied, factor

    def _metrics(
        self,
        factor: torch.Tensor | None,
        applied: torch.Tensor | None,
        valid_tokens: torch.Tensor,
        importance_weights: torch.Tensor | None,
        start: float,
        *,
        fallback: bool,
    ) -> dict[str, float]:
        out = {}
        if factor is not None:
            out = weight_metrics(
                factor, valid_tokens, self.mounted.loss_unit, applied=applied, importance_weights=importance_weights
            )
        out[f"{PREFIX}active"] = 1.0
        out[f"{PREFIX}uniform_fallback"] = 1.0 if fallback else 0.0
        out[f"{PREFIX}uniform_fallback_total"] = float(self.uniform_fallbacks)
        out[f"{PREFIX}hook_time_s"] = time.perf_counter() - start
        return out


def _without_padding_field(batch: Batch) -> Batch:
    if "is_padding" not in batch.batch:
        return batch
    return Batch({k: v for k, v in batch.batch.items() if k != "is_padding"}, batch.non_tensor_batch, batch.meta_info)
