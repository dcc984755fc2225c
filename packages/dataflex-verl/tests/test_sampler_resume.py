"""verl resumes DataFlex's train sampler from its own ``data.pt`` (torchdata's ``StatefulDataLoader``): a sampler
state there that the sampler refuses (another dataset's, or a field altered) stops the resume naming ``data.pt``
(issue 58 item 1), where it used to surface at the fit loop's first batch without the file."""

from __future__ import annotations

import os
from types import SimpleNamespace

import pytest
import torch
from torchdata.stateful_dataloader import StatefulDataLoader

from dataflex_core import ConfigError
from dataflex_core.step import DomainMixtureSampler
from dataflex_core.step.state import ComponentStateError
from dataflex_verl.checkpoint import DATALOADER_STATE, DataFlexCheckpointMixin
from dataflex_verl.sampling import replace_train_sampler


def mixture(rows: int = 8) -> DomainMixtureSampler:
    return DomainMixtureSampler([0, 1] * (rows // 2), ["math", "code"], 2, torch.tensor([0.5, 0.5]))


class VerlLoad:
    """verl 0.9's side of ``_load_checkpoint`` that matters here: ``data.pt`` into the train dataloader."""

    def _load_checkpoint(self) -> None:
        path = os.path.join(self.config.trainer.resume_from_path, DATALOADER_STATE)
        self.train_dataloader.load_state_dict(torch.load(path, weights_only=False))


class Session:
    """The session's side: its files checked and restored (nothing to do here), and its train sampler."""

    def __init__(self, sampler: DomainMixtureSampler) -> None:
        self.sampler = sampler

    def check_resume(self, folder: str) -> None:
        pass

    def restore(self, folder: str) -> None:
        pass


class Trainer(DataFlexCheckpointMixin, VerlLoad):
    def __init__(self, sampler: DomainMixtureSampler, folder: str) -> None:
        self.config = SimpleNamespace(trainer=SimpleNamespace(resume_mode="resume_path", resume_from_path=folder))
        self.train_dataset = list(range(len(sampler.domain_of_row)))
        self.train_dataloader = StatefulDataLoader(self.train_dataset, batch_size=2, drop_last=True)
        self.dataflex = Session(sampler)
        replace_train_sampler(self, sampler)


@pytest.fixture
def saved(tmp_path):
    """A checkpoint folder whose ``data.pt`` verl wrote after one batch, and the batches the run drew next."""
    folder = tmp_path / "global_step_1"
    folder.mkdir()
    trainer = Trainer(mixture(), str(folder))
    batches = iter(trainer.train_dataloader)
    next(batches)
    torch.save(trainer.train_dataloader.state_dict(), folder / DATALOADER_STATE)
    return folder, [batch.tolist() for batch in batches]


def alter(folder, **fields):
    state = torch.load(folder / DATALOADER_STATE, weights_only=False)
    state["_sampler_iter_state"]["sampler_state"].update(fields)
    torch.save(state, folder / DATALOADER_STATE)


def test_a_sound_sampler_state_resumes_the_same_batches(saved):
    folder, rest = saved
    trainer = Trainer(mixture(), str(folder))
    trainer._load_checkpoint()
    assert [batch.tolist() for batch in trainer.train_dataloader] == rest


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"cursor": [99, 0]}, r"state\['cursor\[0\]'\] is 99: it lies between 0 and 4"),
        ({"perms": [torch.tensor([0, 2, 4, 4]), torch.tensor([1, 3, 5, 7])]},
         r"state\['perms\[0\]'\] .*: it lists a row twice"),
        ({"proportions": [float("nan"), 1.0]}, r"state\['proportions'\] is \[nan, 1.0\]"),
        ({"yielded": -5}, r"state\['yielded'\] is -5"),
    ],
)  # fmt: skip
def test_an_altered_sampler_state_in_data_pt_is_refused_at_resume_naming_the_file(saved, fields, message):
    folder, _ = saved
    alter(folder, **fields)
    trainer = Trainer(mixture(), str(folder))
    with pytest.raises(
        ComponentStateError, match=rf"global_step_1/{DATALOADER_STATE}: the train sampler's .*{message}"
    ):
        trainer._load_checkpoint()


def test_a_sampler_state_over_another_dataset_is_refused_naming_the_file_and_both_sizes(saved):
    folder, _ = saved
    trainer = Trainer(mixture(rows=10), str(folder))
    with pytest.raises(
        ConfigError, match=rf"global_step_1/{DATALOADER_STATE}: .* dataset of 8 rows, but this run's has 10"
    ):
        trainer._load_checkpoint()
