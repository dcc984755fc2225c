"""The train dataset as a train sampler reads it: the one view of a framework's dataset every host hands over.

Each host wraps its framework's dataset in this view, so the mechanisms that draw prompts or keep a ledger
read columns one way.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from ..errors import ConfigError


class TrainDataset(Protocol):
    """The train dataset as a train sampler reads it: its columns, one value per row, in row order."""

    def __len__(self) -> int: ...

    def columns(self) -> list[str] | None:
        """The column names, or ``None`` when they cannot be known up front."""

    def column(self, name: str) -> Sequence[Any]:
        """Every row's value of column ``name``."""


def dataset_column(dataset: TrainDataset, name: str, *, what: str, fix: str) -> Sequence[Any]:
    """Column ``name`` of the train dataset; a column it lacks is one error saying ``what`` needs it and the ``fix``."""
    names = dataset.columns()
    if names is not None and name not in names:
        raise ConfigError(f"{what} is not a column of the train dataset (columns: {names}); {fix}")
    return dataset.column(name)
