"""The runner: mount the ``dataflex:`` block against a host (its mechanism resolved once), check it, run it.

It sits above the mechanisms it runs (:mod:`dataflex_core.mechanisms`), which build on the step
primitives (:mod:`dataflex_core.step`); the host session (:mod:`dataflex_core.session`) drives it.
"""

from .build import build_from_config
from .check import TIMING_NEEDS, check_pipeline
from .mount import MountedStep, mechanism_keys, mount_step
from .run import DataFlexStep

__all__ = [
    "TIMING_NEEDS",
    "DataFlexStep",
    "MountedStep",
    "build_from_config",
    "check_pipeline",
    "mechanism_keys",
    "mount_step",
]
