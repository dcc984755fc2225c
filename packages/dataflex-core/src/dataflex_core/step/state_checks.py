"""Checks of a checkpoint's component state that loads but would train wrong, before any component takes it.

``torch.load`` accepts a ledger column cut short, negative or NaN counts and ``global_steps=-5``; each is
refused here in one line naming the file, the component's role and the field.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import torch

from ..compute import MOST_STEPS_PER_GLOBAL_STEP, ComputeTotals
from ..ledger_file import COLUMNS, column_problem


def state_problem(global_steps: int, components: Mapping[str, Mapping[str, Any]]) -> str | None:
    """What is wrong with a state that loaded (``None``: nothing), naming the role and the field."""
    if global_steps < 0:
        return f"global_steps={global_steps} is negative (a run counts its steps from 0)"
    most = global_steps * MOST_STEPS_PER_GLOBAL_STEP
    for role, entry in components.items():
        # the compute totals count no more DataFlex steps than global_steps allow (their load_state_dict then bounds
        # each total by these steps; another type is refused there)
        counters = (entry["kind"], entry["name"]) == (ComputeTotals.kind, ComputeTotals.name)
        steps = entry["state"].get("steps") if counters else None
        if isinstance(steps, int) and not isinstance(steps, bool) and steps > most:
            return (
                f"{role} counters {ComputeTotals.name!r}: state['steps'] is {steps}: it is at most global_steps "
                f"({global_steps}) x {MOST_STEPS_PER_GLOBAL_STEP} (the most DataFlex steps a framework step runs) = {most}"
            )
        problem = next(_ledger_problems(entry["state"], f"{role} {entry['kind']} {entry['name']!r}: state"), None)
        if problem is not None:
            return problem
    return None


def _ledger_problems(state: Any, where: str) -> Iterator[str]:
    """The problems of the per-prompt ledgers anywhere in ``state``, depth first (the caller takes the first)."""
    if not isinstance(state, Mapping):
        return
    if ("ids" in state or "ids_utf8" in state) and any(column in state for column in COLUMNS):
        problem = _ledger_problem(state, where)
        if problem is not None:
            yield problem
    for key, value in state.items():
        yield from _ledger_problems(value, f"{where}[{key!r}]")


def _ledger_problem(state: Mapping[str, Any], where: str) -> str | None:
    """A per-prompt ledger's columns: one tensor per column of the dtype a run writes, one value per id, each value
    one a run records (:func:`~dataflex_core.ledger_file.column_problem`, the rule a Parquet file follows)."""
    ids = state["ids"] if "ids" in state else state["ids_utf8"]
    try:
        rows = len(ids)
    except TypeError:
        return f"{where}['ids'] is not a list of prompt ids (got {type(ids).__name__})"
    columns = {}
    for column in COLUMNS:
        if column not in state or state[column] is None:
            continue
        value = state[column]
        field = f"{where}[{column!r}]"
        if not isinstance(value, torch.Tensor) or value.dim() != 1:
            return f"{field} is not a 1-D tensor (got {type(value).__name__})"
        if value.dtype != COLUMNS[column][0]:  # what a run writes; another dtype may wrap on the cast (uint64)
            return f"{field} is a {value.dtype} tensor; a run writes {COLUMNS[column][0]}"
        if len(value) != rows:
            return f"{field} has {len(value)} rows for {rows} prompt ids (the column was cut or padded)"
        columns[column] = value.numpy()
    problem = column_problem(columns)
    if problem is None:
        return None
    column, at, value, why = problem
    return f"{where}[{column!r}] holds {value!r} at row {at}: {why}"


#: The documented way to resume a checkpoint whose DataFlex state is wrong or absent (:meth:`check_resume`).
FRESH_START_SETTING = "dataflex.plugins.allow_missing_state=true"


def fresh_start(name: str) -> str:
    """The fix that starts the components fresh from a checkpoint whose state file ``name`` cannot be used."""
    return f"delete {name} from it and set {FRESH_START_SETTING} to start the dataflex components fresh"


def describe(path: Path, problem: str) -> str:
    """The one-line refusal of a checkpoint whose state is wrong."""
    return (
        f"{path}: {problem}; it was not written by this run's DataFlex or was altered: resume from another "
        f"checkpoint, or {fresh_start(path.name)}"
    )
