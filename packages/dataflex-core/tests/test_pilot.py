"""``mechanism: pilot`` in the core: screening stages on groups of 2 with empty and padding rows, the commit's
requests, exact generation checked, settings checked at mount, a host without the seam refused, the
selection bias of keeping pilot rollouts on a known reward distribution, the per-prompt ledger every stage feeds
(resumed with the checkpoint), and ``pilot.draw`` through a curriculum (greso's effect is tested in
dataflex-curriculum's tests)."""

from __future__ import annotations

import pytest
import torch

from dataflex_core import ConfigError, IncompatibleComponentError, InvalidOutputError, register_scorer
from dataflex_core.ledger_file import COLUMNS as LEDGER_COLUMNS
from dataflex_core.mechanisms.pilot import PilotStages
from dataflex_core.session import DataFlexSession, StagedGeneration
from dataflex_core.step import FieldSupport, HostCapabilities, LossWeights, SeamSupport, TrainSampler
from dataflex_lab.testing import PromptDataset, rows_batch, run_staged_step
from dataflex_lab.testing.components import DomainPreferenceScorer, register_toy_components

register_toy_components("pilottest")

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


COMPUTE = "dataflex/compute/"


def staged(pilot=None, host=HOST, population=64, batch_size=4, block=None):
    flex = DataFlexSession({**PILOT, "pilot": pilot or {}, **(block or {})})
    flex.mount(host, loss_unit="token", adv_estimator="grpo", is_group_estimator=lambda name: True)
    seam = flex.seam(StagedGeneration)
    seam.prepare(population, batch_size=batch_size, seed=0)
    return seam


def stage_batch(asked, rewards, lengths=None, padding=1):
    """The rows a host generates for ``asked``: each uid's rollouts with these rewards, then padding rows."""
    uid = asked.uids.repeat_interleave(asked.counts).tolist() + [-1] * padding
    rewards = list(rewards) + [0.0] * padding
    lengths = (lengths or [2] * (len(rewards) - padding)) + [0] * padding
    return rows_batch(
        lengths, width=3, rewards=rewards, uid=uid, padding=[False] * (len(uid) - padding) + [True] * padding
    )


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


# -- the per-prompt ledger and pilot.draw -----------------------------------------------------------------


def prompts(count):
    """A train dataset whose prompt ids (column ``index``) are their rows, in ``domain`` x (even) or y (odd)."""
    return PromptDataset(range(count), {"domain": ["x" if i % 2 == 0 else "y" for i in range(count)]})


LEDGER_HOST = HostCapabilities(
    name="stagedhost", seams={**HOST.seams, TrainSampler: SeamSupport(True)}, fields=HOST.fields,
    timings=("pre_rollout", "post_reward", "post_advantage"), dataset_columns=True,
)  # fmt: skip
X_ONLY = {"mechanism": "curriculum", "prompt_key": "index", "scorer": {"name": "pilottest_x_only"},
          "actuator": {"name": "pilottest_proportional"}}  # fmt: skip


@register_scorer("pilottest_x_only")
class XOnly(DomainPreferenceScorer):
    """pre_rollout: a curriculum that draws only the prompts of domain x (the even ids)."""

    domain_scores, other_score = {"x": 1.0}, 0.0


def ledger_session(pilot=None, population=8, batch_size=2, **extra) -> DataFlexSession:
    block = {**PILOT, "pilot": pilot or {}, **({} if (pilot or {}).get("draw") else {"prompt_key": "index"}), **extra}
    flex = DataFlexSession(block)
    flex.mount(LEDGER_HOST, loss_unit="token", adv_estimator="grpo", is_group_estimator=lambda name: True)
    flex.train_sampler(prompts(population), batch_size=batch_size, seed=0)
    flex.seam(StagedGeneration).prepare(population, batch_size=batch_size, seed=0)
    return flex


def run_step(flex, step, reward_of):
    """One step through the seam (each stage with a padding row); the trained batch run; its stages and metrics."""
    return run_staged_step(flex, step, reward_of, padding=1)


def test_every_pilot_and_commit_rollout_feeds_the_ledger_and_a_resume_keeps_it(tmp_path):
    flex = ledger_session({"prompts": 2, "rollouts": 2}, population=8)
    # row 0 always solved (too easy), row 1 never (too hard), the others alternate (signal)
    reward = lambda prompt, k: 1.0 if prompt == 0 else 0.0 if prompt == 1 else float(k % 2)  # noqa: E731
    stages, metrics = run_step(flex, 1, reward)
    ledger = flex.ledger
    screened = stages.prompt
    rollouts = torch.zeros(8, dtype=torch.long)  # counted from the stages' requests
    for asked in stages.requests:
        rollouts.index_add_(0, asked.prompts, asked.counts)
    assert torch.equal(ledger.rollouts, rollouts) and int(rollouts.sum()) == metrics[f"{COMPUTE}rollouts_generated"]
    committed = stages.prompt[stages.committed]
    assert torch.equal(ledger.rollouts_trained[committed], torch.full((2,), 4))  # the kept pilots + the commit
    assert int(ledger.rollouts_trained.sum()) == metrics[f"{COMPUTE}rollouts_trained"]
    assert int(ledger.rollouts_filtered.sum()) == metrics[f"{COMPUTE}rollouts_filtered"]
    silent = screened[~stages.admitted]  # all-equal pilot rewards: recorded, not trained
    assert len(silent) and bool((ledger.rollouts_filtered[silent] == 2).all())
    assert bool((ledger.uniform_reward_streak[silent] == 1).all())
    assert ledger.successes[silent].tolist() == [2.0 if int(p) == 0 else 0.0 for p in silent]
    assert ledger.times_sampled[screened].tolist() == [1] * len(screened) and ledger.last_step == 1
    flex.save(tmp_path / "global_step_1", 1)
    resumed = ledger_session({"prompts": 2, "rollouts": 2}, population=8)
    resumed.restore(tmp_path / "global_step_1")
    assert torch.equal(resumed.ledger.rollouts, ledger.rollouts) and resumed.ledger.last_step == 1
    assert torch.equal(resumed.ledger.uniform_reward_streak, ledger.uniform_reward_streak)


def test_screening_only_records_the_pilots_of_committed_prompts_as_filtered():
    flex = ledger_session({"prompts": 1, "rollouts": 2, "keep": False}, population=8)
    stages, metrics = run_step(flex, 1, lambda prompt, k: float(k % 2))  # every prompt has signal
    committed = stages.prompt[stages.committed]
    assert flex.ledger.rollouts_trained[committed].tolist() == [4, 4]
    assert flex.ledger.rollouts_filtered[committed].tolist() == [2, 2]


def test_a_curriculum_drawing_the_prompts_screens_what_it_draws_and_is_fed_every_stage(tmp_path):
    flex = ledger_session({"prompts": 2, "rollouts": 2, "on_short": "backfill", "draw": X_ONLY}, population=8)
    sampler = flex.sampler
    stages, metrics = run_step(flex, 1, lambda prompt, k: float(k % 2) if prompt % 4 else 1.0)
    assert len(stages.prompt) and all(int(p) % 2 == 0 for p in stages.prompt)  # domain x only, as drawn
    history = flex.ledger
    assert history is sampler.history  # the curriculum's history is the ledger the stages feed
    rollouts = torch.zeros(8, dtype=torch.long)
    for asked in stages.requests:
        rollouts.index_add_(0, asked.prompts, asked.counts)
    assert torch.equal(history.rollouts, rollouts)
    assert metrics["dataflex/curriculum/prompts"] == float(len(stages.prompt.unique()))  # evicted ones too
    flex.save(tmp_path / "global_step_1", 1)
    resumed = ledger_session({"prompts": 2, "rollouts": 2, "on_short": "backfill", "draw": X_ONLY}, population=8)
    resumed.restore(tmp_path / "global_step_1")
    assert torch.equal(resumed.ledger.rollouts, history.rollouts)


@register_scorer("pilottest_sized_draw")
class SizedDraw(XOnly):
    """The x-only curriculum, sizing each draw after the first ``size`` prompts and recording what it was asked."""

    def __init__(self, size=None, **kwargs):
        super().__init__(**kwargs)
        self.size, self.asked = size, []

    def next_draw_size(self, **asked):
        self.asked.append(asked)
        return self.size


@pytest.mark.parametrize("carry", [None, {"max_off_steps": 2}], ids=["stages", "carry"])
@pytest.mark.parametrize(("size", "second"), [(1, 1), (None, 4)])
def test_a_drawing_curriculum_sizes_the_screening_stages_after_the_first(carry, size, second):
    """GRESO's sizing under ``pilot.draw``: the first screening stage explores ``prompts`` x the batch, a later one
    what the drawing scorer's ``next_draw_size`` says from the last stage (``None``: the default)."""
    draw = {**X_ONLY, "scorer": {"name": "pilottest_sized_draw", "params": {"size": size}}}
    pilot = {"prompts": 2, "rollouts": 2, "on_short": "backfill", "draw": draw}
    pilot.update({"max_stages": 3} if carry is None else {"carry": carry, "max_rounds": 2})
    flex = ledger_session(pilot, population=8)  # the first stage screens the 4 even rows, row 0 alone with signal
    stages, _ = run_step(flex, 1, lambda prompt, k: float(k % 2) if prompt == 0 else 1.0)
    first, *later = [explored for explored in stages.explored if len(explored)]
    default = 2 * (2 - int(stages.admitted[first].sum()) if carry is None else 2)  # x the lacking; carry: the batch
    assert len(first) == 4 and [len(explored) for explored in later] == [default if size is None else size]
    missing = 2 - int(stages.admitted[first].sum()) if carry is None else 2  # carry: before a round takes its commits
    silent = int((~stages.admitted[first]).sum())
    assert 0 < silent < 4  # the stage had prompts with signal and without
    assert flex.mechanism.draw.pipeline.scorer.asked == [
        {
            "missing_groups": missing,
            "zero_variance_groups": silent,
            "groups": 4,
            "rollout_n": 2,
            "default_size": default,
        }
    ]


def same_ledger(a, b) -> bool:
    return a.last_step == b.last_step and all(torch.equal(getattr(a, c), getattr(b, c)) for c in LEDGER_COLUMNS)


@pytest.mark.parametrize(("draw", "carry"), [(None, None), (X_ONLY, None), (None, {"max_off_steps": 2})])
def test_the_other_processes_record_the_main_processes_step(draw, carry):
    """A host with several processes runs the step on the main one and hands the others ``shared_state``: their
    ledger (or the drawing curriculum's history, which its draws read) must record the same step, and their survivor
    buffer hold what the main one's does (the draws on two TRL processes:
    packages/dataflex-trl/tests/test_distributed_rounds.py)."""
    pilot = {"prompts": 2, "rollouts": 2, "on_short": "backfill", **({} if draw is None else {"draw": draw})}
    pilot.update({} if carry is None else {"carry": carry})
    main, other = ledger_session(pilot, population=8), ledger_session(pilot, population=8)
    reward = lambda prompt, k: 1.0 if prompt % 4 == 0 else float(k % 2)  # noqa: E731
    for step in (1, 2):
        stages, _ = run_step(main, step, reward)
        other.load_shared_state(main.shared_state())
        assert int(main.ledger.rollouts.sum()) > 0 and same_ledger(main.ledger, other.ledger), step
        if carry is not None:
            buffer, copy = main.mechanism.buffer, other.mechanism.buffer
            assert len(buffer) > 0 and copy is not buffer, step
            assert torch.equal(copy.row, buffer.row) and torch.equal(copy.step, buffer.step), step
    if draw is not None:  # the history the other process's curriculum draws from
        assert other.ledger is other.sampler.history


def test_pilot_draw_needs_the_train_sampler_seam_and_is_checked():
    with pytest.raises(IncompatibleComponentError, match="stagedhost cannot"):
        staged({"draw": X_ONLY})  # HOST has no train sampler
    with pytest.raises(ConfigError, match="pilot.draw must be the block of the mechanism that draws the prompts"):
        staged({"draw": {"mechanism": "select"}})
    with pytest.raises(ConfigError, match="prompt_key='id' but dataflex.pilot.draw.prompt_key='index'"):
        ledger_session({"draw": X_ONLY}, prompt_key="id")
    with pytest.raises(ConfigError, match="ledger of mechanism pilot, which is keyed by dataflex.prompt_key"):
        staged({}, block={"success_threshold": 0.5})


def test_a_screening_stage_screens_each_prompt_once_when_its_draws_repeat_the_hosts_rows():
    from dataflex_core.mechanisms.pilot.settings import PilotSettings

    blocks = iter([[3, 1, 4], [1, 5, 9], [2, 6, 5]])  # the sampler's blocks repeat a row the host drew, and each other
    stages = PilotStages(2, 4, PilotSettings(prompts=3, rollouts=2), lambda: next(blocks), drawn=torch.tensor([1, 3]))
    asked = stages.next()
    assert asked.prompts.tolist() == [1, 3, 4, 5, 9, 2]  # the host's rows first, then the blocks' new rows in order
