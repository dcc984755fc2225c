"""The runner: mount a read ``dataflex:`` block against a host (its mechanism resolved once), check it, run it.

It sits above the mechanisms it runs (:mod:`dataflex_core.mechanisms`), which build on the step
primitives (:mod:`dataflex_core.step`); the host session (:mod:`dataflex_core.session`) is its running step.
"""

from .check import check_pipeline
from .run import DataFlexStep, mount_step

__all__ = [
    "DataFlexStep",
    "check_pipeline",
    "mount_step",
]
