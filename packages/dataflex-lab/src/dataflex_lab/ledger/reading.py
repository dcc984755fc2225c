"""A ledger read for ``dataflex ledger``: a Parquet export or a checkpoint folder, through core's checked reader.

Core's :class:`~dataflex_core.ledger.PromptLedger` reads both (``load``: the
header, the ids digest, every counter checked, the file, row, column and value
named when one is wrong). It needs the dataset's ids first; without the dataset
at hand they come from the file itself (the ``id`` column, in the order export
wrote them, which is the dataset's row order) or the checkpoint's state.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from dataflex_core.errors import ConfigError
from dataflex_core.ledger import PromptIds, PromptLedger
from dataflex_core.ledger_file import checkpoint_ledger_state, read_parquet


class LedgerError(ConfigError):
    """A ledger, a dataset or an output ``dataflex ledger`` cannot use; the message names the file and the fix."""


def is_parquet(path: str) -> bool:
    """Whether ``path`` is a file that starts with Parquet's magic bytes."""
    with open(path, "rb") as handle:
        return handle.read(4) == b"PAR1"


def load_ledger(path: str | os.PathLike[str]) -> PromptLedger:
    """The ledger of a Parquet export or of a checkpoint folder, checked as a warm start checks it.

    :raises LedgerError: the path is neither; :raises ConfigError: core's checks (file, row, column, value).
    """
    path = os.fspath(path)
    if os.path.isdir(path):
        state = checkpoint_ledger_state(path)
        ids = PromptIds(PromptIds.from_state(state), state["prompt_key"])
        ledger = PromptLedger(ids, state.get("success_threshold"))
        ledger.load_state_dict(state, f"the checkpoint {path}")  # what a warm start from the folder checks
        return ledger
    if not os.path.exists(path):
        raise LedgerError(f"{path} does not exist; give a ledger exported to Parquet or a checkpoint folder")
    if not is_parquet(path):
        raise LedgerError(
            f"{path} is not a Parquet file; give a ledger exported to Parquet (session.export_ledger) or a "
            "checkpoint folder"
        )
    header, _ = read_parquet(path)  # the header checked (format, version, columns, row count); no row read yet
    ids = PromptIds(file_ids(path), header["prompt_key"])
    ledger = PromptLedger(ids, header.get("success_threshold"))
    ledger.load(path)  # the digest of those ids against the header, every counter checked
    return ledger


def file_ids(path: str) -> np.ndarray:
    """The ``id`` column of a ledger file, in file order; an id listed twice is refused naming its rows."""
    import pyarrow.parquet as pq

    values = pq.read_table(path, columns=["id"]).column("id").to_numpy()
    order = np.argsort(values, kind="stable")
    ordered = values[order]
    repeated = np.flatnonzero(ordered[1:] == ordered[:-1])
    if len(repeated):
        first, second = sorted(order[repeated[0] : repeated[0] + 2].tolist())
        raise LedgerError(
            f"the ledger {path} row {second} (column id) lists prompt id {_plain(values[second])!r} a second time "
            f"(first at row {first}); each prompt has one row: export the ledger again"
        )
    return values


def _plain(value: Any) -> Any:
    return value.item() if isinstance(value, np.generic) else value
