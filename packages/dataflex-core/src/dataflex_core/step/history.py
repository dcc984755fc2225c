"""The curriculum's view of the per-prompt ledger (:mod:`dataflex_core.ledger`).

:class:`PromptHistory` is the ledger under the checkpoint identity curriculum runs have always saved it with,
so their checkpoints resume.
"""

from __future__ import annotations

from ..ledger import SAME_REWARD_TOLERANCE, PromptIds, PromptLedger, StepOutcomes

__all__ = ["SAME_REWARD_TOLERANCE", "PromptHistory", "PromptIds", "StepOutcomes"]


class PromptHistory(PromptLedger):
    """The ledger as ``mechanism: curriculum`` keeps it (checkpoint role ``history``)."""

    kind = "history"
    name = "prompt_history"
