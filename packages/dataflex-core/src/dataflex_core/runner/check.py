"""Whether a built pipeline can run on a host as configured: one clear error on the first problem.

The checks every mechanism shares (loss unit, scorer timing), then the mechanism's own
(:meth:`~dataflex_core.mechanisms.Mechanism.check`), against the host's declaration.
"""

from __future__ import annotations

from ..config import DataFlexPipeline
from ..errors import ConfigError, IncompatibleComponentError
from ..mechanisms.base import Mechanism
from ..mechanisms.registry import get_mechanism, mechanisms
from ..step.host import HostCapabilities
from ..step.seams import LossWeights

#: What a scorer of each timing needs, for the message that refuses it in a mechanism that does not run it.
TIMING_NEEDS = {
    "pre_rollout": "it scores candidate prompts before any rollout",
    "post_reward": "it needs the step's rollouts and their rewards",
    "post_advantage": "it needs the step's rollouts and their advantages",
    "in_loss": "it runs inside the framework's loss",
}


def check_pipeline(
    pipeline: DataFlexPipeline,
    host: HostCapabilities,
    *,
    loss_unit: str | None = None,
    mechanism: Mechanism | type[Mechanism] | None = None,
) -> None:
    """Raise one clear error if ``pipeline`` cannot run on ``host`` as configured.

    The checks every mechanism shares (the loss unit of one that weighs the loss, the scorer's timing, a host
    seam it needs and the host lacks: :meth:`~dataflex_core.mechanisms.Mechanism.refusal` words it), then the
    mechanism's own (:meth:`~dataflex_core.mechanisms.Mechanism.check`).

    :param loss_unit: the unit of this run's loss, when the mechanism writes weights.
    :param mechanism: the mounted mechanism (default: the class ``pipeline.mechanism`` names).
    :raises ConfigError: an unsupported mechanism or loss unit.
    :raises IncompatibleComponentError: a capability or field the pipeline needs and this run lacks.
    """
    if mechanism is None:
        mechanism = get_mechanism(pipeline.mechanism)
    if LossWeights in mechanism.seams and loss_unit is not None and loss_unit not in host.loss_units:
        raise ConfigError(f"{host.name} has no loss unit {loss_unit!r}; its units: {', '.join(host.loss_units)}")
    timing = pipeline.scorer.timing
    if timing not in mechanism.timings:
        takers = [m.name for m in mechanisms() if timing in m.timings]
        where = f"only mechanism {' or '.join(map(repr, takers))} runs it" if takers else "no mechanism runs it"
        fix = f"Set mechanism: {takers[0]}, or pick" if takers else "Pick"
        raise IncompatibleComponentError(
            f"scorer {pipeline.scorer_spec.label} has timing={timing!r} ({TIMING_NEEDS.get(timing, timing)}), so it "
            f"cannot run in mechanism {pipeline.mechanism!r}, which takes scorers with timing "
            f"{' or '.join(mechanism.timings)}; {where}. {fix} a scorer with one of those timings"
        )
    for seam in mechanism.seams:
        support = host.support(seam)
        if not support.provided:
            if isinstance(mechanism, type):
                raise IncompatibleComponentError(
                    f"mechanism {mechanism.name!r} needs the host to {seam.does}, but {host.name} cannot: "
                    f"{support.reason or f'it does not declare the {seam.name} seam'}"
                )
            raise IncompatibleComponentError(mechanism.refusal(seam, host, support.reason))
    mechanism.check(pipeline, host, loss_unit)
