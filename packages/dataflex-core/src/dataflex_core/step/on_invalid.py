"""``dataflex.on_invalid`` for every mechanism: invalid plugin output raises, or is counted and replaced.

A component's output is never trusted (:mod:`dataflex_core.contracts`); what the step does when it is
invalid (a component's exception included) is one policy, the same for every mechanism and every host:
``raise`` (default) stops the run, ``uniform`` leaves that step as the framework would run it and counts it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TypeVar

from ..errors import ComponentError, InvalidOutputError

logger = logging.getLogger("dataflex_core.step")

T = TypeVar("T")


class InvalidOutputPolicy:
    """``dataflex.on_invalid`` for every mechanism: invalid plugin output raises, or is counted and replaced.

    :param mode: ``raise`` or ``uniform``.
    """

    def __init__(self, mode: str) -> None:
        self.mode = mode
        #: Steps (and draws) whose invalid output was replaced, over the run.
        self.fallbacks = 0
        #: Components whose exception was logged with its traceback (once each).
        self._traced: set[str] = set()

    def attempt(self, compute: Callable[[], T], *, step: int, instead: str) -> tuple[T | None, bool]:
        """``(compute(), False)``, or ``(None, True)`` when it raised :class:`InvalidOutputError` under ``uniform``.

        A component's exception (:class:`~dataflex_core.ComponentError`) is such output too; its traceback is
        logged the first time for each component.

        :param instead: what the caller does instead, for the warning (``"using uniform weights"``).
        """
        try:
            return compute(), False
        except InvalidOutputError as exc:
            if self.mode == "raise":
                raise
            self.fallbacks += 1
            trace = isinstance(exc, ComponentError) and exc.__cause__ is not None and exc.component not in self._traced
            if trace:
                self._traced.add(exc.component)
            logger.warning(
                "dataflex: %s; %s for step %d (dataflex.on_invalid=uniform)", exc, instead, step,
                exc_info=exc.__cause__ if trace else None,
            )  # fmt: skip
            return None, True
