"""A warning, while it still runs, for a component call that takes longer than its budget.

A call inside the training process cannot be stopped safely, so DataFlex names the slow one: a daemon thread
logs, about once a second, each call past ``dataflex.call_budget_s`` with the component, the step, the time so
far and the line it is executing, and how long it took when it returns.
"""

from __future__ import annotations

import itertools
import logging
import sys
import threading
import time
import traceback
from dataclasses import dataclass

logger = logging.getLogger("dataflex_core.step")

#: How often the watchdog thread looks at the calls in flight (seconds).
POLL_S = 1.0


@dataclass
class _Call:
    label: str
    step: int | None
    budget: float
    start: float
    thread: int
    next_warning: float
    warned: bool = False


def _at(step: int | None) -> str:
    return "" if step is None else f" at step {step}"


def _where(thread: int) -> str:
    """``file:line in function`` of the innermost frame ``thread`` is executing."""
    frame = sys._current_frames().get(thread)
    if frame is None:
        return "an unknown place"
    last = traceback.extract_stack(frame)[-1]
    return f"{last.filename}:{last.lineno} in {last.name}"


class Watchdog:
    """Calls in flight, and the thread that warns about the slow ones (started with the first call)."""

    def __init__(self, poll_s: float = POLL_S) -> None:
        self.poll_s = poll_s
        self._lock = threading.Lock()
        self._calls: dict[int, _Call] = {}
        self._tokens = itertools.count()
        self._thread: threading.Thread | None = None

    def begin(self, label: str, step: int | None, budget_s: float) -> int:
        """Watch a call that starts now; returns the token :meth:`end` takes."""
        now = time.monotonic()
        call = _Call(label, step, budget_s, now, threading.get_ident(), now + budget_s)
        with self._lock:
            token = next(self._tokens)
            self._calls[token] = call
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="dataflex-watchdog", daemon=True)
                self._thread.start()
        return token

    def end(self, token: int) -> None:
        """The call returned (or raised); one line with its time when it had been warned about."""
        with self._lock:
            call = self._calls.pop(token, None)
        if call is not None and call.warned:
            logger.warning(
                "dataflex: %s%s returned after %.1f s (dataflex.call_budget_s=%g)",
                call.label, _at(call.step), time.monotonic() - call.start, call.budget,
            )  # fmt: skip

    def _run(self) -> None:
        while True:
            time.sleep(self.poll_s)
            now = time.monotonic()
            with self._lock:
                due = [call for call in self._calls.values() if call.next_warning <= now]
                for call in due:
                    call.warned = True
                    call.next_warning = now + call.budget
            for call in due:
                logger.warning(
                    "dataflex: %s%s has run for %.0f s, past dataflex.call_budget_s=%g, and is at %s; DataFlex "
                    "cannot stop a call inside the training process, so the step waits for it (a plugin that can "
                    "hang must time out its own work)",
                    call.label, _at(call.step), now - call.start, call.budget, _where(call.thread),
                )  # fmt: skip


#: The process's one watchdog.
WATCHDOG = Watchdog()
