"""``mechanism: pilot`` on TRL's real GRPOTrainer, one process: what a user of Pilot-Commit relies on.

Every trained group has ``num_generations`` rollouts, consecutive, and its pilot rewards passed the admission;
the pilot rollouts of a trained group are exactly those of its screening stage (kept) or absent (screening
only); every generated rollout is in the compute counters; the caps hold; admitting everything with
``pilot.rollouts == num_generations`` trains TRL's own batch; a resume repeats the step.
"""

from __future__ import annotations

import logging
import os
import zlib

import pytest
import torch
from trl_testkit import NUM_GENERATIONS, PROMPTS_PER_STEP, generate, loss_and_grads

from dataflex_core import IncompatibleComponentError, InvalidOutputError
from dataflex_core.mechanisms.filter import RefillSampler

PILOT = {
    "mechanism": "pilot",
    "scorer": {"name": "group_reward_variance"},
    "actuator": {"name": "threshold_band", "params": {"low": 0.0, "high": 1.0e9}},
}
ROWS = PROMPTS_PER_STEP * NUM_GENERATIONS
COMPUTE = "dataflex/compute/"


def signal_reward(completions, index, **_):
    """Even prompt ids: 1 for every completion (no signal); odd: a value fixed by the completion's text."""
    return [1.0 if int(i) % 2 == 0 else (zlib.crc32(c.encode()) % 997) / 997 for c, i in zip(completions, index)]


def tokens(output: dict, row: int) -> list[int]:
    """Row ``row``'s completion tokens (its loss mask's), whatever the batch's padding width."""
    return output["completion_ids"][row][output["completion_mask"][row].bool()].tolist()


class Recorder:
    """Every stage TRL generated (its rows, output, rewards) and every step's trained batch with its stages."""

    def __init__(self, trainer) -> None:
        self.stages: list[list[tuple[list[dict], dict, torch.Tensor]]] = []
        self.steps: list[tuple[list[dict], dict, torch.Tensor, object]] = []
        generate_stage, run_stages = trainer._dataflex_generate, trainer._dataflex_stages

        def generated(rows, group_size):
            local, output, rewards = generate_stage(rows, group_size)
            self.stages[-1].append((local, {k: v for k, v in output.items()}, rewards.clone()))
            return local, output, rewards

        def staged(seam, step):
            self.stages.append([])
            inputs, output, stages = run_stages(seam, step)
            self.steps.append((inputs, dict(output), trainer._dataflex_rewards_per_func.clone(), stages))
            return inputs, output, stages

        trainer._dataflex_generate, trainer._dataflex_stages = generated, staged


def run(make_trainer, pilot, steps=2, **config):
    trainer = make_trainer("dapo", {**PILOT, "pilot": pilot}, reward=signal_reward, max_steps=steps, **config)
    recorder = Recorder(trainer)
    trainer.train()
    return trainer, recorder


@pytest.mark.parametrize("keep", [True, False])
def test_every_trained_group_is_whole_and_was_admitted_on_its_pilot_rewards(make_trainer, keep):
    _, record = run(make_trainer, {"prompts": 3, "rollouts": 2, "keep": keep, "max_stages": 4})
    assert len(record.steps) == 2
    for parts, (inputs, output, rewards, stages) in zip(record.stages, record.steps):
        assert len(output["advantages"]) == ROWS and len(inputs) == ROWS  # the batch full
        assert int(output["num_items_in_batch"]) == int(output["completion_mask"].sum())
        index = torch.tensor([int(row["index"]) for row in inputs]).view(PROMPTS_PER_STEP, NUM_GENERATIONS)
        assert bool((index == index[:, :1]).all())  # each group's rows consecutive, one prompt
        *screening, commit = parts
        for group, uid in enumerate(stages.committed.tolist()):
            assert bool(stages.admitted[uid])
            rows = range(group * NUM_GENERATIONS, (group + 1) * NUM_GENERATIONS)
            prompt = int(index[group, 0])
            found = [(out, rpf, [i for i, row in enumerate(rows_s) if int(row["index"]) == prompt])
                     for rows_s, out, rpf in screening]  # fmt: skip
            ((pilot_output, pilot_rpf, pilot_rows),) = [f for f in found if f[2]]  # screened in exactly one stage
            assert len(pilot_rows) == 2
            assert float(pilot_rpf.sum(1)[pilot_rows].var()) > 0  # its pilot rewards carry signal
            commit_rows, commit_output, commit_rpf = commit
            committed = [i for i, row in enumerate(commit_rows) if int(row["index"]) == prompt]
            trained = [tokens(output, r) for r in rows]
            if keep:  # exactly the stage's pilot rollouts, then the commit's 2 more
                assert len(committed) == 2
                assert trained[:2] == [tokens(pilot_output, i) for i in pilot_rows]
                assert trained[2:] == [tokens(commit_output, i) for i in committed]
                assert torch.equal(rewards[list(rows)], torch.cat([pilot_rpf[pilot_rows], commit_rpf[committed]]))
            else:  # screening only: the group is the commit's 4 rollouts
                assert len(committed) == NUM_GENERATIONS
                assert trained == [tokens(commit_output, i) for i in committed]
                assert torch.equal(rewards[list(rows)], commit_rpf[committed])
        group_rewards = rewards.sum(1).view(PROMPTS_PER_STEP, NUM_GENERATIONS)
        centred = group_rewards - group_rewards.mean(1, keepdim=True)
        assert bool(((output["advantages"].view_as(centred) > 0) == (centred > 1e-6)).all())  # whole-group advantages


@pytest.mark.parametrize("keep", [True, False])
def test_every_generated_rollout_is_counted(make_trainer, keep):
    trainer, record = run(make_trainer, {"prompts": 2, "rollouts": 2, "keep": keep, "on_short": "backfill"})
    logged = [e for e in trainer.state.log_history if f"{COMPUTE}rollouts_generated" in e]
    assert len(logged) == 2
    total = 0
    for parts, metrics in zip(record.stages, logged):
        generated = sum(len(rows) for rows, _, _ in parts)
        total += generated
        assert metrics[f"{COMPUTE}rollouts_generated"] == generated
        assert metrics[f"{COMPUTE}generation_rounds"] == len(parts) == metrics["dataflex/pilot/stages"]
        assert metrics["dataflex/pilot/pilot_rollouts"] + metrics["dataflex/pilot/commit_rollouts"] == generated
        assert metrics[f"{COMPUTE}rollouts_filtered"] == generated - ROWS
        assert metrics["dataflex/pilot/rollouts_per_trained_group"] == generated / PROMPTS_PER_STEP
    assert trainer.dataflex.compute_totals.totals["rollouts_generated"] == total
    assert logged[-1][f"{COMPUTE}rollouts_generated_total"] == total


def test_caps_on_stages_and_prompts_screened_hold(make_trainer):
    pilot = {"prompts": 4, "rollouts": 2, "max_stages": 3, "max_screened": 10, "on_short": "backfill"}
    trainer, record = run(make_trainer, pilot)
    logged = [e for e in trainer.state.log_history if "dataflex/pilot/screened_prompts" in e]
    for parts, (_, output, _, stages), metrics in zip(record.stages, record.steps, logged):
        assert len(stages.prompt) <= 10 and metrics["dataflex/pilot/screened_prompts"] == len(stages.prompt)
        assert len(parts) <= 3
        assert len(output["advantages"]) == ROWS  # backfilled to the full batch when short
        admitted = metrics["dataflex/pilot/admitted_prompts"]
        assert metrics["dataflex/pilot/backfilled_prompts"] == max(PROMPTS_PER_STEP - admitted, 0)


def test_a_short_step_raises_naming_the_caps(make_trainer):
    never = {**PILOT, "actuator": {"name": "threshold_band", "params": {"low": 5.0, "high": 6.0}}}
    trainer = make_trainer("dapo", {**never, "pilot": {"prompts": 1}}, reward=signal_reward, max_steps=1)
    with pytest.raises(InvalidOutputError, match=r"admitted 0 of the 4 prompts.*max_stages=3.*on_short=backfill"):
        trainer.train()


def test_admitting_everything_with_full_pilots_trains_trls_batch(make_trainer, dataset):
    every = {**PILOT, "actuator": {"name": "threshold_band", "params": {"low": -1.0, "high": 1.0e9}}}
    flex = make_trainer("dapo", {**every, "pilot": {"prompts": 1, "rollouts": NUM_GENERATIONS}}, reward=signal_reward)
    plain = make_trainer("dapo", reward=signal_reward)
    drawn = RefillSampler(len(dataset), PROMPTS_PER_STEP, seed=flex.args.seed).next_block()
    inputs = [dict(dataset[i]) for i in drawn for _ in range(NUM_GENERATIONS)]  # the pilot's prompts, TRL's layout
    out_plain = generate(plain, inputs)
    out_flex = generate(flex, [{"prompt": "unused"}])  # the stages draw the step's prompts themselves
    for key in ("prompt_ids", "completion_ids", "completion_mask", "advantages", "num_items_in_batch"):
        assert torch.equal(out_plain[key], out_flex[key]), key
    loss_plain, grads_plain = loss_and_grads(plain, out_plain)
    loss_flex, grads_flex = loss_and_grads(flex, out_flex)
    assert torch.equal(loss_plain, loss_flex)
    assert all(torch.equal(grad, grads_flex[name]) for name, grad in grads_plain.items())
    metrics = flex._metrics["train"]
    assert metrics[f"{COMPUTE}rollouts_filtered"] == [0.0] and metrics["dataflex/pilot/stages"] == [1.0]


def test_a_resume_repeats_the_step(make_trainer):
    pilot = {"prompts": 2, "rollouts": 2, "on_short": "backfill"}
    full, record = run(make_trainer, pilot, steps=3, save_strategy="steps", save_steps=2)
    checkpoint = os.path.join(full.args.output_dir, "checkpoint-2")
    resumed = make_trainer("dapo", {**PILOT, "pilot": pilot}, reward=signal_reward, max_steps=3)
    again = Recorder(resumed)
    resumed.train(resume_from_checkpoint=checkpoint)
    assert len(again.steps) == 1  # step 3 only
    (inputs, output, _, stages), (want_inputs, want, _, want_stages) = again.steps[0], record.steps[2]
    assert torch.equal(stages.prompt, want_stages.prompt)  # the same prompts screened
    assert [row["index"] for row in inputs] == [row["index"] for row in want_inputs]
    assert [tokens(output, r) for r in range(ROWS)] == [tokens(want, r) for r in range(ROWS)]
    totals = resumed.dataflex.compute_totals.totals
    assert totals == full.dataflex.compute_totals.totals  # the counters continued


def test_pilot_is_refused_where_trl_cannot_draw_prompts_by_index(make_trainer):
    from datasets import IterableDataset

    def rows():
        yield {"prompt": "a", "answer": "a", "index": 0}

    with pytest.raises(IncompatibleComponentError, match="stages draw prompts by index, and the train dataset is not"):
        make_trainer("dapo", PILOT, train_dataset=IterableDataset.from_generator(rows), max_steps=1)


def test_pilot_counts_that_cannot_split_over_the_processes_are_refused_at_mount(make_trainer):
    from types import SimpleNamespace

    from dataflex_trl.mount import check_stage_shares

    from dataflex_core import ConfigError

    trainer = make_trainer("dapo", {**PILOT, "pilot": {"rollouts": 1}})  # mounted on one process: fine there
    on_two = SimpleNamespace(world_size=2, num_generations=NUM_GENERATIONS)
    with pytest.raises(ConfigError, match=r"2 processes.*dataflex.pilot.rollouts \(1\) and the commit's top-up \(3\) "
                       r"is not a multiple of 2"):  # fmt: skip
        check_stage_shares(trainer.dataflex, on_two)
    even = make_trainer("dapo", {**PILOT, "pilot": {"rollouts": 2}})
    check_stage_shares(even.dataflex, on_two)  # 2 pilots and a top-up of 2: even shares
    check_stage_shares(trainer.dataflex, SimpleNamespace(world_size=1, num_generations=NUM_GENERATIONS))


def test_the_pilot_commit_preset_runs_without_one_call_as_trl_generates_one_count_per_call(make_trainer, caplog):
    with caplog.at_level(logging.INFO, logger="dataflex_core.step"):
        trainer, record = run(make_trainer, {"preset": "pilot-commit", "rollouts": 2}, steps=3)  # one_call unset
    assert "one_call=false: TRL" in caplog.text and "each round runs its counts in sequence" in caplog.text
    assert trainer.dataflex.mechanism.settings.one_call is False
    logged = [e for e in trainer.state.log_history if "dataflex/pilot/rounds" in e]
    assert len(logged) == len(record.steps) == 3
    assert sum(e["dataflex/pilot/carried_prompts"] for e in logged) > 0  # carried prompts were committed
    for (_, output, _, _), metrics in zip(record.steps, logged):
        assert len(output["advantages"]) == ROWS  # whole groups, the batch full
        carried = metrics["dataflex/pilot/carried_prompts"]
        assert metrics["dataflex/pilot/stages"] > metrics["dataflex/pilot/rounds"] or not carried  # in sequence


def test_steps_before_warmup_are_trls_own_and_still_counted(make_trainer):
    block = {**PILOT, "warmup_step": 2, "pilot": {"prompts": 2, "rollouts": 2, "on_short": "backfill"}}
    trainer = make_trainer("dapo", block, reward=signal_reward, max_steps=2)
    record = Recorder(trainer)
    trainer.train()
    assert len(record.steps) == 1  # step 2 only was generated in stages
    logged = [e for e in trainer.state.log_history if f"{COMPUTE}rollouts_generated" in e]
    assert [e[f"{COMPUTE}rollouts_generated"] for e in logged][0] == ROWS  # TRL's one batch
    assert "dataflex/pilot/stages" not in logged[0] and logged[1]["dataflex/pilot/stages"] >= 2
    assert logged[1][f"{COMPUTE}rollouts_generated"] == sum(len(rows) for rows, _, _ in record.stages[0])


def ledger_from_rows(record: Recorder, steps: int | None = None) -> dict[int, tuple[int, int, int, int]]:
    """Per prompt id: ``(rollouts, trained, filtered, uniform-reward streak)`` after the first ``steps`` (all), counted
    from the rows TRL generated in every stage and the batch it trained (responses without a token left out, as
    the ledger does)."""
    want: dict[int, list[int]] = {}
    for parts, (inputs, output, _, _) in list(zip(record.stages, record.steps))[:steps]:
        rewards: dict[int, list[float]] = {}
        for rows, out, rpf in parts:
            valid = (out["completion_mask"].sum(1) > 0).tolist()
            for row, ok, reward in zip(rows, valid, rpf.sum(1).tolist()):
                if ok:
                    rewards.setdefault(int(row["index"]), []).append(reward)
        trained: dict[int, int] = {}
        for row, ok in zip(inputs, (output["completion_mask"].sum(1) > 0).tolist()):
            trained[int(row["index"])] = trained.get(int(row["index"]), 0) + int(ok)
        for index, values in rewards.items():
            entry = want.setdefault(index, [0, 0, 0, 0])
            entry[0] += len(values)
            entry[1] += trained.get(index, 0)
            entry[2] += len(values) - trained.get(index, 0)
            entry[3] = entry[3] + 1 if max(values) - min(values) <= 1e-6 else 0
    return {index: tuple(entry) for index, entry in want.items()}


def ledger_counts(ledger) -> dict[int, tuple[int, int, int, int]]:
    """The ledger's ``ledger_from_rows`` view: its prompts rolled out at least once."""
    columns = [ledger.rollouts, ledger.rollouts_trained, ledger.rollouts_filtered, ledger.uniform_reward_streak]
    return {
        int(index): tuple(int(column[i]) for column in columns)
        for i, index in enumerate(ledger.ids.values.tolist())
        if int(ledger.rollouts[i])
    }


def test_a_pilot_run_with_prompt_key_records_every_stage_in_the_ledger(make_trainer):
    pilot = {"prompts": 3, "rollouts": 2, "max_stages": 4}
    block = {**PILOT, "pilot": pilot, "prompt_key": "index"}
    trainer = make_trainer("dapo", block, reward=signal_reward, max_steps=2)
    record = Recorder(trainer)
    trainer.train()
    ledger = trainer.dataflex.ledger
    assert ledger_counts(ledger) == ledger_from_rows(record)  # every prompt's rollouts, trained, filtered, streak
    assert int(ledger.rollouts_trained.sum()) == 2 * ROWS  # two steps of full batches
    even = torch.as_tensor([int(i) % 2 == 0 for i in ledger.ids.values.tolist()])
    assert int(ledger.rollouts[even].sum()) > 0 and int(ledger.rollouts_trained[even].sum()) == 0  # screened, evicted
    assert bool((ledger.uniform_reward_streak[even & (ledger.rollouts > 0)] >= 1).all())


#: GRESO drawing the screened prompts, with a vanishing keep probability for a prompt whose latest visit had one
#: reward for every rollout and no uniform floor in the sampler: such a prompt is not screened again (1e-9 of a
#: fresh prompt's probability).
GRESO = {"mechanism": "curriculum", "prompt_key": "index",
         "scorer": {"name": "greso", "params": {"exploration": 1.0e-9, "min_keep": 1.0e-9}},
         "actuator": {"name": "temperature", "params": {"temperature": 1.0, "exploration": 0.0}}}  # fmt: skip


def test_pilot_draw_screens_what_greso_draws_from_the_ledger_the_stages_feed(make_trainer, dataset):
    steps = 4
    pilot = {"prompts": 2, "rollouts": 2, "max_stages": 6, "draw": GRESO}
    trainer = make_trainer("dapo", {**PILOT, "pilot": pilot}, reward=signal_reward, max_steps=steps)
    record = Recorder(trainer)
    trainer.train()
    history = trainer.dataflex.ledger
    assert history is trainer.dataflex.sampler.history  # the curriculum reads the ledger the stages feed
    assert ledger_counts(history) == ledger_from_rows(record)
    logged = [e for e in trainer.state.log_history if "dataflex/curriculum/draw/max_probability" in e]
    assert len(logged) == steps
    skipped = 0
    for step in range(2, steps + 1):
        silent = {index for index, (_, _, _, streak) in ledger_from_rows(record, step - 1).items() if streak}
        screened = {int(row["index"]) for rows, _, _ in record.stages[step - 1][:-1] for row in rows}
        assert silent and not silent & screened, step  # every prompt recorded without signal is skipped
        skipped += len(silent)
        metrics = logged[step - 1]
        # the draw's probabilities are GRESO's on the streaks counted from the rows: 1 / (prompts with streak 0)
        assert metrics["dataflex/curriculum/draw/history_step"] == step - 1
        fresh = len(dataset) - len(silent)
        assert metrics["dataflex/curriculum/draw/max_probability"] == pytest.approx(1 / fresh, rel=1e-6)
    assert skipped >= steps  # the skip was exercised on every later step
