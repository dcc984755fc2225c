"""DataFlex inside one training run: the one object a host creates and calls at its framework's seams."""

from .lifecycle import (
    LOSS_UNITS,
    SEQUENCE_UNIT,
    TOKEN_UNIT,
    DataFlexSession,
    FieldSupport,
    HostCapabilities,
    StepResult,
    TrainDataset,
    dataset_column,
)

__all__ = [
    "LOSS_UNITS",
    "SEQUENCE_UNIT",
    "TOKEN_UNIT",
    "DataFlexSession",
    "FieldSupport",
    "HostCapabilities",
    "StepResult",
    "TrainDataset",
    "dataset_column",
]
