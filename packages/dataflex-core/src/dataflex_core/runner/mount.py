"""Mount a read ``dataflex:`` block against a host: resolve its mechanism once, build its pipeline, check it.

Everything a user can get wrong in the block (a key nothing reads, the pipeline, what this host can run) is
found here, before the first rollout, with one clear error on the first problem.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ..block import HOST_KEYS, DataFlexBlock, check_block_keys
from ..config import DataFlexPipeline, build_pipeline
from ..errors import ConfigError
from ..mechanisms.base import Mechanism
from ..mechanisms.registry import get_mechanism, mechanisms
from ..step.host import HostCapabilities
from .check import check_pipeline


def mechanism_keys() -> dict[str, tuple[str, ...]]:
    """Every block key a registered mechanism reads -> the mechanisms that read it."""
    owners: dict[str, tuple[str, ...]] = {}
    for cls in mechanisms():
        for key in cls.keys:
            owners[key] = (*owners.get(key, ()), cls.name)
    return owners


def mount_mechanism(
    block: DataFlexBlock,
    host: HostCapabilities,
    *,
    loss_unit: str,
    adv_estimator: str | None = None,
    is_group_estimator: Any = None,
    extra_keys: Iterable[str] = (),
) -> tuple[DataFlexPipeline, Mechanism, HostCapabilities]:
    """The block's pipeline and mounted mechanism, and the host as that mechanism has it; one clear error on the
    first problem.

    :param loss_unit: the unit of this run's loss (``token`` or ``sequence``).
    :param adv_estimator: the host's advantage estimator, for the ``needs_groups`` check.
    :param is_group_estimator: the host's answer to "does this estimator use ``uid`` groups?".
    :param extra_keys: further block keys the host reads itself.
    """
    owners = mechanism_keys()
    known = (*HOST_KEYS, *owners, *extra_keys)
    check_block_keys(block, known)
    cls = get_mechanism(block.mechanism)
    host = host.within(cls.seams)  # where a seam runs the step with other fields (verl's legacy rounds)
    pipeline = build_pipeline(
        block,
        actuator_kind=cls.actuator_kind,
        adv_estimator=adv_estimator,
        is_group_estimator=is_group_estimator,
        extra_keys=known,
    )
    stray = sorted(k for k, names in owners.items() if k in pipeline.extra and pipeline.mechanism not in names)
    if stray:
        readers = " or ".join(owners[stray[0]])
        raise ConfigError(
            f"dataflex.{stray[0]} is read only by mechanism: {readers}, but dataflex.mechanism="
            f"{pipeline.mechanism!r}; remove {[k for k in stray if owners[k] == owners[stray[0]]]} or set "
            f"mechanism: {owners[stray[0]][0]}"
        )
    mechanism = cls(block.keys)
    check_pipeline(pipeline, host, loss_unit=loss_unit, mechanism=mechanism)
    grouped = None
    if adv_estimator is not None and is_group_estimator is not None:
        grouped = is_group_estimator(adv_estimator)
    mechanism.mount(pipeline, host, grouped=grouped)
    return pipeline, mechanism, host
