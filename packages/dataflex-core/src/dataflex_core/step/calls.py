"""Every call the step makes into plugin code, and the rules each follows, in one place for every host.

Components are untrusted code inside the framework's training process, so :meth:`ComponentCalls.call` hands
them read-only inputs (a change in place is a :class:`~dataflex_core.ComponentError` naming the field; a write
through ``tensor.data`` or a numpy view is not seen), runs them without autograd, names whatever they raise
(invalid output, covered by ``on_invalid: uniform``), puts back the process-wide settings they changed
(:mod:`.process_state`) and names a call slower than ``dataflex.call_budget_s`` (:mod:`.watchdog`).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch

from ..batch import Batch
from ..config import DataFlexPipeline
from ..errors import ComponentError
from .process_state import ProcessState
from .watchdog import WATCHDOG, _at

logger = logging.getLogger("dataflex_core.step")

#: What each setting of :mod:`.process_state` is called in the warning.
SETTING_NAMES = {
    "default_dtype": "torch's default dtype",
    "matmul_precision": "torch's float32 matmul precision",
    "deterministic": "torch's deterministic-algorithms mode (enabled, warn_only)",
    "threads": "torch's CPU thread count",
}
INPUT_RULE = "components get read-only inputs: clone a tensor or copy an array before changing it"


def _tensors(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Iterator[tuple[str, torch.Tensor]]:
    """``(where, tensor)`` for every tensor a call is handed: the batch's fields, tensor arguments, tensors in ctx."""
    for i, arg in enumerate(args):
        if isinstance(arg, Batch):
            for name, value in arg.batch.items():
                if isinstance(value, torch.Tensor):
                    yield f"batch.batch[{name!r}]", value
        elif isinstance(arg, torch.Tensor):
            yield ("scores" if i == 0 else f"argument {i}"), arg
    for name, value in kwargs.items():
        if isinstance(value, torch.Tensor):
            yield f"{name}=", value


def _freeze(args: tuple[Any, ...]) -> list[np.ndarray]:
    """Write-protect the writable numpy arrays of the batches in ``args``; the ones to unprotect after."""
    frozen = []
    for arg in args:
        if isinstance(arg, Batch):
            for value in arg.non_tensor_batch.values():
                if isinstance(value, np.ndarray) and value.flags.writeable:
                    value.flags.writeable = False
                    frozen.append(value)
    return frozen


def component_label(pipeline: DataFlexPipeline, role: str) -> str:
    """``"<kind> <name> (<dist>==<version>)"`` of the scorer (``role="scorer"``) or the actuator, for errors."""
    spec = pipeline.scorer_spec if role == "scorer" else pipeline.actuator_spec
    return f"{spec.kind} {spec.label}"


class ComponentCalls:
    """The step's calls into its pipeline's scorer and actuator.

    :param pipeline: the mounted pipeline (its components and their labels).
    :param budget_s: seconds after which a call still running is warned about (``None``: never).
    """

    def __init__(self, pipeline: DataFlexPipeline, *, budget_s: float | None) -> None:
        self.pipeline = pipeline
        self.budget_s = budget_s
        #: ``(component, setting)`` pairs already warned about.
        self._warned: set[tuple[str, str]] = set()

    def label(self, role: str) -> str:
        return component_label(self.pipeline, role)

    def call(self, role: str, method: str, *args: Any, at_step: int | None, **kwargs: Any) -> Any:
        """``<role component>.<method>(*args, **kwargs)`` under the rules of this module.

        :param role: ``scorer`` or ``actuator``.
        :param at_step: the training step, for messages (``None`` outside a step).
        :raises ComponentError: the call raised, or changed an input in place.
        """
        component = self.pipeline.scorer if role == "scorer" else self.pipeline.actuator
        label = self.label(role)
        args = tuple(Batch(a.batch, a.non_tensor_batch, a.meta_info) if isinstance(a, Batch) else a for a in args)
        watched = [(where, tensor, tensor._version) for where, tensor in _tensors(args, kwargs)]
        frozen = _freeze(args)
        before = ProcessState.capture()
        token = WATCHDOG.begin(f"{label}: {method}()", at_step, self.budget_s) if self.budget_s else None
        try:
            with torch.no_grad():
                out = getattr(component, method)(*args, **kwargs)
        except (Exception, SystemExit) as exc:
            raise self._named(label, method, at_step, exc) from exc
        finally:
            if token is not None:
                WATCHDOG.end(token)
            for array in frozen:
                array.flags.writeable = True
            self._put_back(before, label, method, at_step)
        changed = [where for where, tensor, version in watched if tensor._version != version]
        if changed:
            raise ComponentError(
                f"{label} changed its input {changed[0]} in place in {method}(){_at(at_step)}; {INPUT_RULE}",
                label,
            )
        return out

    def _named(self, label: str, method: str, step: int | None, exc: BaseException) -> Exception:
        text = str(exc).strip()
        if isinstance(exc, ValueError) and "read-only" in text:
            text += f" ({INPUT_RULE})"
        what = type(exc).__name__ + (f": {text}" if text else "")
        return ComponentError(f"{label} raised in {method}(){_at(step)}: {what}", label)

    def _put_back(self, before: ProcessState, label: str, method: str, step: int | None) -> None:
        changed = before.changes(ProcessState.capture())
        if not changed:
            return
        before.restore(changed)
        for setting, change in changed.items():
            if (label, setting) in self._warned:
                continue
            self._warned.add((label, setting))
            if setting == "rng":
                logger.warning(
                    "dataflex: %s drew from the global random number generator(s) of %s in %s()%s; DataFlex put "
                    "them back, so the framework's random stream is unchanged and the component's draws repeat the "
                    "framework's next ones. A component that needs randomness keeps its own torch.Generator "
                    "(seeded, in its state_dict). Warned once per component",
                    label, change, method, _at(step),
                )  # fmt: skip
            else:
                logger.warning(
                    "dataflex: %s changed %s (%s) in %s()%s; DataFlex put it back (a component leaves process-wide "
                    "settings as it found them). Warned once per component",
                    label, SETTING_NAMES[setting], change, method, _at(step),
                )  # fmt: skip
