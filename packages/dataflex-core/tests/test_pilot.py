"""``mechanism: pilot`` in the core: screening stages on groups of 2 with empty and padding rows, the commit's
requests, exact generation checked, settings checked at mount, a host without the seam refused, and the
selection bias of keeping pilot rollouts on a known reward distribution."""

from __future__ import annotations

import pytest
import torch

from dataflex_core import ConfigError, IncompatibleComponentError, InvalidOutputError
from dataflex_core.mechanisms.pilot import PilotStages
from dataflex_core.session import DataFlexSession, StagedGeneration
from dataflex_core.step import FieldSupport, HostCapabilities, LossWeights, SeamSupport
from dataflex_lab.testing import rows_batch

HOST = HostCapabilities(
    name="stagedhost",
    seams={LossWeights: SeamSupport(True), StagedGeneration: SeamSupport(True)},
    fields={n: FieldSupport(True) for n in ("response_mask", "rm_scores", "uid")},
)
PILOT = {
    "mechanism": "pilot",
    "scorer": {"name": "group_reward_variance"},
    "actuator": {"name": "threshold_band", "params": {"low": 0.0, "high": 1.0e9}},
}


def staged(pilot=None, host=HOST, population=64, batch_size=4):
    flex = DataFlexSession({**PILOT, "pilot": pilot or {}})
    flex.mount(host, loss_unit="token", adv_estimator="grpo", is_group_estimator=lambda name: True)
    seam = flex.seam(StagedGeneration)
    seam.prepare(population, batch_size=batch_size, seed=0)
    return seam


def stage_batch(asked, rewards, lengths=None, padding=1):
    """The rows a host generates for ``asked``: each uid's rollouts with these rewards, then padding rows."""
    uid = asked.uids.repeat_interleave(asked.counts).tolist() + [-1] * padding
    rewards = list(rewards) + [0.0] * padding
    lengths = (lengths or [2] * (len(rewards) - padding)) + [0] * padding
    return rows_batch(lengths, width=3, rewards=rewards, uid=uid, padding=[False] * (len(uid) - padding) + [True] * padding)


def test_screening_on_pairs_with_empty_rows_admits_the_mixed_prompts_and_commits_them_to_rollout_n():
    seam = staged({"prompts": 2, "rollouts": 2})
    stages = seam.stages(2, rollout_n=8, drawn=torch.tensor([5, 6]))
    asked = stages.next()
    assert asked.prompts[:2].tolist() == [5, 6] and len(asked.prompts) == 4  # the host's prompts screened first
    assert asked.counts.tolist() == [2] * 4 and asked.uids.tolist() == [0, 1, 2, 3]
    # uid 0 solved twice (too easy), 1 mixed, 2 failed twice with an empty response (too hard), 3 mixed
    seam.observe(stages, stage_batch(asked, [1, 1, 0, 1, 0, 0, 1, 0], lengths=[2, 2, 2, 2, 0, 2, 2, 2]), 1)
    assert stages.admitted.tolist() == [False, True, False, True]
    commit = stages.next()
    assert commit.uids.tolist() == [1, 3] and commit.counts.tolist() == [6, 6]
    assert commit.prompts.tolist() == asked.prompts[[1, 3]].tolist()
    seam.observe(stages, stage_batch(commit, [1.0] * 12), 1)
    assert stages.next() is None
    pilot_rows, commit_rows = stages.trained()
    assert pilot_rows.tolist() == [2, 3, 6, 7] and commit_rows.tolist() == list(range(12))  # padding never kept
    metrics = stages.metrics()
    assert metrics["dataflex/pilot/evicted_prompts"] == 1 and metrics["dataflex/pilot/deferred_prompts"] == 1
    assert metrics["dataflex/pilot/pilot_rollouts"] == 8 and metrics["dataflex/pilot/commit_rollouts"] == 12
    assert stages.counts()["evicted_rollouts"] == 4  # the pilots of uids 0 and 2


def test_screening_only_commits_whole_groups_and_trains_no_pilot_rollout():
    seam = staged({"prompts": 1, "rollouts": 2, "keep": False})
    stages = seam.stages(2, rollout_n=4)
    asked = stages.next()
    seam.observe(stages, stage_batch(asked, [1, 0, 0, 1]), 1)
    commit = stages.next()
    assert commit.counts.tolist() == [4, 4]
    seam.observe(stages, stage_batch(commit, [1.0] * 8), 1)
    assert [t.tolist() for t in stages.trained()] == [[], list(range(8))]
    assert stages.counts()["evicted_rollouts"] == 4


def test_a_host_that_generates_other_counts_than_asked_is_stopped():
    seam = staged({"prompts": 1, "rollouts": 2})
    stages = seam.stages(2, rollout_n=4)
    asked = stages.next()
    short = type(asked)(asked.prompts, torch.tensor([2, 1]), asked.uids)
    with pytest.raises(InvalidOutputError, match=r"asked for \[2, 2\] rollouts of uids \[0, 1\].*generated \[2, 1\]"):
        seam.observe(stages, stage_batch(short, [1, 0, 1]), 1)


def test_more_stages_screen_the_prompts_still_lacking_until_the_caps():
    seam = staged({"prompts": 2, "rollouts": 2, "max_stages": 3, "on_short": "backfill"})
    stages = seam.stages(2, rollout_n=4)
    first = stages.next()
    seam.observe(stages, stage_batch(first, [1, 0, 1, 1, 0, 0, 1, 1]), 1)  # one of four admitted
    second = stages.next()
    assert len(second.uids) == 2 and second.uids.tolist() == [4, 5]  # 2 x the one prompt still lacking
    seam.observe(stages, stage_batch(second, [1, 1, 0, 0]), 1)  # none admitted; the stage cap reached
    commit = stages.next()
    assert commit.uids.tolist() == [0, 1] and stages.backfilled == 1  # backfilled in screening order


@pytest.mark.parametrize(
    ("pilot", "message"),
    [
        ({"rollout": 2}, r"unknown keys \['rollout'\]"),
        ({"rollouts": 0}, r"pilot.rollouts must be an integer >= 1"),
        ({"max_stages": 1}, r"pilot.max_stages must be an integer >= 2"),
        ({"keep": "yes"}, r"pilot.keep must be true"),
        ({"on_short": "shrink"}, r"on_short='shrink' is not one of raise, backfill"),
        ({"draw": {"mechanism": "mix"}}, r"pilot.draw is not supported yet"),
    ],
)
def test_bad_settings_are_refused_at_mount_naming_the_key(pilot, message):
    with pytest.raises(ConfigError, match=message):
        staged(pilot)


def test_pilot_rollouts_beyond_rollout_n_are_refused_with_the_fix():
    seam = staged({"rollouts": 8})
    with pytest.raises(ConfigError, match=r"pilot.rollouts=8 exceeds .*rollout.n=4"):
        seam.stages(2, rollout_n=4)


def test_a_host_without_the_seam_refuses_pilot_with_its_reason():
    host = HostCapabilities(
        name="oncehost",
        seams={LossWeights: SeamSupport(True), StagedGeneration: SeamSupport(False, "it generates once per step")},
        fields=HOST.fields,
    )
    with pytest.raises(IncompatibleComponentError, match="needs the host to generate a step's rollouts in stages.*"
                       "oncehost cannot: it generates once per step"):  # fmt: skip
        staged(host=host)


def test_keeping_pilot_rollouts_biases_the_trained_rewards_towards_mixed_outcomes():
    """Bernoulli(0.8) rewards: an admitted prompt's 2 pilot rollouts are one success and one failure (mean 0.5),
    so keeping them pulls the trained mean towards 0.5; the commit's rollouts, drawn after the decision, are not."""
    gen = torch.Generator().manual_seed(0)
    seam = staged({"prompts": 1, "rollouts": 2, "max_screened": 400}, batch_size=400, population=400)
    stages: PilotStages = seam.stages(400, rollout_n=8)
    asked = stages.next()
    pilot = torch.bernoulli(torch.full((800,), 0.8), generator=gen)
    seam.observe(stages, stage_batch(asked, pilot.tolist()), 1)
    admitted = stages.admitted.repeat_interleave(2)
    assert float(pilot[admitted].mean()) == 0.5 and abs(float(pilot.mean()) - 0.8) < 0.05
    commit = torch.bernoulli(torch.full((int(stages.admitted.sum()) * 6,), 0.8), generator=gen)
    assert abs(float(commit.mean()) - 0.8) < 0.05


def test_rows_that_lost_the_requested_integer_uids_are_named():
    seam = staged({"prompts": 1, "rollouts": 2})
    stages = seam.stages(2, rollout_n=4)
    stages.next()
    rows = rows_batch([2, 2, 2, 2], width=3, rewards=[1, 0, 1, 0], uid=["a", "a", "b", "b"])
    with pytest.raises(InvalidOutputError, match=r"uid \['a', 'a', 'b'\].*StageRequests.uids as their uid"):
        seam.observe(stages, rows, 1)
