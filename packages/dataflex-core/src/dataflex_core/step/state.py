"""Component state in a host's checkpoints: each stateful component's ``state_dict``, by role.

Stateful components (history windows, EMAs, bandits) continue where they stopped when a run resumes; a different
component in a role is refused rather than fed another component's state. Component state is data, never code: the file
is read with ``torch.load(weights_only=True)``, so a crafted file in a shared checkpoint cannot run code on resume, and
a state holding anything else is refused by name at mount and at each save, before the framework writes.
"""

from __future__ import annotations

import io
import logging
import os
import pickle
import re
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import torch

from ..atomic_write import write_bytes_atomic
from ..errors import ConfigError, DataFlexError
from ..state_fields import StateFieldError
from .state_checks import describe, fresh_start, state_problem

logger = logging.getLogger("dataflex_core.step")

#: Component state saved with each checkpoint.
CHECKPOINT_STATE = "dataflex_state.pt"
#: Format of that file; bumped only for changes older readers cannot understand.
STATE_FORMAT = 1
#: What ``state_dict`` may hold: exactly what ``torch.load(weights_only=True)`` reads back.
STATE_RULE = (
    "state_dict() must return a dict of tensors, numbers, strings, bytes, None and lists, tuples, dicts or "
    "sets of them (a numpy array: .tolist() or torch.from_numpy(); an object: a dict of its fields)"
)

#: Exact types (a numpy float is a ``float`` subclass, and does not load back).
_PLAIN_LEAVES = {bool, int, float, complex, str, bytes, type(None), torch.dtype, torch.device}
_CONTAINERS = (list, tuple, set, frozenset)


class ComponentStateError(DataFlexError):
    """Component state that cannot be checkpointed, or a state file that cannot be resumed from."""


class Stateful(Protocol):
    """What travels with a checkpoint: a component, or a mechanism's own state (curriculum's prompt history)."""

    kind: str
    name: str | None

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


def _name(component: Stateful) -> str:
    return component.name or type(component).__name__


def _label(role: str, component: Stateful, labels: Mapping[str, str] | None) -> str:
    if labels and role in labels:
        return f"dataflex {role} {labels[role]}"
    return f"dataflex {role} ({component.kind} {_name(component)!r})"


def _first_foreign(value: Any, where: str) -> str | None:
    """Where ``value`` holds something other than plain data, e.g. ``state['window'][2] is a numpy.ndarray``."""
    if type(value) in _PLAIN_LEAVES or isinstance(value, torch.Tensor):
        return None
    if isinstance(value, dict):
        for key, item in value.items():
            found = _first_foreign(key, f"a key of {where}") or _first_foreign(item, f"{where}[{key!r}]")
            if found:
                return found
        return None
    if isinstance(value, _CONTAINERS):
        for i, item in enumerate(value):
            found = _first_foreign(item, f"{where}[{i}]")
            if found:
                return found
        return None
    kind = type(value)
    return f"{where} is a {kind.__module__}.{kind.__qualname__}"


def _plain(value: Any, depth: int = 0) -> bool:
    """Whether ``value`` holds only exact plain leaves and plain tensors in dicts, lists, tuples and sets (what
    ``torch.load(weights_only=True)`` builds); anything else (a tensor subclass too) takes the round trip."""
    if depth > 50:
        return False
    if type(value) in _PLAIN_LEAVES or type(value) is torch.Tensor:
        return True
    if type(value) is dict:
        return all(_plain(k, depth + 1) and _plain(v, depth + 1) for k, v in value.items())
    if type(value) in (list, tuple, set):  # a frozenset does not load back: it takes the round trip and fails
        return all(_plain(item, depth + 1) for item in value)
    return False


def _reloaded(state: Any) -> Any:
    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    return torch.load(buffer, map_location="cpu", weights_only=True)


def _checked_state(role: str, component: Stateful, labels: Mapping[str, str] | None) -> dict[str, Any]:
    """The component's ``state_dict()``, proven to load back the way resume loads it."""
    label = _label(role, component, labels)
    try:
        state = component.state_dict()
    except Exception as exc:  # noqa: BLE001 - plugin code: name it
        raise ComponentStateError(f"{label}: state_dict() raised {type(exc).__name__}: {exc}") from exc
    if not isinstance(state, dict):
        raise ComponentStateError(f"{label}: state_dict() returned a {type(state).__name__}; {STATE_RULE}")
    if _plain(state):
        return state  # only what the reader builds: no round trip (a 10M-prompt ledger would pickle twice)
    try:
        _reloaded(state)
    except Exception as exc:  # noqa: BLE001 - pickling raises many types; each means the same here
        try:
            reason = _first_foreign(state, "state")
        except RecursionError:  # a state that contains itself: torch's own message will do
            reason = None
        reason = reason or f"{type(exc).__name__}: {(str(exc).strip().splitlines() or [''])[0]}"
        raise ComponentStateError(f"{label}: its state cannot be checkpointed ({reason}); {STATE_RULE}") from exc
    return state


def check_component_state(components: Mapping[str, Stateful], labels: Mapping[str, str] | None = None) -> None:
    """At mount: every component's state round-trips through the file format, or :class:`ComponentStateError`
    naming it by ``labels[role]`` (``"ema (acme-dataflex==1.2)"``)."""
    for role, component in components.items():
        _checked_state(role, component, labels)


def encode_component_state(
    components: Mapping[str, Stateful], global_steps: int, labels: Mapping[str, str] | None = None
) -> bytes:
    """The bytes of :data:`CHECKPOINT_STATE` for this step; a state that does not round-trip is refused first."""
    payload = {
        "format": STATE_FORMAT,
        "global_steps": int(global_steps),
        "components": {
            role: {"kind": c.kind, "name": _name(c), "state": _checked_state(role, c, labels)}
            for role, c in components.items()
        },
    }
    buffer = io.BytesIO()
    torch.save(payload, buffer)
    return buffer.getvalue()


def write_component_state(folder: str | os.PathLike[str], data: bytes) -> Path:
    """Write encoded state into ``folder`` atomically: a reader finds the whole file or none."""
    return write_bytes_atomic(Path(folder) / CHECKPOINT_STATE, data)


@dataclass(frozen=True)
class SavedState:
    """A checkpoint's component state, as read and checked."""

    path: Path
    global_steps: int
    #: role -> ``{"kind", "name", "state"}``
    components: Mapping[str, Mapping[str, Any]]


def _unreadable(path: Path, what: str) -> ComponentStateError:
    return ComponentStateError(f"{path} {what}; resume from another checkpoint, or {fresh_start(path.name)}")


def _torch_reason(exc: BaseException) -> str:
    """The short cause in torch's message (``GLOBAL posix.system``), without its advice to load it unsafely."""
    text = str(exc)
    found = re.search(r"GLOBAL [\w.]+", text) or re.search(r"Unsupported operand \d+", text)
    if found:
        return found.group(0)
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[0] if lines else type(exc).__name__


def _load(path: Path) -> Any:
    if path.stat().st_size == 0:
        raise _unreadable(path, "is empty (the save that wrote it was interrupted)")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # torch's notes on foreign pickles: the error says it
            return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        reason = _torch_reason(exc)
        if reason.startswith("GLOBAL"):
            raise _unreadable(
                path,
                f"holds Python objects other than tensors and plain data ({reason}), which DataFlex never writes: "
                "it was not written by DataFlex or was altered, and loading it could run code, so it is not loaded",
            ) from None
        raise _unreadable(path, f"is not a state file torch.save wrote ({reason})") from None
    except (EOFError, RuntimeError, ValueError, OSError, KeyError, TypeError) as exc:
        raise _unreadable(path, f"is truncated or corrupt ({type(exc).__name__}: {_torch_reason(exc)})") from None


def read_component_state(folder: str | os.PathLike[str]) -> SavedState | None:
    """The component state a checkpoint holds (``None`` without the file), checked before resuming; what is
    wrong (empty, truncated, not DataFlex's, another format) is one :class:`ComponentStateError` with the fix."""
    path = Path(folder) / CHECKPOINT_STATE
    if not path.exists():
        return None
    payload = _load(path)
    if not isinstance(payload, dict) or "format" not in payload:
        raise _unreadable(path, f"is not a DataFlex state file (a {type(payload).__name__} without a format number)")
    fmt = payload["format"]
    if fmt != STATE_FORMAT:
        newer = isinstance(fmt, int) and not isinstance(fmt, bool) and fmt > STATE_FORMAT
        raise ComponentStateError(
            f"{path} has state format {fmt!r}, but this dataflex-core reads format {STATE_FORMAT}; "
            + ("upgrade dataflex-core to the version that wrote it" if newer else "it was not written by DataFlex")
            + f", or {fresh_start(path.name)}"
        )
    components = payload.get("components")
    entries_ok = isinstance(components, dict) and all(
        isinstance(e, dict) and isinstance(e.get("kind"), str) and isinstance(e.get("name"), str)
        and isinstance(e.get("state"), dict)
        for e in components.values()
    )  # fmt: skip
    steps = payload.get("global_steps")
    if not entries_ok or isinstance(steps, bool) or not isinstance(steps, int):
        raise _unreadable(path, "is malformed (expected components: {role: {kind, name, state}} and global_steps)")
    problem = state_problem(steps, components)
    if problem is not None:
        raise ComponentStateError(describe(path, problem))
    return SavedState(path=path, global_steps=steps, components=components)


def restore_component_state(
    saved: SavedState | None, components: Mapping[str, Stateful], folder: str | os.PathLike[str]
) -> None:
    """Give each component the state saved for its role; a different component in that role is an error, and so
    is a state its ``load_state_dict`` refuses (a field no run writes: :class:`~dataflex_core.state_fields.
    StateFieldError`) or fails on: one line naming the file, the role, the field and the value."""
    if saved is None:
        stateful = [role for role, c in components.items() if c.state_dict()]
        logger.warning(
            "checkpoint %s has no %s; dataflex components start fresh%s",
            folder,
            CHECKPOINT_STATE,
            f" (stateful: {', '.join(stateful)})" if stateful else "",
        )
        return
    for role, component in components.items():
        entry = saved.components.get(role)
        name = _name(component)
        if entry is None:
            logger.warning("checkpoint %s has no state for the dataflex %s; it starts fresh", folder, role)
            continue
        if (entry["kind"], entry["name"]) != (component.kind, name):
            raise ConfigError(
                f"checkpoint {folder} holds the state of {entry['kind']} {entry['name']!r} as dataflex {role}, "
                f"but this run configures {component.kind} {name!r}; resume with the same dataflex.{role}, or "
                f"delete {saved.path} to start the components fresh"
            )
        try:
            component.load_state_dict(entry["state"])
        except ComponentStateError:
            raise
        except ConfigError as exc:  # what the component says (another dataset, another prompt key), and the file
            raise ConfigError(f"{saved.path}: {exc}") from exc
        except Exception as exc:  # noqa: BLE001 - a state field no run writes (StateFieldError) or a raw error
            what = f"dataflex {role} ({entry['kind']} {entry['name']!r})"
            reason = str(exc) if isinstance(exc, StateFieldError) else f"{type(exc).__name__}: {exc}"
            raise ComponentStateError(describe(saved.path, f"{what}: {reason}")) from exc
