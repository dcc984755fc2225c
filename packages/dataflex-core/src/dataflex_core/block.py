"""The ``dataflex:`` block as plain data: what every reader of the block (config, runner, plugin pinning) starts from.

Hosts hand the block over as they hold it (an OmegaConf node in verl, a dict in TRL); it is read as plain
dicts and lists once, here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .errors import ConfigError


def to_plain(cfg: Any) -> Any:
    """An OmegaConf node (or anything mapping-like) as plain dicts and lists."""
    try:
        from omegaconf import DictConfig, ListConfig, OmegaConf
    except ImportError:  # omegaconf is optional for the core
        DictConfig = ListConfig = ()  # type: ignore[assignment]
    if DictConfig and isinstance(cfg, (DictConfig, ListConfig)):
        return OmegaConf.to_container(cfg, resolve=True)
    if isinstance(cfg, Mapping):
        return {k: to_plain(v) for k, v in cfg.items()}
    if isinstance(cfg, (list, tuple)):
        return [to_plain(v) for v in cfg]
    return cfg


def dataflex_block(cfg: Any) -> dict[str, Any]:
    """The ``dataflex:`` block as a plain dict (``None``: empty); anything but a mapping is a :class:`ConfigError`."""
    block = to_plain(cfg)
    if block is None:
        return {}
    if not isinstance(block, Mapping):
        raise ConfigError(
            f"the dataflex block must be a mapping of keys such as mechanism, scorer and actuator, got "
            f"{type(block).__name__} {block!r}; write it as `dataflex: {{mechanism: reweight, scorer: {{name: ...}}, "
            "actuator: {name: ...}}`, not as a list"
        )
    return block
