"""DataFlex inside one training run: the one object a host creates and calls at its framework's seams.

The lifecycle a host drives is :class:`DataFlexSession` (:mod:`.lifecycle`); this package's face is the one
import a host needs: the session and what a host declares (:class:`HostCapabilities`, :class:`FieldSupport`,
the seams and :class:`SeamSupport`) and receives (:class:`StepResult`, a seam's implementation).
"""

from ..step.dataset import TrainDataset
from ..step.host import FieldSupport, HostCapabilities, SeamSupport
from ..step.result import StepResult
from ..step.seams import (
    SEAMS,
    GenerationRounds,
    LossWeights,
    PromptCounts,
    Seam,
    StagedGeneration,
    StageRequests,
    StepStages,
    TrainSampler,
)
from ..step.weights import SEQUENCE_UNIT, TOKEN_UNIT
from .lifecycle import DataFlexSession, missing_state_files

__all__ = [
    "SEAMS",
    "SEQUENCE_UNIT",
    "TOKEN_UNIT",
    "DataFlexSession",
    "FieldSupport",
    "GenerationRounds",
    "HostCapabilities",
    "LossWeights",
    "PromptCounts",
    "Seam",
    "SeamSupport",
    "StagedGeneration",
    "StageRequests",
    "StepResult",
    "StepStages",
    "TrainDataset",
    "TrainSampler",
    "missing_state_files",
]
