"""dataflex-host-example: a DataFlex host over a toy training loop of its own, to copy for a new framework.

:mod:`.loop` stands in for the framework (a real host installs verl or TRL instead); :mod:`.host` is the
host: capabilities, the canonical batch, and the session at the loop's seams.
"""

from .host import DataFlexToyTrainer, canonical_batch, capabilities
from .loop import ToyConfig, ToyTrainer, toy_dataset
from .version import __version__

__all__ = [
    "DataFlexToyTrainer",
    "ToyConfig",
    "ToyTrainer",
    "__version__",
    "canonical_batch",
    "capabilities",
    "toy_dataset",
]
