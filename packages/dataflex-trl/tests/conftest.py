"""Fixtures for the TRL host tests (helpers and test components in ``trl_testkit``)."""

from __future__ import annotations

import copy
import sys
import warnings
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from trl_testkit import NUM_GENERATIONS, PROMPTS_PER_STEP, grpo_config  # noqa: E402


@pytest.fixture(scope="session")
def tokenizer():
    from dataflex_lab.trl.toy import char_tokenizer

    return char_tokenizer()


@pytest.fixture(scope="session")
def dataset():
    from dataflex_lab.trl.toy import toy_dataset

    return toy_dataset(64, seed=0)


def trainer_factory(tmp_path, tokenizer, dataset):
    """``make(loss_type, dataflex=None, **config)``: a fresh tiny model (same seed each time) in a
    ``DataFlexGRPOTrainer`` (or a plain ``GRPOTrainer`` without ``dataflex``) writing under ``tmp_path``, ready for
    ``_compute_loss``."""
    from dataflex_trl import DataFlexGRPOTrainer
    from trl import GRPOTrainer

    from dataflex_lab.trl.toy import echo_reward, tiny_model

    def make(loss_type: str = "dapo", dataflex=None, *, model=None, train_dataset=None, reward=echo_reward, **config):
        args = grpo_config(tmp_path, loss_type, **config)
        model = tiny_model(tokenizer, seed=0) if model is None else model
        kwargs = dict(
            reward_funcs=reward, args=args, train_dataset=train_dataset or dataset, processing_class=tokenizer
        )
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if dataflex is None:
                trainer = GRPOTrainer(model=model, **kwargs)
            else:
                trainer = DataFlexGRPOTrainer(model=model, dataflex=copy.deepcopy(dataflex), **kwargs)
        trainer.model.train()
        trainer.current_gradient_accumulation_steps = 1
        return trainer

    return make


@pytest.fixture
def make_trainer(tmp_path, tokenizer, dataset):
    """:func:`trainer_factory` in the test's own folder."""
    return trainer_factory(tmp_path, tokenizer, dataset)


@pytest.fixture
def generation_inputs(dataset):
    """One generation batch as TRL's dataloader yields it: each prompt ``NUM_GENERATIONS`` times in a row."""
    rows = [dataset[i] for i in range(PROMPTS_PER_STEP)]
    return [dict(row) for row in rows for _ in range(NUM_GENERATIONS)]
