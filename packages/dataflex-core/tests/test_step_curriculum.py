"""``mechanism: curriculum`` in the core: prompt ids, the history, the sampler's draws, mount checks, the feed."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from dataflex_core import (
    Batch,
    ConfigError,
    DeclarationError,
    IncompatibleComponentError,
    InvalidOutputError,
    Reweighter,
    Sampler,
    Scorer,
    get_registry,
    register_reweighter,
    register_scorer,
)
from dataflex_core.runner import mount_step
from dataflex_core.step import (
    CurriculumSampler,
    FieldSupport,
    HostCapabilities,
    LossWeights,
    PromptHistory,
    PromptIds,
    SeamSupport,
    TrainSampler,
)
from dataflex_lab.testing import register_toy_components, rows_batch

OBSERVED: list[tuple[int, dict]] = []


@register_scorer("curtest_column")
class ColumnScorer(Scorer):
    """The dataset column ``weight`` of each candidate, as its score."""

    timing = "pre_rollout"
    requires = ["weight"]

    def score(self, batch, step_id, **ctx):
        return torch.tensor([float(w) for w in batch.non_tensor_batch["weight"]])


@register_scorer("curtest_recording")
class RecordingScorer(Scorer):
    """Scores every candidate 1 and records what ``observe`` receives."""

    timing = "pre_rollout"
    requires = ["times_sampled"]

    def score(self, batch, step_id, **ctx):
        return torch.ones(len(batch))

    def observe(self, outcomes, step_id, **ctx):
        OBSERVED.append(
            (step_id, {k: v.tolist() for k, v in [*outcomes.batch.items(), *outcomes.non_tensor_batch.items()]})
        )


@register_scorer("curtest_nan")
class NaNScorer(Scorer):
    timing = "pre_rollout"

    def score(self, batch, step_id, **ctx):
        return torch.full((len(batch),), float("nan"))


@register_scorer("curtest_reads_advantages")
class TooEarlyScorer(Scorer):
    timing = "pre_rollout"
    requires = ["advantages"]


register_toy_components("curtest")  # the sampler curtest_proportional


HOST = HostCapabilities(
    name="testhost",
    seams={LossWeights: SeamSupport(True), TrainSampler: SeamSupport(True)},
    timings=("pre_rollout", "post_reward", "post_advantage"),
    fields={"rm_scores": FieldSupport(True), "advantages": FieldSupport(True)},
)


def block(scorer="curtest_column", sampler="curtest_proportional", **extra):
    return {"mechanism": "curriculum", "scorer": {"name": scorer}, "actuator": {"name": sampler}, **extra}


def curriculum(weights, *, batch_size=4, candidates=0, seed=0, **extra):
    """A mounted curriculum over ``len(weights)`` prompts with ids 100, 101, ... and a ``weight`` column."""
    step = mount_step(block(**extra), HOST, loss_unit="token")
    ids = PromptIds([100 + i for i in range(len(weights))], "index")
    history = PromptHistory(ids, step.mechanism.settings.success_threshold)
    sampler = CurriculumSampler(step, history, {"weight": list(weights)}, batch_size, seed=seed, candidates=candidates)
    step.sampler = sampler
    return step, sampler


def rollout(ids, rewards, lengths=None, padding=None):
    """A step's rows: ids per row (column ``index``), the reward on the last response token."""
    lengths = lengths if lengths is not None else [3] * len(ids)
    return rows_batch(lengths, width=3, rewards=rewards, padding=padding, columns={"index": ids})


# -- declarations and mount ----------------------------------------------------------------


def test_a_pre_rollout_scorer_scores_prompts_one_each():
    with pytest.raises(DeclarationError, match="granularity = 'prompt'"):

        class TokenBeforeRollout(Scorer):
            timing = "pre_rollout"
            granularity = "token"


def test_samplers_register_and_promise_no_floor_by_default():
    registered = get_registry().get("sampler", "curtest_proportional").cls
    assert issubclass(registered, Sampler) and registered.name == "curtest_proportional"
    assert Sampler().min_probability(10) == 0.0
    assert Scorer().observe(Batch({}), 1) is None  # the default records nothing


@pytest.mark.parametrize(
    ("config", "host", "error", "message"),
    [
        (block(sampler="curtest_plus"), HOST, IncompatibleComponentError, "is a reweighter, but this mechanism needs a sampler"),
        ({**block(), "mechanism": "reweight", "actuator": {"name": "curtest_plus"}}, HOST, IncompatibleComponentError,
         "timing='pre_rollout'.*only mechanism 'curriculum'"),
        (block("curtest_post"), HOST, IncompatibleComponentError, "needs the step's rollouts"),
        (block(), HostCapabilities(name="norun", seams={TrainSampler: SeamSupport(True)}), IncompatibleComponentError,
         "norun cannot run pre_rollout scorers"),
        (block(), HostCapabilities(name="fixed", timings=("pre_rollout",)), IncompatibleComponentError,
         "fixed cannot run pre_rollout"),
        (block("curtest_reads_advantages"), HOST, IncompatibleComponentError, r"requires \['advantages'\].*no responses yet"),
        (block(candidates=-1), HOST, ConfigError, "candidates must be an integer >= 0"),
        (block(prompt_key=""), HOST, ConfigError, r"prompt_key must be a non-empty string \(the dataset column"),
        (block(success_threshold="high"), HOST, ConfigError, "success_threshold must be a finite number"),
        ({"mechanism": "mix", "domains": ["a"], "prompt_key": "id", "scorer": {"name": "curtest_post"},
          "actuator": {"name": "static"}}, HOST, ConfigError, "read only by mechanism: curriculum"),
    ],
    ids=["wrong-actuator-kind", "pre-rollout-in-reweight", "post-scorer-in-curriculum", "host-without-timing",
         "host-without-resampling", "reads-rollout-fields", "bad-candidates", "bad-prompt-key", "bad-threshold",
         "stray-key"],
)  # fmt: skip
def test_mount_refuses_what_cannot_run_before_rollout(config, host, error, message):
    with pytest.raises(error, match=message):
        mount_step(config, host, loss_unit="token")


@register_scorer("curtest_post")
class PostScorer(Scorer):
    requires = ["rm_scores"]


@register_reweighter("curtest_plus")
class OnesReweighter(Reweighter):
    def act(self, scores, batch, **ctx):
        return torch.ones(len(scores))


def test_mount_reads_the_rewards_and_the_prompt_id_only():
    mounted = mount_step(block(prompt_key="uid_col", candidates=16, success_threshold=1), HOST, loss_unit="token")
    assert mounted.fields == ["response_mask", "rm_scores", "uid_col"]
    settings = mounted.mechanism.settings
    assert (settings.prompt_key, settings.candidates) == ("uid_col", 16)
    assert settings.success_threshold == 1.0


# -- prompt ids and history ------------------------------------------------------------------


def test_prompt_ids_map_rollout_ids_back_to_rows():
    ids = PromptIds([7, 3, 11], "index")
    assert ids.rows(np.array([11, 7, 7, 3], dtype=object)).tolist() == [2, 0, 0, 1]
    strings = PromptIds(["q-b", "q-a"], "problem")
    assert strings.rows(["q-a"]).tolist() == [1]
    with pytest.raises(ConfigError, match=r"prompt id\(s\) \[5\].*not ids of the train dataset"):
        ids.rows([3, 5])


def test_prompt_ids_must_be_unique():
    with pytest.raises(ConfigError, match=r"2 rows repeat an id \(e.g. \[0\]\).*unique"):
        PromptIds([0, 1, 0, 0], "index")


def test_history_records_a_step_by_prompt():
    history = PromptHistory(PromptIds([10, 11, 12], "index"))
    outcomes = history.record(torch.tensor([2, 2, 0, 2]), torch.tensor([1.0, 0.0, 0.5, 1.0]), step=4)
    assert outcomes.rows.tolist() == [0, 2]
    assert outcomes.rollouts.tolist() == [1, 3]
    assert outcomes.successes.tolist() == [0.5, 2.0]
    assert outcomes.reward_mean.tolist() == pytest.approx([0.5, 2 / 3])
    assert outcomes.uniform_reward.tolist() == [True, False]
    assert history.times_sampled.tolist() == [1, 0, 1]
    assert history.last_sampled_step.tolist() == [4, -1, 4]
    assert history.rollouts.tolist() == [1, 0, 3]
    assert history.last_success_rate.tolist() == pytest.approx([0.5, 0.0, 2 / 3])
    history.record(torch.tensor([2]), torch.tensor([0.0]), step=5)
    assert history.times_sampled.tolist() == [1, 0, 2]
    assert history.successes.tolist() == [0.5, 0.0, 2.0]
    assert history.reward_sum.tolist() == [0.5, 0.0, 2.0]
    assert history.last_step == 5
    assert history.seen_fraction == pytest.approx(2 / 3)


def test_successes_by_threshold_or_clipped_rewards():
    clipped = PromptHistory(PromptIds([0], "index"))
    outcomes = clipped.record(torch.tensor([0, 0, 0]), torch.tensor([-1.0, 0.25, 2.0]), step=1)
    assert outcomes.successes.tolist() == [1.25]
    assert outcomes.outside_unit == 2
    thresholded = PromptHistory(PromptIds([0], "index"), success_threshold=0.5)
    assert thresholded.record(torch.tensor([0, 0, 0]), torch.tensor([0.4, 0.5, 3.0]), 1).successes.tolist() == [2.0]


def test_history_state_round_trip_and_refusal_for_another_dataset():
    history = PromptHistory(PromptIds([1, 2, 3], "index"))
    history.record(torch.tensor([1, 1]), torch.tensor([1.0, 0.0]), step=2)
    restored = PromptHistory(PromptIds([1, 2, 3], "index"))
    restored.load_state_dict(history.state_dict())
    assert restored.rollouts.tolist() == [0, 2, 0] and restored.last_step == 2
    assert restored.fields(torch.tensor([1]), ["prompt_id", "successes"])["successes"].tolist() == [1.0]
    other = PromptHistory(PromptIds([3, 2, 1], "index"))
    with pytest.raises(ConfigError, match="other ids or in another order"):
        other.load_state_dict(history.state_dict())


# -- the sampler's draws -----------------------------------------------------------------------


def test_a_block_draws_each_prompt_floor_or_ceil_of_its_expected_count():
    weights = [6, 1, 1, 0, 2, 2, 0, 4]  # probabilities 6/16, 1/16, ... over 8 prompts; B = 4
    _, sampler = curriculum(weights, batch_size=4)
    expected = torch.tensor(weights, dtype=torch.float64) / 16 * 4
    for _ in range(50):
        block = sampler.next_block()
        counts = torch.bincount(torch.tensor(block), minlength=8).double()
        assert len(block) == 4
        assert torch.all(counts >= expected.floor()) and torch.all(counts <= expected.ceil())
    # over many blocks the frequencies follow the probabilities
    assert (sampler.draws.double() / 200).tolist() == pytest.approx((expected / 4).tolist(), abs=0.03)
    assert sampler.draw_metrics["dataflex/curriculum/draw/max_probability"] == pytest.approx(6 / 16)
    assert sampler.draw_metrics["dataflex/curriculum/draw/effective_fraction"] == pytest.approx(
        (1 / sum((w / 16) ** 2 for w in weights)) / 8
    )


def _blocks_by_the_first_rule(p, batch_size, seed, blocks):
    """Blocks as dataflex-core 0.3 drew them, written out: systematic counts (floors of the shifted cumulative
    expected counts) over the candidates in a random order, repeated per count, then shuffled."""
    gen = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(blocks):
        order = torch.randperm(len(p), generator=gen)
        expected = torch.cumsum(p[order] * batch_size, 0)
        expected[-1] = float(batch_size)
        offset = torch.rand((), generator=gen, dtype=torch.float64)
        counts = torch.floor(torch.cat([expected.new_zeros(1), expected]) + offset).diff().long()
        picks = order.repeat_interleave(counts)
        out.append(picks[torch.randperm(len(picks), generator=gen)].tolist())
    return out


@pytest.mark.parametrize(("weights", "batch_size"), [([6, 1, 1, 0, 2, 2, 0, 4], 4), ([5] * 3 + [1] * 97, 16)])
def test_a_block_is_the_first_rules_draw(weights, batch_size):
    """Picks found by binary search on the cumulative sum, an int32 random order: the same blocks, draw counts and
    repeats as the rule's per-candidate counts."""
    _, sampler = curriculum(weights, batch_size=batch_size, seed=9)
    p = torch.tensor(weights, dtype=torch.float64) / sum(weights)
    expected = _blocks_by_the_first_rule(p, batch_size, 9, 30)
    for reference in expected:
        assert sampler.next_block() == reference
        counts = torch.bincount(torch.tensor(reference), minlength=len(weights))
        assert sampler.draw_metrics["dataflex/curriculum/draw/repeated_prompts"] == float((counts > 1).sum())
    assert sampler.draws.tolist() == torch.bincount(torch.tensor(sum(expected, [])), minlength=len(weights)).tolist()


def test_candidates_cover_the_dataset_once_per_pass_without_repeats():
    _, sampler = curriculum([1.0] * 10, batch_size=2, candidates=4)
    seen = []
    for _ in range(5):  # 20 candidates: two full passes over 10 prompts
        rows = sampler.candidates()
        assert len(set(rows.tolist())) == 4
        seen += rows.tolist()
    assert sorted(seen) == sorted(list(range(10)) * 2)


def _candidates_by_the_first_rule(rows, candidates, seed, draws):
    """The candidate draws of dataflex-core 0.3's rule, written out: on a wrap, the pass's last rows, then the first
    rows of a new permutation not among them; the new pass is that permutation without the rows taken."""
    gen = torch.Generator().manual_seed(seed)
    order, cursor, out = torch.randperm(rows, generator=gen), 0, []
    for _ in range(draws):
        if cursor + candidates > len(order):
            rest = order[cursor:]
            fresh = torch.randperm(rows, generator=gen)
            taken = fresh[~torch.isin(fresh, rest)][: candidates - len(rest)]
            order, cursor = fresh[~torch.isin(fresh, taken)], 0
            out.append(torch.cat([rest, taken]).tolist())
        else:
            out.append(order[cursor : cursor + candidates].tolist())
            cursor += candidates
    return out


@pytest.mark.parametrize(("rows", "candidates"), [(10, 4), (37, 8), (50, 10), (23, 22), (9, 2)])
def test_a_pass_wrap_draws_the_same_candidates_as_the_first_rule(rows, candidates):
    """The wrap touches O(candidates) rows beyond its one permutation, and draws exactly what the rule drew."""
    _, sampler = curriculum([1.0] * rows, batch_size=2, candidates=candidates, seed=5)
    ours = [sampler.candidates().tolist() for _ in range(40)]
    assert ours == _candidates_by_the_first_rule(rows, candidates, 5, 40)


def test_a_resume_mid_pass_and_across_a_wrap_repeats_the_candidates():
    _, first = curriculum([1.0] * 37, batch_size=2, candidates=8, seed=3)
    for _ in range(6):  # past the first wrap (37 rows, 8 a draw), into the second pass
        first.candidates()
    state = first.state_dict()
    expected = [first.candidates().tolist() for _ in range(12)]  # two more wraps
    _, resumed = curriculum([1.0] * 37, batch_size=2, candidates=8, seed=0)
    resumed.load_state_dict(state)
    assert [resumed.candidates().tolist() for _ in range(12)] == expected


def test_candidates_must_hold_a_batch_and_fit_the_dataset():
    with pytest.raises(ConfigError, match="candidates=3 must lie between the prompts per batch \\(4\\)"):
        curriculum([1.0] * 10, batch_size=4, candidates=3)
    with pytest.raises(ConfigError, match="train dataset's 10 prompts"):
        curriculum([1.0] * 10, batch_size=4, candidates=11)


def test_draws_are_uniform_before_warmup():
    _, sampler = curriculum([100.0] + [0.0] * 7, batch_size=4, warmup_step=3)
    sampler.next_block()
    assert sampler.draw_metrics["dataflex/curriculum/draw/uniform"] == 1.0
    assert sampler.last_probabilities[1].tolist() == [1 / 8] * 8
    sampler.history.last_step = 2  # the next block is for step 3
    sampler.next_block()
    assert sampler.last_probabilities[1].tolist() == [1.0] + [0.0] * 7


def test_invalid_scores_raise_or_fall_back_to_a_uniform_draw():
    _, raising = curriculum([1.0] * 4, scorer="curtest_nan")
    with pytest.raises(InvalidOutputError, match="scorer curtest_nan returned 4 non-finite scores of 4 candidates"):
        raising.next_block()
    step, lenient = curriculum([1.0] * 4, scorer="curtest_nan", on_invalid="uniform")
    assert len(lenient.next_block()) == 4
    assert step.uniform_fallbacks == 1 and lenient.draw_metrics["dataflex/curriculum/draw/uniform"] == 1.0


@pytest.mark.parametrize(("weights", "message"), [([1.0, -1.0, 1.0, 1.0], "negative"), ([0.0] * 4, "non-finite")])
def test_probabilities_that_are_no_distribution_are_refused(weights, message):
    _, sampler = curriculum(weights)
    with pytest.raises(InvalidOutputError, match=f"sampler curtest_proportional.*not a distribution \\({message}"):
        sampler.next_block()


def test_the_sampler_resumes_the_same_draws():
    _, first = curriculum([3, 1, 2, 5, 1, 1, 4, 2], batch_size=3, candidates=4, seed=7)
    first.next_block()
    state = first.state_dict()
    expected = [first.next_block() for _ in range(4)]
    _, resumed = curriculum([3, 1, 2, 5, 1, 1, 4, 2], batch_size=3, candidates=4, seed=0)
    resumed.load_state_dict(state)
    assert [resumed.next_block() for _ in range(4)] == expected


def test_the_dataloader_sees_whole_blocks():
    _, sampler = curriculum([1.0] * 10, batch_size=4)
    assert len(sampler) == 8
    assert len(list(iter(sampler))) == 8


# -- feeding the history -----------------------------------------------------------------------


def test_the_step_feeds_real_rows_to_the_history_and_the_scorers_observe():
    OBSERVED.clear()
    step, sampler = curriculum([1.0] * 4, scorer="curtest_recording", batch_size=2)
    sampler.next_block()
    batch = rollout(
        [101, 101, 103, 103, 102, 100],
        [1.0, 0.0, 1.0, 1.0, 0.7, 0.3],
        lengths=[3, 3, 3, 3, 0, 3],  # prompt 102's only response is empty: it stays out
        padding=[False, False, False, False, False, True],  # the last row is framework padding
    )
    metrics = step.run(batch, 1).metrics
    assert sampler.history.rollouts.tolist() == [0, 2, 0, 2]
    assert sampler.history.successes.tolist() == [0.0, 1.0, 0.0, 2.0]
    ((seen_step, outcomes),) = OBSERVED
    assert seen_step == 1
    assert outcomes["prompt_index"] == [1, 3] and outcomes["prompt_id"] == [101, 103]
    assert outcomes["rollouts"] == [2, 2] and outcomes["successes"] == [1.0, 2.0]
    assert outcomes["uniform_reward"] == [False, True]
    assert metrics["dataflex/curriculum/prompts"] == 2.0
    assert metrics["dataflex/curriculum/success_rate"] == pytest.approx(0.75)
    assert metrics["dataflex/curriculum/uniform_reward_fraction"] == 0.5
    assert metrics["dataflex/curriculum/seen_fraction"] == 0.5
    assert metrics["dataflex/curriculum/draw/history_step"] == 0.0
    assert metrics["dataflex/active"] == 1.0
    # the next block is drawn for step 2 with the updated history in the candidates' batch
    sampler.next_block()
    assert sampler.draw_metrics["dataflex/curriculum/draw/history_step"] == 1.0
    assert sampler.draw_metrics["dataflex/curriculum/draw/unseen_share"] == pytest.approx(0.5)


def test_verls_empty_padding_rows_anywhere_feed_nothing():
    """verl V1's padding rows (an empty mask, junk elsewhere: here an id no dataset row has) stay out of the history
    as the same step without them would leave it."""
    histories = []
    for padding in (None, [True, False, False, True, False, False]):
        step, sampler = curriculum([1.0] * 4, batch_size=2)
        sampler.next_block()
        ids, rewards, lengths = [101, 101, 103, 103], [1.0, 0.0, 1.0, 1.0], [3, 3, 3, 3]
        if padding is not None:
            ids, rewards, lengths = [999, 101, 101, 999, 103, 103], [9.0, 1.0, 0.0, 9.0, 1.0, 1.0], [0, 3, 3, 0, 3, 3]
        metrics = step.run(rollout(ids, rewards, lengths=lengths, padding=padding), 1).metrics
        histories.append((sampler.history.rollouts.tolist(), sampler.history.successes.tolist(),
                          metrics["dataflex/curriculum/prompts"], metrics["dataflex/curriculum/success_rate"]))  # fmt: skip
    assert histories[0] == histories[1] == ([0, 2, 0, 2], [0.0, 1.0, 0.0, 2.0], 2.0, 0.75)


def test_the_step_names_a_missing_prompt_id_column():
    step, sampler = curriculum([1.0] * 2)
    batch = rollout([100], [1.0])
    batch.non_tensor_batch = {"other": batch.non_tensor_batch["index"]}
    with pytest.raises(ConfigError, match="prompt_key='index', but the step's rows do not carry it"):
        step.run(batch, 1)
