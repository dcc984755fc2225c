"""``mechanism: filter`` on TRL's real GRPOTrainer: rounds until every group has reward variance, batch kept full."""

from __future__ import annotations

import os

import pytest
import torch
from trl_testkit import NUM_GENERATIONS, PROMPTS_PER_STEP, generate, loss_and_grads

from dataflex_core import IncompatibleComponentError, register_scorer
from dataflex_core.ledger import read_ledger
from dataflex_core.mechanisms.filter import RefillSampler
from dataflex_core.session import GenerationRounds
from dataflex_lab.testing.components import DomainPreferenceScorer

#: DAPO's dynamic sampling: admit groups whose rewards vary (variance > 0).
DAPO = {
    "mechanism": "filter",
    "scorer": {"name": "group_reward_variance"},
    "actuator": {"name": "threshold_band", "params": {"low": 0.0, "high": 1.0e9}},
    "filter": {"max_rounds": 8},
}
#: Every group admitted: the filter must leave TRL's batch as it is.
ADMIT_ALL = {**DAPO, "actuator": {"name": "threshold_band", "params": {"low": -1.0, "high": 1.0e9}}}


@register_scorer("trltest_vowels_only")
class VowelsOnly(DomainPreferenceScorer):
    """pre_rollout: 1 for vowel prompts, 0 for the others: a curriculum that admits only the vowel prompts."""

    domain_scores, other_score = {"vowel": 1.0}, 0.0


#: DAPO's filter with the prompts (the dataloader's and every refill's) drawn by that curriculum.
DAPO_CURRICULUM = {
    **DAPO,
    "filter": {
        "max_rounds": 8,
        "draw": {
            "mechanism": "curriculum",
            "prompt_key": "index",
            "scorer": {"name": "trltest_vowels_only"},
            "actuator": {"name": "trltest_proportional"},
        },  # fmt: skip
    },
}


def split_reward(completions, index, **_):
    """Even prompt ids: reward 1 for every completion (no GRPO signal); odd: 0, 1, 0, 1 within the group."""
    return [1.0 if int(i) % 2 == 0 else float(j % 2) for j, i in enumerate(index)]


def recording(trainer):
    """Record every generation batch TRL trains on: its output, its prompt ids and its rewards."""
    seen = []
    original = trainer._generate_and_score_completions

    def wrapped(inputs):
        output = original(inputs)
        seen.append((output, trainer._dataflex_rewards_per_func.clone()))
        return output

    trainer._generate_and_score_completions = wrapped
    return seen


def test_every_trained_batch_is_full_of_groups_with_reward_variance(make_trainer):
    trainer = make_trainer("dapo", {**DAPO, "prompt_key": "index"}, reward=split_reward, max_steps=3)
    seen = recording(trainer)
    trainer.train()
    assert len(seen) == 3
    for output, rewards in seen:
        assert len(output["advantages"]) == PROMPTS_PER_STEP * NUM_GENERATIONS  # the batch stays full
        groups = rewards.sum(1).view(PROMPTS_PER_STEP, NUM_GENERATIONS)
        assert bool((groups.var(1) > 0).all()), groups  # no zero-variance group is trained on
        mask = output["completion_mask"]
        assert int(output["num_items_in_batch"]) == int(mask.sum())  # recounted over the merged batch
        assert output["prompt_ids"].shape[0] == mask.shape[0] == len(output["advantages"])
    logged = [e for e in trainer.state.log_history if "dataflex/compute/generation_rounds" in e]
    rounds = [e["dataflex/compute/generation_rounds"] for e in logged]
    assert max(rounds) > 1  # half the prompts give no signal: refills were needed
    assert all(e["dataflex/compute/refills"] == e["dataflex/compute/generation_rounds"] - 1 for e in logged)
    totals = trainer.dataflex.compute_totals.totals
    assert totals["rollouts_generated"] == sum(rounds) * PROMPTS_PER_STEP * NUM_GENERATIONS
    assert totals["rollouts_trained"] == 3 * PROMPTS_PER_STEP * NUM_GENERATIONS
    assert totals["rollouts_filtered"] == totals["rollouts_generated"] - totals["rollouts_trained"]
    assert totals["rollouts_wasted"] == 0  # every trained group has signal
    ledger = trainer.dataflex.ledger  # every round's rollouts, evicted groups included, per prompt
    for name in ("rollouts_trained", "rollouts_filtered", "tokens_generated"):
        assert int(getattr(ledger, name).sum()) == totals[name], name
    assert int(ledger.rollouts.sum()) == totals["rollouts_generated"]
    assert torch.equal(ledger.rollouts, ledger.rollouts_trained + ledger.rollouts_filtered)
    even = torch.as_tensor([int(i) % 2 == 0 for i in ledger.ids.values.tolist()])
    assert int(ledger.rollouts[even].sum()) > 0  # prompts without signal were generated ...
    assert int(ledger.rollouts_trained[even].sum()) == 0  # ... and never trained on
    assert torch.equal(ledger.uniform_reward_steps[even], ledger.times_sampled[even])
    assert int(ledger.uniform_reward_steps[~even].sum()) == 0


def test_the_filters_ledger_survives_a_resume_and_warm_starts_another_run(make_trainer):
    block = {**DAPO, "prompt_key": "index"}
    first = make_trainer("dapo", block, reward=split_reward, max_steps=2, save_strategy="steps", save_steps=2)
    first.train()
    saved = first.dataflex.ledger
    checkpoint = os.path.join(first.args.output_dir, "checkpoint-2")
    assert not [name for name in os.listdir(checkpoint) if "ledger" in name]  # once, in the component state
    exported = os.path.join(first.args.output_dir, "ledger.parquet")
    assert first.dataflex.export_ledger(exported)  # the explicit export (the run ended at the checkpoint's step)
    header, rows = read_ledger(exported)  # every round's rollouts per prompt
    assert sum(row["rollouts"] for row in rows) == int(saved.rollouts.sum()) > 2 * PROMPTS_PER_STEP * NUM_GENERATIONS
    assert sum(row["rollouts_filtered"] for row in rows) == int(saved.rollouts_filtered.sum()) > 0
    before = {name: getattr(saved, name).clone() for name in ("rollouts", "rollouts_trained", "rollouts_filtered")}

    resumed = make_trainer("dapo", block, reward=split_reward, max_steps=3, save_strategy="no")
    resumed.train(resume_from_checkpoint=True)
    ledger, totals = resumed.dataflex.ledger, resumed.dataflex.compute_totals.totals
    assert ledger.last_step == 3
    assert int(ledger.rollouts_trained.sum()) == 3 * PROMPTS_PER_STEP * NUM_GENERATIONS  # continued, one step more
    for name, counts in before.items():
        assert bool((getattr(ledger, name) >= counts).all()), name  # nothing of the first run's lost
        total = totals["rollouts_generated" if name == "rollouts" else name]
        assert int(getattr(ledger, name).sum()) == total, name  # and the totals continued with it

    warm = make_trainer("dapo", {**block, "ledger": {"load": checkpoint}}, reward=split_reward, max_steps=1)
    warm.train()  # a new run (no checkpoint) that starts from the checkpoint's ledger
    grown = warm.dataflex.ledger
    assert (
        int(grown.rollouts.sum())
        == int(before["rollouts"].sum()) + warm.dataflex.compute_totals.totals["rollouts_generated"]
    )
    assert bool((grown.rollouts_filtered >= before["rollouts_filtered"]).all())


def test_refills_come_from_the_seeded_refill_sampler(make_trainer, dataset):
    trainer = make_trainer("dapo", DAPO, reward=split_reward, max_steps=2)
    steps = []
    original = trainer._dataflex_rounds

    def wrapped(seam, inputs, output, step):
        merged_inputs, merged, rounds = original(seam, inputs, output, step)
        steps.append(({row["index"] for row in inputs}, [row["index"] for row in merged_inputs], rounds.rounds))
        return merged_inputs, merged, rounds

    trainer._dataflex_rounds = wrapped
    trainer.train()
    replay = RefillSampler(len(dataset), PROMPTS_PER_STEP, seed=trainer.args.seed)
    assert sum(rounds - 1 for _, _, rounds in steps) > 0
    for first_round, trained, rounds in steps:
        drawn = {int(dataset[i]["index"]) for _ in range(rounds - 1) for i in replay.next_block()}
        assert set(trained) <= first_round | drawn  # every trained prompt: TRL's own draw or a refill's
        assert all(int(i) % 2 == 1 for i in trained)  # and only prompts with reward variance
    state, expected = trainer.dataflex.seam(GenerationRounds).refill_sampler().state_dict(), replay.state_dict()
    assert state.keys() == expected.keys()
    for key, value in expected.items():  # the generator and the rest of the pass are tensors
        assert torch.equal(state[key], value) if isinstance(value, torch.Tensor) else state[key] == value, key


def test_refills_come_from_the_curriculum_that_draws_the_prompts_deterministically(make_trainer, dataset):
    def run():
        generated = []

        def reward(completions, index, domain, **_):
            generated.append([(int(i), d) for i, d in zip(index, domain)])
            return split_reward(completions, index)

        trainer = make_trainer("dapo", DAPO_CURRICULUM, reward=reward, max_steps=2)
        trainer.train()
        return trainer, generated

    trainer, generated = run()
    totals = trainer.dataflex.compute_totals.totals
    assert totals["refills"] > 0 and len(generated) == 2 + totals["refills"]  # one reward call per round
    assert all(d == "vowel" for batch in generated for _, d in batch)  # TRL's draws and every refill's
    history = trainer.dataflex.ledger  # the curriculum's history, fed with every round
    assert int(history.rollouts.sum()) == totals["rollouts_generated"]
    assert int(history.rollouts_filtered.sum()) == totals["rollouts_filtered"] > 0
    assert trainer.dataflex.mechanism.draw.pipeline.scorer.observed == 2  # its observe saw every step
    _, again = run()
    assert again == generated  # the same prompts in the same rounds given the seed


@register_scorer("trltest_vowels_sized")
class VowelsSized(VowelsOnly):
    """The vowel curriculum, sizing every refill round 3 prompts (``Scorer.next_draw_size``)."""

    def next_draw_size(self, **asked):
        return 3


def test_a_refill_round_has_as_many_prompts_as_the_drawing_scorer_sizes_it(make_trainer):
    rounds = []

    def reward(completions, index, **_):
        rounds.append(len(index) // NUM_GENERATIONS)
        return split_reward(completions, index)

    draw = {**DAPO_CURRICULUM["filter"]["draw"], "scorer": {"name": "trltest_vowels_sized"}}
    trainer = make_trainer("dapo", {**DAPO, "filter": {"max_rounds": 8, "draw": draw}}, reward=reward, max_steps=2)
    trainer.train()
    totals = trainer.dataflex.compute_totals.totals
    assert totals["refills"] > 0 and len(rounds) == 2 + totals["refills"]
    assert sorted(rounds, reverse=True) == [PROMPTS_PER_STEP] * 2 + [3] * totals["refills"]  # TRL's draws, refills
    assert totals["rollouts_trained"] == 2 * PROMPTS_PER_STEP * NUM_GENERATIONS  # every batch full
    assert totals["rollouts_generated"] == sum(rounds) * NUM_GENERATIONS  # every round counted at its size


def test_admitting_every_group_leaves_trls_batch_and_loss_as_they_are(make_trainer, generation_inputs):
    plain = make_trainer("dapo")
    flex = make_trainer("dapo", ADMIT_ALL)
    out_plain = generate(plain, generation_inputs)
    out_flex = generate(flex, generation_inputs)
    for key in ("completion_ids", "completion_mask", "advantages", "num_items_in_batch"):
        assert torch.equal(out_plain[key], out_flex[key]), key
    loss_plain, grads_plain = loss_and_grads(plain, out_plain)
    loss_flex, grads_flex = loss_and_grads(flex, out_flex)
    assert torch.equal(loss_plain, loss_flex)
    assert all(torch.equal(grad, grads_flex[name]) for name, grad in grads_plain.items())
    metrics = flex._metrics["train"]
    assert metrics["dataflex/compute/generation_rounds"] == [1.0] and metrics["dataflex/filter/trained_groups"] == [4.0]


def test_a_step_still_short_after_max_rounds_stops_with_the_caps(make_trainer, generation_inputs):
    never = {
        **DAPO,
        "actuator": {"name": "threshold_band", "params": {"low": 5.0, "high": 6.0}},
        "filter": {"max_rounds": 2},
    }
    trainer = make_trainer("dapo", never)
    with pytest.raises(Exception, match=r"admitted 0 of the 4 groups .* after 2 generation round\(s\)"):
        generate(trainer, generation_inputs)


def test_allocate_is_refused_because_grpo_trainer_groups_by_a_fixed_num_generations(make_trainer):
    block = {"mechanism": "allocate", "scorer": {"name": "solve_rate_posterior"}, "actuator": {"name": "knapsack"}}
    with pytest.raises(IncompatibleComponentError, match="cannot vary them: GRPOTrainer generates num_generations"):
        make_trainer("dapo", block, max_steps=1)


def test_filter_is_refused_where_trl_cannot_refill(make_trainer):
    from datasets import IterableDataset

    def rows():
        yield {"prompt": "a", "answer": "a", "index": 0}

    with pytest.raises(IncompatibleComponentError, match="cannot refill: refill rounds draw prompts by index"):
        make_trainer("dapo", DAPO, train_dataset=IterableDataset.from_generator(rows), max_steps=1)
