"""No cap runs away (issue 58.4): a count-like key whose product with the batch exceeds the train dataset is refused
or capped where the host prepares the step (``prepare(population, batch_size=...)``), naming the product, so no
step of ``filter`` or ``pilot`` runs on without end. (``curriculum.candidates`` is checked against the dataset where
its sampler is built, ``allocate``'s counts by ``MAX_ROLLOUTS`` and the budget check: their own tests.) An
``allocate.budget`` without ``n_max`` is bounded by the batch at mount: at most 8 x prompts x ``rollout.n``."""

from __future__ import annotations

import logging

import pytest
import torch

from dataflex_core import ConfigError
from dataflex_core.mechanisms.allocate import allocate_settings
from dataflex_core.session import DataFlexSession, GenerationRounds, StagedGeneration
from dataflex_core.step import FieldSupport, HostCapabilities, LossWeights, SeamSupport

BAND = {
    "scorer": {"name": "group_reward_variance"},
    "actuator": {"name": "threshold_band", "params": {"low": 0.0, "high": 1.0e9}},
}
FIELDS = {n: FieldSupport(True) for n in ("response_mask", "rm_scores", "uid")}
STAGED = HostCapabilities(
    name="stagedhost", seams={LossWeights: SeamSupport(True), StagedGeneration: SeamSupport(True)}, fields=FIELDS
)
ROUNDS = HostCapabilities(
    name="roundshost", seams={LossWeights: SeamSupport(True), GenerationRounds: SeamSupport(True)}, fields=FIELDS
)
#: More steps of a loop than any capped step takes here: the old code's would take about 10^9.
GUARD = 100


def mounted(block, host):
    flex = DataFlexSession(block)
    flex.mount(host, loss_unit="token", adv_estimator="grpo", is_group_estimator=lambda name: True)
    return flex


def pilot_seam(pilot, population=16, batch_size=4):
    seam = mounted({"mechanism": "pilot", **BAND, "pilot": pilot}, STAGED).seam(StagedGeneration)
    seam.prepare(population, batch_size=batch_size, seed=0)
    return seam


def test_pilot_prompts_of_a_billion_is_refused_at_prepare_naming_the_product():
    with pytest.raises(ConfigError, match=r"pilot.prompts=1000000000 x the batch's 4 prompts = 4000000000 .* 16 rows"):
        pilot_seam({"prompts": 1_000_000_000})


def test_pilot_max_screened_beyond_the_dataset_is_refused():
    with pytest.raises(ConfigError, match=r"pilot.max_screened=17 is more than the train dataset's 16 rows"):
        pilot_seam({"prompts": 1, "max_screened": 17})


def test_pilot_stages_without_admission_stop_within_the_dataset_however_many_stages_are_allowed(caplog):
    with caplog.at_level(logging.WARNING, logger="dataflex_core.step"):
        seam = pilot_seam({"prompts": 1, "max_stages": 1_000_000_000, "on_short": "backfill"})
    assert "= 3999999996 prompts a step may screen, more than the train dataset's 16 rows" in caplog.text
    stages = seam.stages(4, rollout_n=8)
    for _ in range(GUARD):
        asked = stages.next()
        if asked is None or not stages.screening[-1]:
            break
        uid = asked.uids.repeat_interleave(asked.counts)
        none = torch.zeros(len(asked.uids), dtype=torch.bool)
        stages.record(uid, torch.full((len(uid),), 2), none, torch.zeros(len(asked.uids), dtype=torch.float64))
    else:
        pytest.fail(f"a step of pilot screened on past {GUARD} stages")
    assert len(stages.prompt) == 16  # every row of the dataset once, then the commit backfills


def test_pilot_within_the_dataset_keeps_its_settings():
    stages = pilot_seam({"prompts": 2, "max_stages": 3}).stages(4, rollout_n=8)
    assert stages.max_screened == 16  # 2 x 4 x 2 screening stages: the dataset's rows, not capped


def test_filter_rounds_without_admission_stop_within_the_dataset(caplog):
    block = {"mechanism": "filter", **BAND, "filter": {"max_rounds": 1_000_000_000, "on_short": "backfill"}}
    seam = mounted(block, ROUNDS).seam(GenerationRounds)
    with caplog.at_level(logging.WARNING, logger="dataflex_core.step"):
        seam.prepare(16, batch_size=4, seed=0)
    assert "= 3999999996 refill prompts a step may draw, more than the train dataset's 16 rows" in caplog.text
    rounds = seam.rounds(4)
    for _ in range(GUARD):
        rounds.add(torch.zeros(4, dtype=torch.bool), torch.full((4,), 2), torch.full((4,), 4))
        if not rounds.needs_refill:
            break
    else:
        pytest.fail(f"a step of filter ran on past {GUARD} generation rounds")
    assert rounds.rounds == 5  # the first round and one pass of the dataset's 16 rows in refills of 4


def test_filter_rounds_within_the_dataset_keep_max_rounds():
    seam = mounted({"mechanism": "filter", **BAND, "filter": {"max_rounds": 4}}, ROUNDS).seam(GenerationRounds)
    seam.prepare(16, batch_size=4, seed=0)
    assert seam.rounds(4).settings.max_rounds == 4


# -- allocate.budget: bounded by the batch at mount -------------------------------------------------------------------


def allocate_budget(allocate, prompts=8, rollout_n=4):
    """What the verl host's mount check says of ``allocate`` for a batch of ``prompts`` prompts of ``rollout_n``."""
    return allocate_settings({"allocate": allocate}).check(prompts, rollout_n, f"data.train_batch_size={prompts}")


def test_an_allocate_budget_of_2_to_the_40_for_a_batch_of_8_prompts_is_refused_naming_the_product():
    # 2^40 rollouts for 8 prompts of rollout.n=4 passed the key's range and every prompt got 2^37 rollouts
    with pytest.raises(ConfigError, match=r"budget=1099511627776 for data.train_batch_size=8 is more than 8 x 8 "
                       r"prompts x rollout.n=4 = 256 rollouts.*set dataflex.allocate.n_max"):  # fmt: skip
        allocate_budget({"budget": 2**40})


def test_an_allocate_budget_within_the_batch_or_under_an_explicit_n_max_mounts():
    assert allocate_budget({"budget": None}) == 32 and allocate_budget({"budget": 256}) == 256
    assert allocate_budget({"budget": 800, "n_max": 100}) == 800  # n_max says how many a prompt may get
    with pytest.raises(ConfigError, match=r"8 prompts x n_max=100 = 800 rollouts fall short of the budget of 801"):
        allocate_budget({"budget": 801, "n_max": 100})
