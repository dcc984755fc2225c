"""The runner: mount a read ``dataflex:`` block against a host (its mechanism resolved once), check it, run it.

It sits above the mechanisms it runs (:mod:`dataflex_core.mechanisms`), which build on the step
primitives (:mod:`dataflex_core.step`); the host session (:mod:`dataflex_core.session`) is its running step.
"""

from .build import build_from_config
from .check import TIMING_NEEDS, check_pipeline
from .mount import mechanism_keys, mount_mechanism
from .run import DataFlexStep, mount_step

__all__ = [
    "TIMING_NEEDS",
    "DataFlexStep",
    "build_from_config",
    "check_pipeline",
    "mechanism_keys",
    "mount_mechanism",
    "mount_step",
]
