"""A ``dataflex:`` block built on its own, outside a host (a notebook, a demo's check before a run).

A host mounts instead (:func:`~dataflex_core.runner.mount_step`), which also checks the block against what the
host can do; both read the block once and build it with :func:`~dataflex_core.config.build_pipeline`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from ..block import check_block_keys, read_block
from ..config import DataFlexPipeline, build_pipeline
from ..errors import ConfigError
from ..mechanisms.registry import get_mechanism
from ..registry import Registry


def build_from_config(
    dataflex_cfg: Any,
    *,
    adv_estimator: str | None = None,
    is_group_estimator: Callable[[str], bool | None] | None = None,
    extra_keys: Iterable[str] = (),
    registry: Registry | None = None,
) -> DataFlexPipeline:
    """Build the scorer and actuator described by a ``dataflex:`` block, the actuator of its mechanism's kind.

    :param dataflex_cfg: dict or OmegaConf node with ``mechanism``, ``scorer``,
        ``actuator`` and ``warmup_step`` (plus any ``extra_keys``).
    :param adv_estimator: the host's advantage estimator, for the ``needs_groups`` check; ``None`` skips it.
    :param is_group_estimator: the host's answer to "does this estimator use ``uid`` groups?"
        (see :func:`~dataflex_core.config.build_pipeline`).
    :param extra_keys: block keys the host reads itself (kept in ``.extra``).
    :param registry: components to build from; defaults to the installed plugins.
    """
    block = read_block(dataflex_cfg)
    if block is None:
        raise ConfigError("the dataflex block is empty; give at least scorer and actuator")
    check_block_keys(block, extra_keys)
    mechanism = get_mechanism(block.mechanism)  # an unknown name lists the registered ones
    return build_pipeline(
        block,
        actuator_kind=mechanism.actuator_kind,
        adv_estimator=adv_estimator,
        is_group_estimator=is_group_estimator,
        extra_keys=extra_keys,
        registry=registry,
    )
