"""verl's ``loss_agg_mode`` -> the unit in which DataFlex weights have mean one.

verl's ``agg_loss`` divides by token or sequence *counts*, never by the sum of
the weights, so the weights' mean sets the step size. Core's step normalises
in a unit (:mod:`dataflex_core.step.weights`); this module says which unit
each verl aggregation uses:

- ``token``: ``token-mean``, ``token-sum``, ``seq-mean-token-sum``,
  ``seq-mean-token-sum-norm``: the mean over valid tokens is 1;
- ``sequence``: ``seq-mean-token-mean`` (and policy loss ``sapo``, which forces
  it): the mean over valid sequences of each sequence's token-mean is 1.

Composition with verl's rollout-correction ``rollout_is_weights`` is core's
(the product keeps the mean of verl's weights alone).
"""

from __future__ import annotations

from dataflex_core import ConfigError
from dataflex_core.step import SEQUENCE_UNIT, TOKEN_UNIT

#: ``loss_agg_mode`` -> the unit its mean is taken over.
LOSS_UNITS = {
    "token-mean": TOKEN_UNIT,
    "token-sum": TOKEN_UNIT,
    "seq-mean-token-sum": TOKEN_UNIT,
    "seq-mean-token-sum-norm": TOKEN_UNIT,
    "seq-mean-token-mean": SEQUENCE_UNIT,
}
#: Policy losses that aggregate with a fixed mode whatever ``loss_agg_mode`` says.
FORCED_AGG_MODE = {"sapo": "seq-mean-token-mean"}


def loss_unit(loss_agg_mode: str, policy_loss: str = "vanilla") -> str:
    """The unit (``token`` or ``sequence``) in which weights must have mean one."""
    mode = FORCED_AGG_MODE.get(policy_loss, loss_agg_mode)
    try:
        return LOSS_UNITS[mode]
    except KeyError:
        raise ConfigError(
            f"actor_rollout_ref.actor.loss_agg_mode={loss_agg_mode!r} is not one dataflex-verl can normalise for; "
            f"supported: {', '.join(LOSS_UNITS)}"
        ) from None
