"""verl's padding rows change nothing a user sees: the padded and the unpadded step give the same weights on the
real rows, 0 on the padding rows, and the same metrics (issue 36).

verl's V1 trainer appends padding rows (an empty ``response_mask``, one shared ``pad...`` uid) and then reorders
the whole batch, so they sit anywhere; the step runs the components on them as the empty rows they are. Every
installed scorer + actuator pair that runs in the step is checked on layouts with the awkward rows real steps
have (empty responses, groups of 2, singletons, an all-padding batch), padding rows carrying junk values in every
field but the mask.
"""

from __future__ import annotations

import math

import pytest
import torch

import dataflex_core
from dataflex_core import Batch
from dataflex_core.errors import InvalidOutputError
from dataflex_core.runner import DataFlexStep, mount_step
from dataflex_core.step import CANONICAL_FIELDS, FieldSupport, HostCapabilities, LossWeights, SeamSupport
from dataflex_lab.testing import grpo_batch

HOST = HostCapabilities(
    name="padding test host",
    fields={name: FieldSupport(True) for name in CANONICAL_FIELDS},
    seams={LossWeights: SeamSupport(True)},
    recompute_advantage=True,
    hard_drop=True,
    drop_denominator="rows",  # a kept row weighs rows / kept rows: padding rows must not count as rows
)
CTX = {"loss_agg_mode": "token-mean", "adv_estimator": "grpo"}
STEP_TIMINGS = ("post_reward", "post_advantage")
#: Values far from the real rows' in every field of a padding row but its (empty) mask: a component that lets a
#: padding row into a statistic moves the real rows' results visibly.
JUNK = {"rm_scores": 7.0, "token_level_rewards": 7.0, "advantages": 9.0, "old_log_probs": -50.0, "entropy": 100.0}
#: (label, grpo_batch options): padding rows scattered by the shuffle, beside the awkward real rows.
LAYOUTS = [
    ("groups_of_4", dict(groups=4, group_size=4, padding_rows=3, empty_rows=2, seed=1)),
    ("groups_of_2_singletons", dict(groups=5, group_size=2, singleton_groups=3, padding_rows=5, empty_rows=1, seed=2)),
    ("one_padding_row", dict(groups=3, group_size=4, padding_rows=1, seed=3)),
    # a host that leaves response tokens in its padding rows' mask: the step shows those rows emptied
    ("padding_with_tokens", dict(groups=4, group_size=2, padding_rows=3, empty_rows=1, seed=8, padding_tokens=2)),
]


def _pairs(kind: str) -> list[tuple[str, str]]:
    """Every installed plugin's scorer (run in the step) x actuator of ``kind`` that takes its granularity."""
    registry = dataflex_core.get_registry()
    out = []
    shipped = {k: [s for s in registry.components[k].values() if s.dist] for k in ("scorer", kind)}  # not tests'
    for scorer in shipped["scorer"]:
        if scorer.cls.timing not in STEP_TIMINGS:
            continue
        for actuator in shipped[kind]:
            if scorer.cls.granularity in actuator.cls.accepts_granularity:
                out.append((scorer.name, actuator.name))
    return sorted(out)


def padded_batch(options: dict) -> Batch:
    """A GRPO step as verl hands it over after ``_balance_batch``: padding rows anywhere, junk in their fields."""
    options = dict(options)
    padding_tokens = options.pop("padding_tokens", 0)
    batch = grpo_batch(policy_fields=True, shuffle=True, **options)
    padding = batch.batch["is_padding"]
    batch.batch["response_mask"][padding, :padding_tokens] = 1
    for name, value in JUNK.items():
        batch.batch[name][padding] = value
    return batch


def unpadded(batch: Batch) -> Batch:
    """The same step without verl's padding rows (fresh tensors, no ``is_padding``)."""
    real = ~batch.batch["is_padding"]
    tensors = {k: v[real].clone() for k, v in batch.batch.items() if k != "is_padding"}
    return Batch(tensors, {k: v[real.numpy()].copy() for k, v in batch.non_tensor_batch.items()})


def step_for(scorer: str, actuator: str, mechanism: str, unit: str) -> DataFlexStep:
    block = {"mechanism": mechanism, "scorer": {"name": scorer}, "actuator": {"name": actuator}}
    grouped = lambda name: True  # noqa: E731 - the test host groups rows by uid
    return mount_step(block, HOST, loss_unit=unit, ctx=CTX, adv_estimator="grpo", is_group_estimator=grouped)


def run_both(scorer, actuator, mechanism, unit, options, *, composed=False):
    """The padded and the unpadded step, each on a freshly mounted pipeline (stateful components start equal)."""
    padded = padded_batch(options)
    plain = unpadded(padded)
    real = ~padded.batch["is_padding"]
    importance = None
    if composed:  # verl's rollout-correction weights: anything on padding rows, the same on the real ones
        gen = torch.Generator().manual_seed(7)
        importance = torch.rand(padded.batch["response_mask"].shape, generator=gen) + 0.5
    results = []
    for batch, weights in ((padded, importance), (plain, None if importance is None else importance[real])):
        step = step_for(scorer, actuator, mechanism, unit)
        try:
            results.append(step.run(batch, 1, importance_weights=weights))
        except InvalidOutputError as exc:  # the actuator refuses these scores, or keeps nothing: so must both
            results.append(exc)
    return results, real


def assert_same_on_real_rows(padded, plain, real):
    if isinstance(padded, Exception) or isinstance(plain, Exception):
        assert type(padded) is type(plain), f"padded: {padded!r}; unpadded: {plain!r}"
        return
    assert (padded.applied is None) == (plain.applied is None)
    if padded.applied is not None:
        for name in ("applied", "factor"):
            ours, theirs = getattr(padded, name), getattr(plain, name)
            torch.testing.assert_close(ours[real], theirs, rtol=1e-5, atol=1e-6)
            assert not ours[~real].any(), f"{name} on padding rows: {ours[~real]}"
    if plain.kept is not None:
        assert torch.equal(padded.kept[real], plain.kept) and not padded.kept[~real].any()
    keys = set(plain.metrics) - {"dataflex/hook_time_s"}
    assert keys == set(padded.metrics) - {"dataflex/hook_time_s"}
    for key in sorted(keys):
        a, b = padded.metrics[key], plain.metrics[key]
        assert a == pytest.approx(b, rel=1e-5, abs=1e-6) or (math.isnan(a) and math.isnan(b)), key


@pytest.mark.parametrize("label,options", LAYOUTS, ids=[label for label, _ in LAYOUTS])
@pytest.mark.parametrize("unit", ["token", "sequence"])
def test_every_reweight_pair_weighs_the_real_rows_as_without_padding(label, options, unit):
    pairs = _pairs("reweighter")
    assert pairs, "no scorer + reweighter pair is installed; install the plugins (nox -s tests installs them)"
    for scorer, reweighter in pairs:
        (padded, plain), real = run_both(scorer, reweighter, "reweight", unit, options)
        assert_same_on_real_rows(padded, plain, real)


@pytest.mark.parametrize("label,options", LAYOUTS[:2], ids=[label for label, _ in LAYOUTS[:2]])
def test_every_selector_keeps_the_same_real_rows_as_without_padding(label, options):
    pairs = _pairs("selector")
    assert pairs, "no scorer + selector pair is installed"
    for scorer, selector in pairs:
        (padded, plain), real = run_both(scorer, selector, "select", "token", options)
        assert_same_on_real_rows(padded, plain, real)


def test_composed_with_verls_weights_the_real_rows_are_as_without_padding():
    for scorer, reweighter in [("advantage_magnitude", "softmax"), ("token_entropy", "high_entropy_tokens")]:
        (padded, plain), real = run_both(scorer, reweighter, "reweight", "token", LAYOUTS[0][1], composed=True)
        assert padded.metrics["dataflex/weight/composed"] == 1.0
        assert_same_on_real_rows(padded, plain, real)


def test_an_all_padding_step_is_left_to_the_framework_and_counts_no_rollout():
    step = step_for("advantage_magnitude", "softmax", "reweight", "token")
    batch = padded_batch(dict(groups=0, group_size=1, padding_rows=4, seed=4))
    result = step.run(batch, 1)
    assert result.applied is None and result.metrics["dataflex/empty_step"] == 1.0
    assert result.metrics["dataflex/compute/rollouts_generated"] == 0.0


def test_only_empty_real_rows_beside_padding_is_an_empty_step_as_without_padding():
    options = dict(groups=2, group_size=2, padding_rows=2, empty_rows=4, seed=5)
    (padded, plain), real = run_both("advantage_magnitude", "softmax", "reweight", "sequence", options)
    assert padded.metrics["dataflex/empty_step"] == plain.metrics["dataflex/empty_step"] == 1.0
    assert_same_on_real_rows(padded, plain, real)


def test_the_wasted_rollouts_counter_ignores_padding_rows_and_advantages_outside_the_mask():
    batch = padded_batch(dict(groups=3, group_size=2, padding_rows=2, seed=6))
    real = ~batch.batch["is_padding"]
    mask = batch.batch["response_mask"].bool()
    advantages = batch.batch["advantages"]
    advantages[real & (mask.sum(-1) > 0)] = 0.0
    advantages[~mask] = 5.0  # outside the response: not a moving token
    first = int((real & (mask.sum(-1) > 0)).nonzero()[0])
    advantages[first, 0] = 0.5
    result = step_for("advantage_magnitude", "softmax", "reweight", "token").run(batch, 1)
    trained = int((real & (mask.sum(-1) > 0)).sum())
    assert result.metrics["dataflex/compute/rollouts_trained"] == trained
    assert result.metrics["dataflex/compute/rollouts_wasted"] == trained - 1
    assert result.metrics["dataflex/compute/rollouts_generated"] == int(real.sum())
