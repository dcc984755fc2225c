"""Fixtures for the host tests: verl configs and small components (the shared queue is the testing kit's ``queue``).

Small components defined here (names prefixed ``hosttest_``) cover what no
shipped plugin does on purpose: invalid output, fields verl may not produce,
timings the host cannot run; ``hosttest_constant`` and ``hosttest_proportional``
are the testing kit's toy components. Users define components in their own code
the same way.
"""

from __future__ import annotations

import copy
import functools

import numpy as np
import pytest
import torch

from dataflex_core import Reweighter, Scorer, register_reweighter, register_scorer, valid_sample_mask
from dataflex_lab.testing import mean_abs_advantage, register_toy_components
from dataflex_lab.verl import sandbox

register_toy_components("hosttest")


@register_scorer("hosttest_seen_rows")
class SeenRowsScorer(Scorer):
    """Scores by |advantage| and records which uids it was shown."""

    requires = ["advantages"]
    needs_groups = True
    seen: list[np.ndarray] = []

    def score(self, batch, step_id, **ctx):
        type(self).seen.append(batch.non_tensor_batch["uid"].copy())
        return mean_abs_advantage(batch)


@register_scorer("hosttest_mean_entropy")
class MeanEntropyScorer(Scorer):
    """Mean entropy of each response: a field verl's ``_compute_advantage`` does not read itself."""

    requires = ["entropy"]

    def score(self, batch, step_id, **ctx):
        mask = batch.batch["response_mask"].bool()
        entropy = torch.where(mask, batch.batch["entropy"], torch.zeros(()))
        return entropy.sum(-1) / mask.sum(-1).clamp(min=1)


@register_scorer("hosttest_token_position")
class TokenPositionScorer(Scorer):
    """Token scores growing along the response, so token weights differ within a sequence."""

    requires = ["advantages"]
    granularity = "token"

    def score(self, batch, step_id, **ctx):
        mask = batch.batch["response_mask"]
        return torch.arange(mask.shape[1], dtype=torch.float32).expand(mask.shape) + 1.0


@register_scorer("hosttest_nan")
class NaNScorer(Scorer):
    requires = ["advantages"]

    def score(self, batch, step_id, **ctx):
        out = torch.ones(len(batch))
        out[valid_sample_mask(batch).nonzero()[0]] = float("nan")
        return out


@register_reweighter("hosttest_negative")
class NegativeReweighter(Reweighter):
    def act(self, scores, batch, **ctx):
        return -torch.ones(len(batch))


@register_reweighter("hosttest_wrong_shape")
class WrongShapeReweighter(Reweighter):
    def act(self, scores, batch, **ctx):
        return torch.ones(len(batch) + 1)


@register_scorer("hosttest_needs_values")
class ValuesScorer(Scorer):
    requires = ["values"]


@register_scorer("hosttest_needs_ref")
class RefScorer(Scorer):
    requires = ["ref_log_prob"]


@register_scorer("hosttest_needs_rollout_log_probs")
class RolloutLogProbScorer(Scorer):
    requires = ["rollout_log_probs"]


@register_scorer("hosttest_needs_data_source")
class DataSourceScorer(Scorer):
    requires = ["data_source"]


@register_scorer("hosttest_in_loss")
class InLossScorer(Scorer):
    timing = "in_loss"


@register_scorer("hosttest_pre_rollout")
class PreRolloutScorer(Scorer):
    timing = "pre_rollout"


@functools.cache
def _composed(overrides: tuple[str, ...]):
    return sandbox.compose_config(overrides)


@pytest.fixture(scope="session")
def make_config():
    """``make_config(overrides, dataflex)``: a fresh copy of verl's composed ``ppo_trainer`` config."""
    from omegaconf import OmegaConf, open_dict

    def make(overrides=(), dataflex=None):
        base = ["actor_rollout_ref.rollout.n=4", *overrides]
        if not any(o.startswith("algorithm.adv_estimator=") for o in base):
            base.append("algorithm.adv_estimator=grpo")
        config = copy.deepcopy(_composed(tuple(base)))
        if dataflex is not None:
            with open_dict(config):
                config.dataflex = OmegaConf.create(dataflex)
        return config

    return make
