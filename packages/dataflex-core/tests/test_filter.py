"""``mechanism: filter`` in the core: whole-group admission, rounds until full, caps, surplus, short steps."""

from __future__ import annotations

import pytest
import torch

from dataflex_core import (
    ConfigError,
    IncompatibleComponentError,
    InvalidOutputError,
    Mixer,
    Selector,
    register_mixer,
    register_scorer,
    register_selector,
)
from dataflex_core.compute import COMPUTE_PREFIX
from dataflex_core.mechanisms.filter import AdmissionRounds, FilterSettings, RefillSampler
from dataflex_core.session import DataFlexSession, GenerationRounds
from dataflex_core.step import FieldSupport, HostCapabilities, LossWeights, SeamSupport, TrainSampler
from dataflex_lab.testing import PromptDataset, rows_batch
from dataflex_lab.testing.components import DomainPreferenceScorer, register_toy_components

register_toy_components("filtertest")


def refills_of(flex, population, batch_size, seed):
    """The refill sampler the host builds where it builds its dataloader (``GenerationRounds.prepare``)."""
    rounds = flex.seam(GenerationRounds)
    rounds.prepare(population, batch_size=batch_size, seed=seed)
    return rounds.refill_sampler()


HOST = HostCapabilities(
    name="testhost",
    seams={LossWeights: SeamSupport(True), GenerationRounds: SeamSupport(True)},
    fields={n: FieldSupport(True) for n in ("response_mask", "rm_scores", "uid")},
)
DAPO = {
    "mechanism": "filter",
    "scorer": {"name": "group_reward_variance"},
    "actuator": {"name": "threshold_band", "params": {"low": 0.0, "high": 1.0e9}},
}


@register_selector("filtertest_first_row")
class FirstRow(Selector):
    """Keeps row 0 only: part of a group, though it promises whole groups."""

    admits_groups = True

    def act(self, scores, batch, **ctx):
        return torch.tensor([0])


def session(block=DAPO, host=HOST) -> DataFlexSession:
    flex = DataFlexSession(block)
    flex.mount(host, loss_unit="token", adv_estimator="grpo", is_group_estimator=lambda name: True)
    return flex


def groups(rewards, lengths=None, offset=0):
    """One round: groups of two rows with these rewards (uid per group), 2 tokens per row unless given."""
    lengths = lengths or [2] * len(rewards)
    return rows_batch(lengths, width=3, rewards=rewards, uid=[offset + i // 2 for i in range(len(rewards))])


def test_groups_without_reward_variance_are_evicted_and_refills_fill_the_batch():
    flex = session()
    rounds = flex.seam(GenerationRounds).rounds(2)
    admitted = flex.seam(GenerationRounds).admit(
        rounds, groups([1.0, 1.0, 1.0, 0.0]), 1
    )  # group 0 solved, group 1 mixed
    assert admitted.tolist() == [False, True] and rounds.needs_refill
    flex.seam(GenerationRounds).admit(rounds, groups([0.0, 0.0, 0.0, 1.0], offset=10), 1)  # group 11 mixed: full now
    assert not rounds.needs_refill
    chosen = rounds.chosen()
    assert [c.tolist() for c in chosen] == [[1], [1]]
    trained = groups([1.0, 0.0, 0.0, 1.0])
    metrics = flex.run(trained, 1, generation=rounds).metrics
    assert metrics["dataflex/filter/trained_groups"] == 2.0 and metrics["dataflex/filter/admitted_fraction"] == 0.5
    assert metrics[f"{COMPUTE_PREFIX}rollouts_generated"] == 8.0  # both rounds' rows
    assert metrics[f"{COMPUTE_PREFIX}rollouts_filtered"] == 4.0 and metrics[f"{COMPUTE_PREFIX}tokens_generated"] == 16
    assert metrics[f"{COMPUTE_PREFIX}generation_rounds"] == 2.0 and metrics[f"{COMPUTE_PREFIX}refills"] == 1.0


def test_surplus_admitted_groups_are_dropped_in_generation_order():
    rounds = AdmissionRounds(2, FilterSettings())
    rounds.add(torch.tensor([True, False]), torch.tensor([2, 2]), torch.tensor([4, 4]))
    rounds.add(torch.tensor([True, True, True]), torch.tensor([2, 2, 2]), torch.tensor([4, 4, 4]))
    assert [c.tolist() for c in rounds.chosen()] == [[0], [0]]
    assert rounds.metrics(rounds.chosen())["dataflex/filter/surplus_groups"] == 2.0
    assert rounds.counts(rounds.chosen())["evicted_rollouts"] == 6


def test_caps_hold_and_a_short_step_raises_or_backfills():
    short = AdmissionRounds(3, FilterSettings(max_rounds=2))
    short.add(torch.tensor([False, True, False]), torch.full((3,), 2), torch.full((3,), 4))
    assert short.needs_refill
    short.add(torch.tensor([False, False, False]), torch.full((3,), 2), torch.full((3,), 4))
    assert not short.needs_refill  # max_rounds reached
    with pytest.raises(InvalidOutputError, match=r"admitted 1 of the 3 groups .* after 2 generation round\(s\)"):
        short.chosen()
    backfill = AdmissionRounds(3, FilterSettings(max_rounds=2, on_short="backfill"))
    for admitted in short.admitted:
        backfill.add(admitted, torch.full((3,), 2), torch.full((3,), 4))
    chosen = backfill.chosen()
    assert [c.tolist() for c in chosen] == [[0, 1, 2], []]  # evicted groups of the first round complete it
    assert backfill.metrics(chosen)["dataflex/filter/backfilled_groups"] == 2.0


def test_a_group_without_a_valid_row_is_never_admitted():
    flex = session({**DAPO, "actuator": {"name": "threshold_band", "params": {"low": -1.0, "high": 1.0e9}}})
    rounds = flex.seam(GenerationRounds).rounds(2)
    admitted = flex.seam(GenerationRounds).admit(rounds, groups([1.0, 0.0, 0.0, 0.0], lengths=[2, 2, 0, 0]), 1)
    assert admitted.tolist() == [True, False]


def test_a_selector_that_keeps_part_of_a_group_is_named():
    flex = session({**DAPO, "actuator": {"name": "filtertest_first_row"}})
    with pytest.raises(InvalidOutputError, match="kept part of 1 group.* admits or evicts whole groups"):
        flex.seam(GenerationRounds).admit(flex.seam(GenerationRounds).rounds(2), groups([1.0, 0.0, 1.0, 0.0]), 1)


@register_selector("filtertest_top_row")
class TopRow(Selector):
    """Keeps the best-scored row, and promises nothing about groups."""

    def act(self, scores, batch, **ctx):
        return torch.tensor([int(scores.argmax())])


def test_a_selector_that_does_not_promise_whole_groups_is_refused_at_mount():
    with pytest.raises(
        IncompatibleComponentError, match="filtertest_top_row does not declare admits_groups.*threshold_band"
    ):
        session({**DAPO, "actuator": {"name": "filtertest_top_row"}})


def test_a_host_that_cannot_refill_refuses_filter_with_its_reason():
    host = HostCapabilities(
        name="otherhost",
        seams={GenerationRounds: SeamSupport(False, "it generates once per step")},
        fields=HOST.fields,
    )
    with pytest.raises(IncompatibleComponentError, match="otherhost cannot refill: it generates once per step"):
        session(host=host)


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"max_rounds": 0}, "max_rounds must be an integer >= 1"),
        ({"on_short": "shrink"}, "on_short='shrink' is not one of raise, backfill"),
        ({"max_round": 2}, r"unknown keys \['max_round'\]"),
    ],
)
def test_filter_settings_are_checked(settings, message):
    with pytest.raises(ConfigError, match=message):
        session({**DAPO, "filter": settings})


def test_refills_are_deterministic_given_the_seed_and_resume_where_they_stopped():
    first = RefillSampler(10, 4, seed=3)
    drawn = [first.next_block() for _ in range(2)]
    assert drawn == [RefillSampler(10, 4, seed=3).next_block(), drawn[1]] and len(set(drawn[0] + drawn[1])) == 8
    state = first.state_dict()
    expected = first.next_block()
    resumed = RefillSampler(10, 4, seed=0)
    resumed.load_state_dict(state)
    assert resumed.next_block() == expected


def test_the_refill_pass_is_a_tensor_in_the_state_and_resumes_the_same_draws():
    sampler = RefillSampler(10, 4, seed=5)
    sampler.next_block()
    state = sampler.state_dict()
    assert isinstance(state["pass"], torch.Tensor) and state["pass"].dtype == torch.long
    assert sorted(state["pass"].tolist()) == list(range(10)) and state["cursor"] == 4  # the pass, 4 rows taken
    expected = [sampler.next_block() for _ in range(3)]  # crosses into the next pass
    resumed = RefillSampler(10, 4, seed=0)
    resumed.load_state_dict({**state, "pass": state["pass"].tolist()})  # a list of rows is read as a tensor
    assert [resumed.next_block() for _ in range(3)] == expected


def prompts(ids):
    """A train dataset of prompts with ids in column ``index`` and their ``domain`` (x for even ids, else y)."""
    ids = list(ids)
    return PromptDataset(ids, {"domain": ["x" if i % 2 == 0 else "y" for i in ids]})


@register_mixer("filtertest_prefer_x")
class PreferX(Mixer):
    def act(self, scores, batch, **ctx):
        return torch.tensor([0.75, 0.25])


@register_scorer("filtertest_x_only")
class XOnly(DomainPreferenceScorer):
    """pre_rollout: a curriculum that draws only the prompts of domain x."""

    domain_scores, other_score = {"x": 1.0}, 0.0


def ledger_session(**extra) -> DataFlexSession:
    flex = session({**DAPO, "prompt_key": "index", **extra}, host=HostCapabilities(
        name="testhost", seams={LossWeights: SeamSupport(True), GenerationRounds: SeamSupport(True)}, dataset_columns=True, fields=HOST.fields,
    ))  # fmt: skip
    assert flex.train_sampler(prompts([10, 11, 12, 13]), batch_size=2, seed=0) is None  # the host's own order
    return flex


def test_every_rounds_rollouts_feed_the_ledger_and_match_the_compute_counters(tmp_path):
    flex = ledger_session()
    rounds = flex.seam(GenerationRounds).rounds(1)
    solved = rows_batch([2, 3], width=3, rewards=[1.0, 1.0], uid=[0, 0], columns={"index": [10, 10]})
    flex.seam(GenerationRounds).admit(rounds, solved, 1)  # evicted: no reward variance
    mixed = rows_batch(
        [2, 0, 1, 2], width=3, rewards=[1.0, 0.0, 0.0, 1.0], uid=[5, 5, 5, 6], padding=[False, False, False, True],
        columns={"index": [11, 11, 11, 12]},
    )  # fmt: skip  # prompt 11: an empty response and one of each reward; row 3 is framework padding
    flex.seam(GenerationRounds).admit(rounds, mixed, 1)
    trained = rows_batch([2, 0, 1], width=3, rewards=[1.0, 0.0, 0.0], uid=[5, 5, 5], columns={"index": [11] * 3})
    metrics = flex.run(trained, 1, generation=rounds).metrics
    ledger = flex.ledger
    assert ledger.rollouts.tolist() == [2, 2, 0, 0]  # the empty response and the padding row are left out
    assert ledger.rollouts_trained.tolist() == [0, 2, 0, 0] and ledger.rollouts_filtered.tolist() == [2, 0, 0, 0]
    assert ledger.tokens_generated.tolist() == [5, 3, 0, 0] and ledger.uniform_reward_steps.tolist() == [1, 0, 0, 0]
    assert int(ledger.tokens_generated.sum()) == metrics[f"{COMPUTE_PREFIX}tokens_generated"]
    assert int(ledger.rollouts_filtered.sum()) == metrics[f"{COMPUTE_PREFIX}rollouts_filtered"]
    assert int(ledger.rollouts_trained.sum()) == metrics[f"{COMPUTE_PREFIX}rollouts_trained"]
    assert int(ledger.rollouts.sum()) == metrics[f"{COMPUTE_PREFIX}rollouts_generated"] - 1  # the empty response
    flex.save(tmp_path / "global_step_1", 1)
    warm = ledger_session(ledger={"load": str(tmp_path / "global_step_1")})  # the checkpoint folder
    assert torch.equal(warm.ledger.rollouts, ledger.rollouts)
    resumed = ledger_session()
    resumed.restore(tmp_path / "global_step_1")
    assert torch.equal(resumed.ledger.rollouts_filtered, ledger.rollouts_filtered) and resumed.ledger.last_step == 1


def test_skip_constant_keeps_a_prompt_of_constant_groups_out_of_later_refills(tmp_path):
    """``filter.skip_constant: 2``: once the ledger counts two constant groups in a row for a prompt, the refills
    never draw it again (counted in the step's metrics, kept in the checkpoint)."""
    flex = ledger_session(filter={"skip_constant": 2})
    refill = refills_of(flex, 4, 1, 0)
    skipped = []
    for step in (1, 2):
        rounds = flex.seam(GenerationRounds).rounds(1)
        constant = rows_batch([2, 2], width=3, rewards=[1.0, 1.0], uid=[0, 0], columns={"index": [10, 10]})
        mixed = rows_batch([2, 2], width=3, rewards=[1.0, 0.0], uid=[1, 1], columns={"index": [11, 11]})
        flex.seam(GenerationRounds).admit(rounds, constant, step)
        flex.seam(GenerationRounds).admit(rounds, mixed, step)
        metrics = flex.run(mixed, step, generation=rounds).metrics
        skipped.append(metrics["dataflex/filter/skipped_constant_prompts"])
    assert skipped == [0.0, 1.0] and refill.evicted.tolist() == [0]  # prompt 10 is row 0
    assert 0 not in [row for _ in range(12) for row in refill.next_block()]
    flex.save(tmp_path / "global_step_2", 2)
    resumed = ledger_session(filter={"skip_constant": 2})
    refills_of(resumed, 4, 1, 0)
    resumed.restore(tmp_path / "global_step_2")
    assert resumed.mechanism.refill.evicted.tolist() == [0]
    with pytest.raises(ConfigError, match="skip_constant=2 reads each prompt's streak .* set dataflex.prompt_key"):
        session({**DAPO, "filter": {"skip_constant": 2}})
    with pytest.raises(ConfigError, match="skip_constant=2 does not apply with filter.draw"):
        session({**DAPO, "prompt_key": "index", "filter": {"draw": DRAW_CURRICULUM, "skip_constant": 2}}, DRAW_HOST)


def test_the_filters_ledger_needs_its_prompt_key():
    with pytest.raises(ConfigError, match="keyed by dataflex.prompt_key; set prompt_key"):
        session({**DAPO, "ledger": {"load": "x.parquet"}})
    with pytest.raises(ConfigError, match=r"dataflex.prompt_key must be a non-empty string or null \(the data.*got ''"):
        session({**DAPO, "prompt_key": ""})


#: DAPO's filter with the prompts drawn by a mixture or a curriculum.
DRAW_MIX = {"mechanism": "mix", "scorer": {"name": "filtertest_reward"}, "actuator": {"name": "filtertest_prefer_x"},
            "domains": ["x", "y"], "domain_key": "domain"}  # fmt: skip
DRAW_CURRICULUM = {"mechanism": "curriculum", "prompt_key": "index", "scorer": {"name": "filtertest_x_only"},
                   "actuator": {"name": "filtertest_proportional"}}  # fmt: skip
DRAW_HOST = HostCapabilities(
    name="testhost", seams={LossWeights: SeamSupport(True), GenerationRounds: SeamSupport(True), TrainSampler: SeamSupport(True)}, timings=("pre_rollout", "post_reward", "post_advantage"),
    fields=HOST.fields,
)  # fmt: skip


def draw_session(draw, **extra) -> DataFlexSession:
    return session({**DAPO, "filter": {"draw": draw}, **extra}, host=DRAW_HOST)


def test_a_mix_drawing_the_prompts_gives_the_refills_and_learns_from_the_trained_batch():
    flex = draw_session(DRAW_MIX)
    sampler = flex.train_sampler(prompts(range(8)), batch_size=2, seed=0)
    assert refills_of(flex, 8, 2, 0) is sampler
    assert "domain" in flex.fields and "domain" in flex.dataset_columns()
    rounds = flex.seam(GenerationRounds).rounds(1)
    flex.seam(GenerationRounds).admit(
        rounds, rows_batch([2, 2], width=3, rewards=[1.0, 0.0], uid=[0, 0], columns={"domain": ["x", "x"]}), 1
    )
    trained = rows_batch([2, 2], width=3, rewards=[1.0, 0.0], uid=[0, 0], columns={"domain": ["x", "x"]})
    metrics = flex.run(trained, 1, generation=rounds).metrics
    assert sampler.proportions.tolist() == [0.75, 0.25] and metrics["dataflex/mix/proportion/x"] == 0.75
    assert "prompts drawn by mix" in flex.describe()


def test_a_curriculum_drawing_the_prompts_is_fed_every_round_and_its_state_round_trips(tmp_path):
    flex = draw_session(DRAW_CURRICULUM)
    sampler = flex.train_sampler(prompts(range(8)), batch_size=2, seed=0)
    refills = refills_of(flex, 8, 2, 0)
    assert refills is sampler and all(i % 2 == 0 for _ in range(4) for i in refills.next_block())  # x only
    rounds = flex.seam(GenerationRounds).rounds(1)
    evicted = rows_batch([2, 2], width=3, rewards=[1.0, 1.0], uid=[0, 0], columns={"index": [2, 2]})
    admitted = rows_batch([2, 2], width=3, rewards=[1.0, 0.0], uid=[1, 1], columns={"index": [4, 4]})
    flex.seam(GenerationRounds).admit(rounds, evicted, 1)
    flex.seam(GenerationRounds).admit(rounds, admitted, 1)
    metrics = flex.run(admitted, 1, generation=rounds).metrics
    history = flex.ledger
    assert history is sampler.history and history.rollouts_filtered[2] == 2 and history.rollouts_trained[4] == 2
    assert metrics["dataflex/curriculum/prompts"] == 2.0  # the evicted prompt was observed too
    assert flex.mechanism.draw.pipeline.scorer.observed == 1
    flex.save(tmp_path / "global_step_1", 1)
    resumed = draw_session(DRAW_CURRICULUM)
    resumed.train_sampler(prompts(range(8)), batch_size=2, seed=0)
    resumed.restore(tmp_path / "global_step_1")
    assert torch.equal(resumed.ledger.rollouts, history.rollouts)
    assert resumed.mechanism.draw.pipeline.scorer.observed == 1  # role draw_scorer


@register_scorer("filtertest_sized_draw")
class SizedDraw(XOnly):
    """A curriculum of domain x that sizes each refill round ``size`` prompts and records what it was asked."""

    def __init__(self, size=None, **kwargs):
        super().__init__(**kwargs)
        self.size, self.asked = size, []

    def next_draw_size(self, **asked):
        self.asked.append(asked)
        return self.size


@pytest.mark.parametrize(("size", "drawn"), [(3, 3), (1, 1), (None, 2)])
def test_the_rounds_ask_the_drawing_curriculum_for_the_refills_size(size, drawn):
    """After a short round the seam hands the host the rows of a refill of the scorer's size (``None``: the batch's),
    drawn by the curriculum; the scorer sees what the round left missing and its zero-variance groups."""
    flex = draw_session({**DRAW_CURRICULUM, "scorer": {"name": "filtertest_sized_draw", "params": {"size": size}}})
    flex.train_sampler(prompts(range(8)), batch_size=2, seed=0)
    seam = flex.seam(GenerationRounds)
    rounds = seam.rounds(2)
    seam.admit(rounds, rows_batch([2] * 4, width=3, rewards=[1.0, 1.0, 1.0, 0.0], uid=[0, 0, 1, 1],
                                  columns={"index": [2, 2, 4, 4]}), 1)  # fmt: skip
    rows = seam.refill_rows(rounds)
    assert len(rows) == drawn and all(i % 2 == 0 for i in rows)  # the curriculum's draw (x only)
    asked = flex.mechanism.draw.pipeline.scorer.asked
    assert asked == [{"missing_groups": 1, "zero_variance_groups": 1, "groups": 2, "rollout_n": 2, "default_size": 2}]
    seam.admit(rounds, rows_batch([2, 2], width=3, rewards=[1.0, 0.0], uid=[5, 5], columns={"index": [6, 6]}), 1)
    assert not rounds.needs_refill and rounds.refill_size is None and len(asked) == 1  # full: not asked again


@pytest.mark.parametrize("size", [0, 9, 2.5, True])
def test_a_refill_size_outside_the_dataset_is_the_scorers_invalid_output(size):
    def short_round(on_invalid):
        draw = {**DRAW_CURRICULUM, "scorer": {"name": "filtertest_sized_draw", "params": {"size": size}}}
        flex = draw_session(draw, on_invalid=on_invalid)
        flex.train_sampler(prompts(range(8)), batch_size=2, seed=0)
        rounds = flex.seam(GenerationRounds).rounds(1)
        solved = rows_batch([2, 2], width=3, rewards=[1.0, 1.0], uid=[0, 0], columns={"index": [2, 2]})
        flex.seam(GenerationRounds).admit(rounds, solved, 1)
        return flex, rounds

    with pytest.raises(InvalidOutputError, match=rf"filtertest_sized_draw.* gave next_draw_size {size!r} at step 1; "
                       r"a refill round draws a whole number of prompts from 1 to the train dataset's 8"):  # fmt: skip
        short_round("raise")
    flex, rounds = short_round("uniform")  # the batch's size instead, with a warning
    assert rounds.refill_size is None and len(flex.seam(GenerationRounds).refill_rows(rounds)) == 2


@pytest.mark.parametrize(
    ("draw", "extra", "message"),
    [
        ({"mechanism": "select"}, {}, "filter.draw must be the block of the mechanism that draws the prompts"),
        (DRAW_CURRICULUM, {"prompt_key": "id"}, "prompt_key='id' but dataflex.filter.draw.prompt_key='index'"),
        ({**DRAW_CURRICULUM, "actuator": {"name": "nope"}}, {}, "'nope'"),
    ],
)
def test_filter_draw_is_checked(draw, extra, message):
    with pytest.raises(ConfigError, match=message):
        draw_session(draw, **extra)


def test_a_refill_block_that_runs_into_a_new_pass_repeats_no_row_and_each_pass_visits_every_row_once():
    for seed in range(20):
        sampler = RefillSampler(7, 3, seed=seed)
        blocks = [sampler.next_block() for _ in range(14)]  # 42 rows: 6 whole passes, most blocks straddling two
        assert all(len(set(block)) == 3 for block in blocks), seed
        rows = [row for block in blocks for row in block]
        assert all(sorted(rows[i : i + 7]) == list(range(7)) for i in range(0, 42, 7)), seed
