"""``mechanism: pilot`` end to end on the toy loop's staged generation: what a user of Pilot-Commit relies on.

Every trained group has ``rollout.n`` rollouts and its pilot rewards passed the admission; the pilot rollouts
of a trained group are exactly those of its screening stage (kept) or absent (screening only); every generated
rollout is in the compute counters; the caps hold; admitting everything with ``pilot.rollouts == rollout.n``
trains what the loop alone would train on the same prompts; a resume repeats the steps.
"""

from __future__ import annotations

import pytest
import torch
from dataflex_host_example import DataFlexToyTrainer, ToyConfig, ToyTrainer, toy_dataset

from dataflex_core import IncompatibleComponentError, InvalidOutputError

THRESHOLD = 0.01
PILOT = {
    "mechanism": "pilot",
    "scorer": {"name": "group_reward_variance"},
    "actuator": {"name": "threshold_band", "params": {"low": THRESHOLD, "high": 1.0e9}},
}
COMPUTE = "dataflex/compute/"


class Recording(DataFlexToyTrainer):
    """The host, recording each step's stages' rows as generated and the batch it trained."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.steps: list[tuple[list[dict[str, torch.Tensor]], object, dict[str, torch.Tensor]]] = []
        self._parts: list[dict[str, torch.Tensor]] = []

    def generate(self, prompts, counts, groups, gen):
        part = super().generate(prompts, counts, groups, gen)
        self._parts.append({name: value.clone() for name, value in part.items()})
        return part

    def rollout(self, step):
        self._parts = []
        batch = super().rollout(step)
        self.steps.append((self._parts, self.stages, {name: value.clone() for name, value in batch.items()}))
        return batch


def run(tmp_path, pilot, steps=3, block=None, **config) -> Recording:
    settings = {"output_dir": str(tmp_path / "run"), "group_size": 4, "prompts_per_step": 4, **config}
    trainer = Recording(ToyConfig(**settings), toy_dataset(24), dataflex={**PILOT, "pilot": pilot, **(block or {})})
    trainer.train(steps)
    return trainer


def real_rows(batch):
    return ~batch["is_padding"]


@pytest.mark.parametrize("keep", [True, False])
def test_every_trained_group_is_whole_and_was_admitted_on_its_pilot_rewards(tmp_path, keep):
    trainer = run(tmp_path, {"prompts": 3, "rollouts": 2, "keep": keep, "on_short": "raise", "max_stages": 4})
    for parts, stages, batch in trainer.steps:
        real = real_rows(batch)
        groups, sizes = batch["group"][real].unique(return_counts=True)
        assert len(groups) == 4 and sizes.tolist() == [4] * 4, (groups, sizes)  # the batch full, groups of rollout.n
        for uid in groups.tolist():
            assert bool(stages.admitted[uid])
            pilot = [(p["group"] == uid) & real_rows(p) for p in parts[:-1]]
            (stage,) = [i for i, rows in enumerate(pilot) if rows.any()]  # screened in exactly one stage
            rewards = parts[stage]["reward"][pilot[stage]]
            assert len(rewards) == 2 and float(rewards.var(unbiased=False)) > THRESHOLD
            trained = batch["tokens"][real & (batch["group"] == uid)]
            generated = parts[stage]["tokens"][pilot[stage]]
            kept = (trained.unsqueeze(1) == generated.unsqueeze(0)).all(-1).any(0)
            if keep:  # exactly the stage's pilot rollouts are in the group (and the commit's 2 more)
                assert torch.equal(trained[:2], generated)
                assert int(((parts[-1]["group"] == uid) & real_rows(parts[-1])).sum()) == 2
            else:  # screening only: the group is the commit's 4 rollouts
                commit = parts[-1]["tokens"][(parts[-1]["group"] == uid) & real_rows(parts[-1])]
                assert torch.equal(trained, commit)
                assert not kept.any()  # no pilot rollout of the group is trained


@pytest.mark.parametrize("keep", [True, False])
def test_every_generated_rollout_is_counted(tmp_path, keep):
    trainer = run(tmp_path, {"prompts": 2, "rollouts": 2, "keep": keep, "on_short": "backfill"})
    total = 0
    for (parts, _stages, batch), metrics in zip(trainer.steps, trainer.history):
        generated = sum(int(real_rows(p).sum()) for p in parts)
        total += generated
        assert metrics[f"{COMPUTE}rollouts_generated"] == generated
        assert metrics[f"{COMPUTE}generation_rounds"] == len(parts) == metrics["dataflex/pilot/stages"]
        pilot = metrics["dataflex/pilot/pilot_rollouts"]
        assert pilot + metrics["dataflex/pilot/commit_rollouts"] == generated
        trained_rows = int(real_rows(batch).sum())
        empty = int((real_rows(batch) & ~batch["mask"].any(-1)).sum())  # trained rows without a token
        assert metrics[f"{COMPUTE}rollouts_filtered"] == generated - trained_rows
        assert metrics[f"{COMPUTE}rollouts_trained"] == trained_rows - empty
        assert metrics["dataflex/pilot/rollouts_per_trained_group"] == generated / 4
    assert trainer.history[-1][f"{COMPUTE}rollouts_generated_total"] == total


def test_caps_on_stages_and_prompts_screened_hold(tmp_path):
    trainer = run(tmp_path, {"prompts": 4, "rollouts": 2, "max_stages": 3, "max_screened": 10, "on_short": "backfill"})
    for (parts, stages, batch), metrics in zip(trainer.steps, trainer.history):
        assert metrics["dataflex/pilot/screened_prompts"] <= 10 and len(stages.prompt) <= 10
        assert len(parts) <= 3
        assert int(real_rows(batch).sum()) == 16  # backfilled to the full batch when short
        admitted = metrics["dataflex/pilot/admitted_prompts"]
        assert metrics["dataflex/pilot/backfilled_prompts"] == max(4 - admitted, 0)


def test_a_short_step_raises_naming_the_caps(tmp_path):
    never = {**PILOT, "actuator": {"name": "threshold_band", "params": {"low": 1.0e8, "high": 1.0e9}}}
    trainer = DataFlexToyTrainer(
        ToyConfig(output_dir=str(tmp_path), group_size=4), toy_dataset(24), dataflex={**never, "pilot": {"prompts": 1}}
    )  # fmt: skip
    with pytest.raises(InvalidOutputError, match=r"admitted 0 of the 4 prompts.*max_stages=3.*on_short=backfill"):
        trainer.train(1)


def test_admitting_everything_with_full_pilots_trains_the_baseline_batch(tmp_path):
    every = {**PILOT, "actuator": {"name": "threshold_band", "params": {"low": -1.0, "high": 1.0e9}}}
    config = ToyConfig(output_dir=str(tmp_path), group_size=4)
    staged = Recording(config, toy_dataset(24), dataflex={**every, "pilot": {"prompts": 1, "rollouts": 4}})
    staged.train(3)
    for (parts, _stages, batch), metrics in zip(staged.steps, staged.history):
        assert len(parts) == 1 and metrics[f"{COMPUTE}rollouts_filtered"] == 0
        assert all(torch.equal(batch[name], parts[0][name]) for name in batch)  # the one stage, as generated

    class Replay(ToyTrainer):  # the loop alone, on the prompts and rollouts the staged run generated
        def rollout(self, step):
            return staged.steps[step - 1][2]

    baseline = Replay(config, toy_dataset(24))
    baseline.train(3)
    assert torch.equal(baseline.logits.detach(), staged.logits.detach())
    assert [h["loss"] for h in baseline.history] == [h["loss"] for h in staged.history]


def test_a_resume_repeats_the_steps(tmp_path):
    pilot = {"prompts": 2, "rollouts": 2, "on_short": "backfill"}
    full = run(tmp_path / "a", pilot, steps=4, save_steps=2)
    resumed = Recording(ToyConfig(output_dir=str(tmp_path / "b"), group_size=4), toy_dataset(24),
                        dataflex={**PILOT, "pilot": pilot})  # fmt: skip
    resumed.train(4, resume_from=full.checkpoint_folder(2))
    for (_, _, want), (_, _, got) in zip(full.steps[2:], resumed.steps):
        assert all(torch.equal(want[name], got[name]) for name in want)
    assert (
        resumed.history[-1][f"{COMPUTE}rollouts_generated_total"]
        == full.history[-1][f"{COMPUTE}rollouts_generated_total"]
    )


def generated_per_prompt(parts, size=24):
    """Responses with a token generated for each dataset row (counted from the stages' rows as generated)."""
    out = torch.zeros(size, dtype=torch.long)
    for part in parts:
        rows = real_rows(part) & part["mask"].any(-1)
        out.index_add_(0, part["prompt"][rows], torch.ones(int(rows.sum()), dtype=torch.long))
    return out


@pytest.mark.parametrize("keep", [True, False])
def test_the_ledger_counts_every_pilot_and_commit_rollout_of_each_prompt(tmp_path, keep):
    pilot = {"prompts": 2, "rollouts": 2, "keep": keep, "on_short": "backfill"}
    trainer = run(tmp_path, pilot, steps=3, save_steps=3, block={"prompt_key": "prompt"})
    ledger = trainer.dataflex.ledger
    want = sum(generated_per_prompt(parts) for parts, _, _ in trainer.steps)
    assert torch.equal(ledger.rollouts, want)  # pilot and commit rollouts, per prompt
    assert torch.equal(ledger.rollouts_trained + ledger.rollouts_filtered, want)
    assert int(ledger.rollouts_trained.sum()) == sum(h[f"{COMPUTE}rollouts_trained"] for h in trainer.history)
    parts, stages, _ = trainer.steps[-1]
    committed = stages.committed.tolist()
    equal = 0
    for uid, prompt in enumerate(stages.prompt.tolist()):
        rows = [real_rows(p) & p["mask"].any(-1) & (p["group"] == uid) for p in parts[:-1]]
        rewards = torch.cat([p["reward"][r] for p, r in zip(parts, rows)])
        once = int((stages.prompt == prompt).sum()) == 1
        if uid not in committed and once and len(rewards) and bool((rewards == rewards[0]).all()):
            equal += 1  # a prompt whose pilot rewards were all equal: recorded as such, for a curriculum
            assert int(ledger.uniform_reward_streak[prompt]) >= 1 and int(ledger.last_sampled_step[prompt]) == 3
    assert equal > 0
    resumed = Recording(ToyConfig(output_dir=str(tmp_path / "b"), group_size=4, prompts_per_step=4),
                        toy_dataset(24), dataflex={**PILOT, "pilot": pilot, "prompt_key": "prompt"})  # fmt: skip
    resumed.load_checkpoint(trainer.checkpoint_folder(3))
    assert torch.equal(resumed.dataflex.ledger.rollouts, ledger.rollouts)
    assert torch.equal(resumed.dataflex.ledger.uniform_reward_streak, ledger.uniform_reward_streak)


def test_pilot_draw_is_refused_on_the_toy_loop_with_its_reason(tmp_path):
    draw = {"mechanism": "curriculum", "prompt_key": "prompt", "scorer": {"name": "greso"},
            "actuator": {"name": "temperature"}}  # fmt: skip
    with pytest.raises(IncompatibleComponentError, match="the toy loop walks its dataset in order"):
        run(tmp_path, {"draw": draw}, steps=1)
