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

from dataflex_conformance.host import HostHarness, HostStep, HostSuite


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

    def save(self, block):
        trainer = self.trainer(block, save_steps=2)
        trainer.train(2)
        return trainer.checkpoint_folder(2), trainer.dataflex

    def resume(self, block, folder):
        trainer = self.trainer(block)
        trainer.train(2, resume_from=folder)  # restores, then stops: step 2 is done
        return trainer.dataflex


class TestToyHost(HostSuite):  # every suite: those of seams the loop lacks skip with its reason
    @pytest.fixture(params=["token-mean", "seq-mean-token-mean"])
    def host(self, request, tmp_path):
        return ToyHarness(tmp_path, request.param)
