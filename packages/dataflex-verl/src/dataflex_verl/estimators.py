"""verl 0.9.1's advantage estimators by whether they normalise within ``uid`` groups.

The host asks verl's own ``ADV_ESTIMATOR_REGISTRY`` first
(:func:`dataflex_verl.mount.is_group_estimator`); these lists answer only for
names the registry does not hold (an estimator registered later by a plugin,
or verl's registry failing to import). Checked against verl 0.9.1's
``verl/trainer/ppo/core_algos.py``.
"""

from __future__ import annotations

#: Estimators that normalise within ``uid`` groups.
GROUP_ESTIMATORS = frozenset(
    {
        "grpo",
        "grpo_vectorized",
        "gdpo",
        "grpo_passk",
        "reinforce_plus_plus_baseline",
        "rloo",
        "rloo_vectorized",
        "opo",
        "gpg",
        "optimal_token_baseline",
        "tir_optimal_token_baseline",
    }
)
#: Estimators that do not use groups.
NON_GROUP_ESTIMATORS = frozenset({"gae", "reinforce_plus_plus", "remax"})


def known_group_estimator(name: str) -> bool | None:
    """Group-ness of a verl 0.9.1 estimator from the lists; ``None`` for a name they do not hold."""
    if name in GROUP_ESTIMATORS:
        return True
    if name in NON_GROUP_ESTIMATORS:
        return False
    return None
