"""``mechanism: curriculum`` in verl's host: the sampler decides which prompts verl's real dataloader draws,
and verl's real ``_compute_advantage`` feeds the prompt history (padding rows left out).

Scorer and sampler are test components defined here (the trainer runs in this process).
"""

from __future__ import annotations

import collections

import numpy as np
import pytest
import torch

from dataflex_core import ConfigError, Scorer, register_scorer
from dataflex_lab.testing import register_toy_components
from dataflex_lab.verl import sandbox

pytestmark = pytest.mark.verl

ROWS = 40
BATCH = 8


@register_scorer("curtest_verl_math")
class MathOnly(Scorer):
    """pre_rollout: 1 for math prompts, 0 for code prompts; counts the steps it observed."""

    timing = "pre_rollout"
    requires = ["domain"]

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.observed: list[dict] = []

    def score(self, batch, step_id, **ctx):
        return torch.from_numpy(np.where(np.asarray(batch.non_tensor_batch["domain"]) == "math", 1.0, 0.0))

    def observe(self, outcomes, step_id, **ctx):
        self.observed.append({"step": step_id, "prompts": outcomes.batch["prompt_index"].tolist()})


register_toy_components("curtest_verl")  # the sampler curtest_verl_proportional


BLOCK = {
    "mechanism": "curriculum",
    "scorer": {"name": "curtest_verl_math"},
    "actuator": {"name": "curtest_verl_proportional"},
}


def write_dataset(path, ids):
    import pandas as pd

    rows = [
        {
            "prompt": [{"role": "user", "content": f"question {i}"}],
            "data_source": "synthetic",
            "domain": "math" if i % 2 == 0 else "code",
            "reward_model": {"ground_truth": "1"},
            "extra_info": {"index": ids[i]},
        }
        for i in range(ROWS)
    ]
    pd.DataFrame(rows).to_parquet(path)
    return str(path)


@pytest.fixture(scope="module")
def dataset_path(tmp_path_factory):
    """40 prompts alternating math / code, ``extra_info.index`` = 1000 + row."""
    return write_dataset(tmp_path_factory.mktemp("curriculum") / "train.parquet", [1000 + i for i in range(ROWS)])


def curriculum_trainer(make_config, dataset_path, block=BLOCK):
    return sandbox.dataloader_trainer(make_config(sandbox.dataset_overrides(dataset_path, BATCH, seed=3), block))


def test_the_sampler_decides_which_prompts_verl_draws(make_config, dataset_path):
    trainer = curriculum_trainer(make_config, dataset_path)
    assert trainer.dataflex.fields == ["response_mask", "rm_scores", "index"]
    batches = [trainer._next_train_batch() for _ in range(5)]
    for batch in batches:
        assert set(batch["domain"]) == {"math"}  # code prompts have probability 0
        ids = [info["index"] for info in batch["extra_info"]]
        assert len(set(ids)) == BATCH  # 1/20 each: never twice in a batch of 8
    sampler = trainer.dataflex.sampler
    assert sampler.draw_metrics["dataflex/curriculum/draw/max_probability"] == pytest.approx(1 / 20)
    assert int(sampler.draws[1::2].sum()) == 0 and int(sampler.draws.sum()) == 5 * BATCH


def test_verls_compute_advantage_feeds_the_history(queue, make_config, dataset_path):
    from tensordict import NonTensorStack

    trainer = curriculum_trainer(make_config, dataset_path)
    batch = trainer._next_train_batch()
    ids = [info["index"] for info in batch["extra_info"]]
    n = 4
    rollout = sandbox.synthetic_rollout(num_prompts=BATCH, n=n, padding_rows=1, seed=5)
    # verl's padding rows copy a real row's dataset columns; the host must leave them out anyway
    rollout.fields["index"] = NonTensorStack(*[i for i in ids for _ in range(n)], ids[0])
    meta = sandbox.put_rollout(rollout)
    metrics: dict = {}
    out = trainer._compute_advantage(meta, metrics)
    sandbox.clear(out)
    history = trainer.dataflex.sampler.history
    rows = [i - 1000 for i in ids]
    assert sorted(history.times_sampled.nonzero().flatten().tolist()) == sorted(rows)
    assert int(history.rollouts.sum()) == BATCH * n  # the padding row is not a rollout
    (observed,) = trainer.dataflex.pipeline.scorer.observed
    assert observed["step"] == 1 and sorted(observed["prompts"]) == sorted(rows)
    assert metrics["dataflex/curriculum/prompts"] == BATCH
    assert metrics["dataflex/active"] == 1.0
    assert "rollout_is_weights" not in (out.fields or [])  # the loss is verl's own


def test_prompt_ids_must_identify_every_prompt(make_config, tmp_path):
    repeated = write_dataset(tmp_path / "train.parquet", [i // 2 for i in range(ROWS)])
    with pytest.raises(ConfigError, match=r"prompt_key='index' must identify each prompt.*20 rows repeat an id"):
        curriculum_trainer(make_config, repeated)


def test_a_prompt_key_that_is_no_column_is_named(make_config, dataset_path):
    with pytest.raises(ConfigError, match="prompt_key='problem' is not a column of the train dataset"):
        curriculum_trainer(make_config, dataset_path, {**BLOCK, "prompt_key": "problem"})


def test_draws_spread_over_the_candidates_in_proportion(make_config, dataset_path):
    sampler = {"name": "temperature", "params": {"temperature": 0.5}}
    trainer = curriculum_trainer(make_config, dataset_path, {**BLOCK, "actuator": sampler})
    domains = collections.Counter(d for _ in range(25) for d in trainer._next_train_batch()["domain"])
    # softmax([1, 0] / 0.5) over 20 math and 20 code prompts, with a 5% uniform share: the math prompts' mass
    math = 0.95 * np.exp(2) / (np.exp(2) + 1) + 0.05 / 2
    assert domains["math"] / (25 * BATCH) == pytest.approx(math, abs=0.05)
