"""The host kit's shared tests on this host: the toy loop's real step, loss and checkpoints.

The harness is what a host writes for :mod:`dataflex_conformance.host`: one step of the loop up to its
loss on a fixed batch, and a run that saves and one that resumes, through the loop's own code.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from dataflex_host_example import DataFlexToyTrainer, ToyConfig, ToyTrainer, toy_dataset
from dataflex_host_example.host import LOSS_UNITS, capabilities

from dataflex_conformance.host import HostHarness, HostStep, HostSuite, StagedRows, StagedStep


class ToyHarness(HostHarness):
    def __init__(self, root: Path, loss_agg: str = "token-mean") -> None:
        self.root, self.loss_agg, self.runs = root, loss_agg, 0

    def trainer(self, block, **config) -> ToyTrainer:
        self.runs += 1
        settings = {"loss_agg": self.loss_agg, "output_dir": str(self.root / f"run{self.runs}"), **config}
        if block is None:
            return ToyTrainer(ToyConfig(**settings), toy_dataset())
        return DataFlexToyTrainer(ToyConfig(**settings), toy_dataset(), dataflex=dict(block))

    def capabilities(self):
        return capabilities(ToyConfig(loss_agg=self.loss_agg))  # the kit runs the suites of these seams

    def step(self, block):
        trainer = self.trainer(block)
        trainer.logits.data.normal_(generator=torch.Generator().manual_seed(1))  # a policy that is not uniform
        batch = trainer.rollout(1)
        batch["advantages"] = trainer.advantages(batch)
        weights = trainer.loss_weights(batch, 1)
        loss = trainer.loss(batch, weights)
        inert = batch["is_padding"] | ~batch["mask"].any(-1)
        metrics = dict(trainer.history[-1]) if trainer.history else {}
        return HostStep(loss.detach(), batch["mask"], inert, LOSS_UNITS[self.loss_agg], weights, metrics)

    def staged_steps(self, block, steps, *, save_at=None):
        trainer = self.trainer(block, save_steps=save_at or 0)
        recorded = staged_recording(trainer)
        trainer.train(steps)
        return recorded, (None if save_at is None else trainer.checkpoint_folder(save_at))

    def staged_resume(self, block, folder, steps):
        trainer = self.trainer(block)
        recorded = staged_recording(trainer)
        trainer.train(steps, resume_from=folder)
        return recorded

    def save(self, block):
        trainer = self.trainer(block, save_steps=2)
        trainer.train(2)
        return trainer.checkpoint_folder(2), trainer.dataflex

    def resume(self, block, folder):
        trainer = self.trainer(block)
        trainer.train(2, resume_from=folder)  # restores, then stops: step 2 is done
        return trainer.dataflex


def _rows(part) -> StagedRows:
    real = ~part["is_padding"]
    reward = torch.where(part["mask"].any(-1), part["reward"], torch.nan)  # an empty response is not scored
    return StagedRows(part["group"][real], part["prompt"][real], part["tokens"][real], reward[real])


def staged_recording(trainer) -> list[StagedStep]:
    """Each step ``trainer`` trains, as its stages generated it (the loop's ``generate``) and its loss trained it."""
    steps: list[StagedStep] = []
    generate, rollout, log = trainer.generate, trainer.rollout, trainer.log
    parts: list[dict[str, torch.Tensor]] = []

    def generating(prompts, counts, groups, gen):
        part = generate(prompts, counts, groups, gen)
        parts.append({name: value.clone() for name, value in part.items()})
        return part

    def rolling_out(step):
        parts.clear()
        batch = rollout(step)
        stages = trainer.stages
        if stages is None:  # a step the mechanism left to the loop (before warmup_step)
            return batch
        kept = [keep[keep < int((~part["is_padding"]).sum())] for part, keep in zip(parts, stages.trained())]
        steps.append(StagedStep(
            [*stages.requests], [_rows(part) for part in parts], kept, _rows(batch), stages.groups, stages.rollout_n,
        ))  # fmt: skip
        return batch

    def logging(metrics):
        log(metrics)
        if steps and any(name.startswith("dataflex/") for name in metrics):
            steps[-1].metrics.update(metrics)

    trainer.generate, trainer.rollout, trainer.log = generating, rolling_out, logging
    return steps


class TestToyHost(HostSuite):  # every suite: those of seams the loop lacks skip with its reason
    @pytest.fixture(params=["token-mean", "seq-mean-token-mean"])
    def host(self, request, tmp_path):
        return ToyHarness(tmp_path, request.param)
