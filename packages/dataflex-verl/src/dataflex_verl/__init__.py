"""DataFlex for verl: scorers and reweighters applied inside verl's v1 trainers.

Installing the package is enough: its ``verl.plugins`` entry point registers the
trainers ``dataflex_sync``, ``dataflex_colocate_async`` and
``dataflex_separate_async`` whenever verl is imported. Select one with
``trainer.v1.trainer_mode`` and describe the pipeline in a ``dataflex:`` block.

Importing this package does not import verl (verl imports it while starting).
"""

from .version import __version__

#: The trainer modes this package registers, mapped to the verl base mode each one keeps.
TRAINER_MODES = {
    "dataflex_sync": "sync",
    "dataflex_colocate_async": "colocate_async",
    "dataflex_separate_async": "separate_async",
}

__all__ = ["TRAINER_MODES", "__version__"]
