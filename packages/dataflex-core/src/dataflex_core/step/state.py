"""Component state in a host's checkpoints: each stateful component's ``state_dict``, by role.

Stateful components (history windows, EMAs, bandits) must continue where they
stopped when a run resumes. Every host writes the same file into its
checkpoint folder (verl's ``global_step_N/``, TRL's ``checkpoint-N/``) and
reads it back on resume; a different component in a role is refused rather
than fed another component's state.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

import torch

from ..errors import ConfigError

logger = logging.getLogger("dataflex_core.step")

#: Component state saved with each checkpoint.
CHECKPOINT_STATE = "dataflex_state.pt"
STATE_FORMAT = 1


class Stateful(Protocol):
    """What travels with a checkpoint: a component, or a mechanism's own state (curriculum's prompt history)."""

    kind: str
    name: str | None

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


def save_component_state(folder: str | os.PathLike[str], components: Mapping[str, Stateful], global_steps: int) -> None:
    """``torch.save`` each component's ``state_dict`` with its kind and name (atomically)."""
    payload = {
        "format": STATE_FORMAT,
        "global_steps": global_steps,
        "components": {
            role: {"kind": c.kind, "name": c.name or type(c).__name__, "state": c.state_dict()}
            for role, c in components.items()
        },
    }
    path = Path(folder) / CHECKPOINT_STATE
    tmp = path.with_name(path.name + ".tmp")
    torch.save(payload, tmp)
    os.replace(tmp, path)


def load_component_state(folder: str | os.PathLike[str], components: Mapping[str, Stateful]) -> None:
    """Give each component the state saved for its role; a different component in that role is an error."""
    path = Path(folder) / CHECKPOINT_STATE
    if not path.exists():
        stateful = [role for role, c in components.items() if c.state_dict()]
        logger.warning(
            "checkpoint %s has no %s; dataflex components start fresh%s",
            folder,
            CHECKPOINT_STATE,
            f" (stateful: {', '.join(stateful)})" if stateful else "",
        )
        return
    payload = torch.load(path, map_location="cpu", weights_only=False)
    saved = payload.get("components", {})
    for role, component in components.items():
        entry = saved.get(role)
        name = component.name or type(component).__name__
        if entry is None:
            logger.warning("checkpoint %s has no state for the dataflex %s; it starts fresh", folder, role)
            continue
        if (entry["kind"], entry["name"]) != (component.kind, name):
            raise ConfigError(
                f"checkpoint {folder} holds the state of {entry['kind']} {entry['name']!r} as dataflex {role}, "
                f"but this run configures {component.kind} {name!r}; resume with the same dataflex.{role}, or "
                f"delete {path} to start the components fresh"
            )
        component.load_state_dict(entry["state"])
