"""``mechanism: pilot``: screen prompts with a few pilot rollouts, commit the rest of the budget to those with signal.

One idea per module: its block keys (:mod:`.settings`), one step's stages (:mod:`.stages`), and the mechanism
with its side of the staged-generation seam (:mod:`.mechanism`).
"""

from .mechanism import Pilot, PilotStagedGeneration
from .settings import PILOT_KEYS, PilotSettings, pilot_settings
from .stages import EASY_ABOVE, PILOT_PREFIX, PilotStages

__all__ = [
    "EASY_ABOVE",
    "PILOT_KEYS",
    "PILOT_PREFIX",
    "Pilot",
    "PilotSettings",
    "PilotStagedGeneration",
    "PilotStages",
    "pilot_settings",
]
