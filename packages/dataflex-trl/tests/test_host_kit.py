"""The host kit's shared tests on the TRL host: TRL's real GRPOTrainer, its loss and its checkpoints.

A step is TRL's real ``_generate_and_score_completions`` on one generation batch (a seeded generator: the same
completions every time), its loss TRL's real ``_compute_loss``; the first prompt's completions are left
unscored by the reward function (TRL's empty rows: advantage 0, outside DataFlex's valid rows). A save is
TRL's real training loop for two steps with ``save_steps=2``, a resume ``train(resume_from_checkpoint=...)``.

A staged step (``mechanism: pilot``) is TRL's real training loop: each stage one TRL generation call
(``_dataflex_generate``, recorded with the requests the stages gave), the trained batch the one the stages assembled
for TRL's loss; its checkpoints and resume are TRL's own.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from dataflex_trl.advantages import grpo_advantages
from dataflex_trl.mount import LOSS_UNITS, capabilities
from trl_testkit import NUM_GENERATIONS, generate

from dataflex_conformance.host import (
    GenerationRoundsSuite,
    HostHarness,
    HostStep,
    HostSuite,
    PromptCountsSuite,
    ResamplingSuite,
    RoundsStep,
    StagedRows,
    StagedStep,
    StagedSuite,
)
from dataflex_core.step.seams import StagedGeneration
from dataflex_lab.trl.toy import echo_reward


def first_prompt_unscored(completions, answer, **kwargs):
    """The toy echo reward, with ``None`` (not scored) for the first prompt's completions."""
    rewards = echo_reward(completions, answer)
    return [None] * NUM_GENERATIONS + rewards[NUM_GENERATIONS:]


def kit_reward(completions, index, **kwargs):
    """The kit's rewards for the generation rounds: an even prompt's completions all get 1, an odd prompt's 0, 1,
    0, 1 (a group's completions are consecutive)."""
    return [1.0 if int(i) % 2 == 0 else float(j % 2) for j, i in enumerate(index)]


#: loss type -> the host's declaration (the same for every test of a loss type: built once)
DECLARED: dict = {}


class TrlHarness(HostHarness):
    def __init__(self, make_trainer, inputs, loss_type: str) -> None:
        self.make_trainer, self.inputs, self.loss_type = make_trainer, inputs, loss_type

    def capabilities(self):  # what the host declares for this loss type: the kit runs those seams' suites
        if self.loss_type not in DECLARED:
            trainer = self.make_trainer(self.loss_type)
            DECLARED[self.loss_type] = capabilities(trainer.args, trainer.train_dataset)
        return DECLARED[self.loss_type]

    def step(self, block):
        trainer = self.make_trainer(self.loss_type, block, reward=first_prompt_unscored)
        applied, built, recomputed, rewards = [], [], [], []
        real_rewards = trainer._calculate_rewards  # TRL's rewards per function: what advantages_alone reads
        trainer._calculate_rewards = lambda *args: rewards.append(real_rewards(*args)) or rewards[-1]
        if block is not None:  # record what the host multiplies into TRL's advantages, and TRL's mask before it
            real_weights, real_hook = trainer._dataflex_token_weights, trainer._dataflex_on_generation
            real_advantages = trainer._dataflex_advantages
            trainer._dataflex_token_weights = lambda *args: applied.append(real_weights(*args)) or applied[-1]
            trainer._dataflex_advantages = lambda *args: recomputed.append(real_advantages(*args)) or recomputed[-1]

            def on_generation(inputs, output, *args, **kwargs):
                built.append(output["completion_mask"].clone())
                return real_hook(inputs, output, *args, **kwargs)

            trainer._dataflex_on_generation = on_generation
        output = generate(trainer, self.inputs)
        loss = trainer._compute_loss(trainer.model, output).detach()
        metrics = {name: values[-1] for name, values in trainer._metrics["train"].items() if "dataflex/" in name}
        trained = output["completion_mask"].bool()
        mask = built[-1].bool() if built else trained
        inert = ~mask.any(-1)
        inert[:NUM_GENERATIONS] = True  # the unscored completions
        weights = applied[-1] if applied else None
        advantages = recomputed[-1] if recomputed else output["advantages"]
        return HostStep(
            loss, mask, inert, LOSS_UNITS[self.loss_type], weights, metrics,
            trained_mask=trained if metrics.get("dataflex/hard_drop") == 1.0 else None,
            advantages=advantages, batch=(trainer, output, rewards[-1].cpu()),
        )  # fmt: skip

    def advantages_alone(self, step, rows):
        """TRL's advantage formula (GRPOTrainer's, as ``test_select`` holds) on a batch of ``rows`` alone."""
        trainer, _, rewards = step.batch
        size = len(rows) // len(torch.unique(rows // NUM_GENERATIONS))
        assert len(rows) == size * len(torch.unique(rows // NUM_GENERATIONS)), "groups of unequal kept rows"
        return grpo_advantages(
            rewards[rows], trainer.reward_weights.cpu(), size,
            scale_rewards=trainer.scale_rewards, aggregation=trainer.multi_objective_aggregation,
        )  # fmt: skip

    def loss_alone(self, step, rows):
        """TRL's ``_compute_loss`` on the generation batch TRL would have built had only ``rows`` been sampled."""
        trainer, output, _ = step.batch
        alone = {name: value[rows] for name, value in output.items() if isinstance(value, torch.Tensor) and value.dim()}
        alone["advantages"] = self.advantages_alone(step, rows).to(output["advantages"].dtype)
        alone["num_items_in_batch"] = output["completion_mask"][rows].sum()
        return trainer._compute_loss(trainer.model, alone).detach()

    def draws(self, block, steps, resume_after=None):
        drawn = []

        def recording(completions, answer, index, **kwargs):  # TRL hands the reward each prompt's dataset columns
            drawn.append(torch.as_tensor(index, dtype=torch.int64))
            return echo_reward(completions, answer)

        if resume_after is None:
            self.make_trainer(self.loss_type, block, reward=recording, max_steps=steps, save_strategy="no").train()
            return drawn
        first = self.make_trainer(
            self.loss_type, block, reward=recording, max_steps=resume_after, save_strategy="steps",
            save_steps=resume_after,
        )  # fmt: skip
        first.train()
        folder = Path(first.args.output_dir) / f"checkpoint-{resume_after}"
        resumed = self.make_trainer(self.loss_type, block, reward=recording, max_steps=steps, save_strategy="no")
        resumed.train(resume_from_checkpoint=str(folder))  # TRL's resume: the rebuilt dataloader skips what ran
        return drawn

    def rounds(self, block, steps):
        trainer = self.make_trainer(self.loss_type, block, reward=kit_reward, max_steps=steps, save_strategy="no")
        trained = []
        real = trainer._dataflex_on_generation

        def on_generation(inputs, output, step, start, generation=None):  # the trained batch, after the rounds
            prompts = torch.as_tensor([int(row["index"]) for row in inputs], dtype=torch.int64)
            uids = torch.arange(len(inputs)) // NUM_GENERATIONS  # TRL's groups: num_generations consecutive rows
            groups = len(inputs) // NUM_GENERATIONS
            trained.append(RoundsStep(prompts, uids, groups, NUM_GENERATIONS, generation.rounds))
            return real(inputs, output, step, start, generation=generation)

        trainer._dataflex_on_generation = on_generation
        trainer.train()
        return trained

    def staged_steps(self, block, steps, *, save_at=None):
        saves = {"save_strategy": "no"} if save_at is None else {"save_strategy": "steps", "save_steps": save_at}
        trainer = self.make_trainer(self.loss_type, block, reward=kit_reward, max_steps=steps, **saves)
        recorded = staged_recording(trainer)
        trainer.train()
        return recorded, (None if save_at is None else Path(trainer.args.output_dir) / f"checkpoint-{save_at}")

    def staged_resume(self, block, folder, steps):
        trainer = self.make_trainer(self.loss_type, block, reward=kit_reward, max_steps=steps, save_strategy="no")
        recorded = staged_recording(trainer)
        trainer.train(resume_from_checkpoint=str(folder))  # TRL's resume: its RNG, then DataFlex's state
        return recorded

    def save(self, block):
        trainer = self.make_trainer(self.loss_type, block, max_steps=2, save_strategy="steps", save_steps=2)
        trainer.train()
        return Path(trainer.args.output_dir) / "checkpoint-2", trainer.dataflex

    def resume(self, block, folder):
        trainer = self.make_trainer(self.loss_type, block, max_steps=3, save_strategy="no")
        session, restore = trainer.dataflex, trainer.dataflex.restore

        def restore_then_stop(checkpoint):  # TRL's loop would train a step before it checks max_steps
            restore(checkpoint)
            raise Restored

        session.restore = restore_then_stop
        with pytest.raises(Restored):
            trainer.train(resume_from_checkpoint=str(folder))
        return session


def _staged_rows(rows: list[dict], output: dict, group: torch.Tensor, width: int, reward=None) -> StagedRows:
    """TRL rows as the kit reads them: each completion's tokens under its mask (-1 elsewhere, ``width`` wide, so a
    row is the same whatever the batch's padding), its prompt's dataset row (the ``index`` column), its group."""
    ids, mask = output["completion_ids"].cpu(), output["completion_mask"].cpu().bool()
    response = torch.full((len(ids), width), -1, dtype=torch.int64)
    response[:, : ids.shape[1]] = torch.where(mask, ids, -1)
    prompt = torch.as_tensor([int(row["index"]) for row in rows], dtype=torch.int64)
    return StagedRows(group.to(torch.int64), prompt, response, None if reward is None else reward.cpu().sum(-1))


def staged_recording(trainer) -> list[StagedStep]:
    """Each step ``trainer`` generates in stages, as TRL generated each stage (its ``_dataflex_generate``, the one
    TRL call per stage) and the trained batch the stages assembled, with the step's ``dataflex/*`` metrics."""
    steps: list[StagedStep] = []
    seam, width = trainer.dataflex.seam(StagedGeneration), trainer.args.max_completion_length
    new_stages, generate, run_stages = seam.stages, trainer._dataflex_generate, trainer._dataflex_stages
    log = trainer._dataflex_log
    requests: list = []
    generated: list[StagedRows] = []
    unlogged: list[StagedStep] = []

    def stages(*args, **kwargs):  # a step's stages: every request they give is recorded
        step_stages = new_stages(*args, **kwargs)
        next_stage = step_stages.next

        def asking():
            asked = next_stage()
            if asked is not None:
                requests.append(asked)
            return asked

        step_stages.next = asking
        return step_stages

    def generating(rows, group_size):  # TRL's generation of the last request: its rows under the request's uids
        local, output, rewards = generate(rows, group_size)
        asked = requests[-1]
        assert len(rewards) == len(local), "one process: TRL's gathered rewards are this process's rows"
        generated.append(_staged_rows(local, output, asked.uids.repeat_interleave(asked.counts), width, rewards))
        return local, output, rewards

    def staging(seam, step):
        requests.clear()
        generated.clear()
        inputs, output, done = run_stages(seam, step)
        groups = torch.arange(len(inputs)) // trainer.num_generations  # TRL's groups: consecutive rows
        steps.append(StagedStep(
            [*requests], [*generated], [keep.cpu() for keep in done.trained()],
            _staged_rows(inputs, output, groups, width), done.groups, trainer.num_generations,
        ))  # fmt: skip
        unlogged.append(steps[-1])
        return inputs, output, done

    def logging(output, metrics):  # the staged step's metrics, as the trainer logs them
        while unlogged:
            unlogged.pop().metrics.update({name: v for name, v in metrics.items() if name.startswith("dataflex/")})
        return log(output, metrics)

    seam.stages, trainer._dataflex_generate, trainer._dataflex_stages = stages, generating, staging
    trainer._dataflex_log = logging
    return steps


class Restored(Exception):
    """TRL's resume reached DataFlex's restore (after TRL loaded its own state); the harness stops it there."""


#: The suites whose promises do not read TRL's loss (its sampler, its generation rounds and stages, the per-prompt
#: counts): they run under one loss type. Every other suite of the kit (the loss's: reweight, select, recompute, hard
#: drop, and any suite the kit adds) runs under both.
LOSS_FREE = (ResamplingSuite, GenerationRoundsSuite, PromptCountsSuite, StagedSuite)
LOSS_SUITES = tuple(suite for suite in HostSuite.__bases__ if suite not in LOSS_FREE)


class TestTrlHost(*LOSS_SUITES):
    @pytest.fixture(params=["dapo", "grpo"])
    def host(self, request, make_trainer, generation_inputs):
        return TrlHarness(make_trainer, generation_inputs, request.param)


class TestTrlHostOneLossType(*LOSS_FREE):
    @pytest.fixture
    def host(self, make_trainer, generation_inputs):
        return TrlHarness(make_trainer, generation_inputs, "dapo")


def test_the_suites_run_under_one_loss_type_are_the_kits():
    """A suite the kit renames or drops is not silently left out here: the loss-free ones are all the kit's."""
    assert set(LOSS_FREE) <= set(HostSuite.__bases__), set(LOSS_FREE) - set(HostSuite.__bases__)
