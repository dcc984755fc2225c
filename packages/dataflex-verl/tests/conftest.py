"""Fixtures for the host tests: one local Ray + TransferQueue per session, verl configs, helpers.

Small components defined here (names prefixed ``hosttest_``) cover what no
shipped plugin does on purpose: invalid output, fields verl may not produce,
timings the host cannot run. Users define components in their own code the
same way.
"""

from __future__ import annotations

import copy
import functools

import numpy as np
import pytest
import torch

from dataflex_core import Reweighter, Scorer, mean_one, register_reweighter, register_scorer, valid_sample_mask
from dataflex_verl import sandbox


@register_scorer("hosttest_constant")
class ConstantScorer(Scorer):
    """Every sample scores the same: a reweighter must then give uniform weights."""

    requires = ["advantages"]

    def score(self, batch, step_id, **ctx):
        return torch.full((len(batch),), 0.5)


@register_scorer("hosttest_seen_rows")
class SeenRowsScorer(Scorer):
    """Scores by |advantage| and records which uids it was shown."""

    requires = ["advantages"]
    needs_groups = True
    seen: list[np.ndarray] = []

    def score(self, batch, step_id, **ctx):
        type(self).seen.append(batch.non_tensor_batch["uid"].copy())
        mask = batch.batch["response_mask"].bool()
        adv = torch.where(mask, batch.batch["advantages"].abs(), torch.zeros(()))
        return adv.sum(-1) / mask.sum(-1).clamp(min=1)


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


@register_reweighter("hosttest_proportional")
class ProportionalReweighter(Reweighter):
    """Weights proportional to the scores, mean one: easy to recompute by hand in a test."""

    accepts_granularity = ("prompt", "response", "token")

    def act(self, scores, batch, **ctx):
        return mean_one(scores.float() + 0.1, batch)


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


@pytest.fixture(scope="session")
def queue():
    """A local Ray + TransferQueue shared by every test of the session."""
    with sandbox.local_queue():
        yield
