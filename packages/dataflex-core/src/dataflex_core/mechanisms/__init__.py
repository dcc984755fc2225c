"""The mechanisms: one module each behind one interface (:class:`Mechanism`), registered in one table.

``reweight`` (:mod:`.reweight`) and ``select`` (:mod:`.select`) weigh the loss; ``mix`` (:mod:`.mix`) and ``curriculum``
(:mod:`.curriculum`) choose the prompts through the host's train sampler. A new mechanism is a module with a
:class:`Mechanism` subclass decorated with :func:`register_mechanism`.
"""

from .base import LossMechanism, Mechanism, check_rollout_time
from .registry import get_mechanism, mechanism_names, mechanisms, register_mechanism, unregister_mechanism

__all__ = [
    "LossMechanism",
    "Mechanism",
    "check_rollout_time",
    "get_mechanism",
    "mechanism_names",
    "mechanisms",
    "register_mechanism",
    "unregister_mechanism",
]
