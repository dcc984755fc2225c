"""A task family in verl's terms, without Ray: the files verl reads, its reward call, validation, and the counters
a plain arm logs through verl's own metric function."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from dataflex_lab import task_families
from dataflex_lab.verl.cpu_loop import runner, task, verl_internals
from dataflex_lab.verl.training_demo import DemoSettings, validation_metric


@pytest.fixture(scope="module")
def repeat_workspace(tmp_path_factory):
    root = tmp_path_factory.mktemp("repeat")
    return runner.prepare_workspace(root, task="repeat", task_params={"difficulty": [1, 4]}, data_seed=3)


def test_verls_dataset_reads_every_prompt_of_the_family_within_the_runs_lengths(repeat_workspace):
    """verl's ``RLHFDataset`` tokenizes the rows with the workspace's tokenizer and drops none as too long."""
    from omegaconf import OmegaConf
    from transformers import AutoTokenizer
    from verl.utils.dataset.rl_dataset import RLHFDataset

    config = runner.compose(runner.RunSpec(), repeat_workspace).data
    assert config.max_prompt_length == repeat_workspace.max_prompt_length
    assert config.max_response_length == 4  # the longest answer of difficulty 4
    tokenizer = AutoTokenizer.from_pretrained(str(repeat_workspace.tokenizer))
    splits = task_families.FAMILIES["repeat"].build(task_families.Structure(difficulty=(1, 4)), 3)
    for files, prompts in ((repeat_workspace.train_files, splits.train), (repeat_workspace.val_files, splits.held_out)):
        data = RLHFDataset(str(files), tokenizer, OmegaConf.merge(config, {"filter_overlong_prompts": True}))
        assert len(data) == len(prompts)
        for i in (0, len(data) - 1):
            row = data[i]
            assert row["raw_prompt"] == [{"role": "user", "content": prompts[i].text}]
            assert row["index"] == i  # verl copies extra_info.index: the prompt id of curriculum and allocate
            ids = tokenizer.apply_chat_template(row["raw_prompt"], add_generation_prompt=True, tokenize=True)
            ids = ids["input_ids"] if hasattr(ids, "keys") else ids
            assert tokenizer.pad_token_id not in ids  # every character is in the vocabulary (pad doubles as unk)
            assert len(ids) <= config.max_prompt_length
    held = {p.text for p in splits.held_out}
    assert not held & {p.text for p in splits.train}  # the validation prompts are never trained on


def test_the_reward_verl_loads_by_path_is_the_familys_binary_rule(repeat_workspace):
    import pandas as pd
    from verl.utils.import_utils import load_extern_object

    compute_score = load_extern_object(module_path=task.__file__, object_name="compute_score")
    rows = pd.read_parquet(repeat_workspace.train_files)
    seen = set()
    for row in rows.itertuples():
        answer = row.reward_model["ground_truth"]
        right = answer if row.kind == "learnable" else "aa"
        expected = {"solved": (1.0, 1.0), "unsolvable": (0.0, 0.0), "learnable": (1.0, 0.0)}[row.kind]
        assert (compute_score(row.data_source, right, answer), compute_score(row.data_source, "z", answer)) == expected
        seen.add(row.kind)
    assert seen == set(task_families.KINDS)
    assert compute_score(task.DATA_SOURCE, "eeee", "e") == 1.0  # the echo task keeps its partial credit


def test_the_demo_validates_on_the_held_out_split_every_n_steps_under_verls_metric_name(repeat_workspace):
    settings = DemoSettings(task="count", val_every=4)
    overrides = settings.overrides()
    assert "trainer.test_freq=4" in overrides and "trainer.val_before_train=true" in overrides
    assert "actor_rollout_ref.rollout.val_kwargs.n=8" in overrides
    assert validation_metric(settings) == "val-aux/dataflex_count/reward/mean@8"
    spec = runner.RunSpec(extra=DemoSettings(task="repeat", val_every=2).overrides())
    config = runner.compose(spec, repeat_workspace)
    assert config.data.val_files == str(repeat_workspace.val_files) and config.trainer.test_freq == 2


def _verl_batch(rewards: list[list[float]], response_lengths: list[int]):
    """A GRPO batch as verl's trainers hand ``compute_data_metrics`` (groups of one prompt each, rewards at the
    last response token, advantages from verl's own GRPO estimator)."""
    from verl import DataProto
    from verl.trainer.ppo.core_algos import compute_grpo_outcome_advantage

    n, width = len(rewards[0]), max(response_lengths)
    rows = len(rewards) * n
    mask = torch.zeros(rows, width)
    scores = torch.zeros(rows, width)
    for row in range(rows):
        length = response_lengths[row % len(response_lengths)]
        mask[row, :length] = 1
        scores[row, length - 1] = rewards[row // n][row % n]
    uid = np.asarray([f"p{row // n}" for row in range(rows)], dtype=object)
    advantages, returns = compute_grpo_outcome_advantage(scores, mask, uid)
    prompts = torch.ones(rows, 3, dtype=torch.long)
    tensors = {
        "prompts": prompts,
        "responses": torch.ones(rows, width, dtype=torch.long),
        "attention_mask": torch.cat([torch.ones(rows, 3), mask], dim=1),
        "response_mask": mask,
        "token_level_scores": scores,
        "token_level_rewards": scores,
        "advantages": advantages,
        "returns": returns,
    }
    return DataProto.from_dict(tensors=tensors, non_tensors={"uid": uid})


def test_a_plain_arm_counts_its_compute_with_dataflexs_function_inside_verls_metrics(monkeypatch):
    """The baseline arm's counters: verl's ``compute_data_metrics`` plus core's counters of the same batch, the
    zero-variance groups' rows as wasted, totals over the run's steps; nothing else of verl's metrics changes."""
    import importlib

    from verl.trainer.ppo import metric_utils

    from dataflex_core.compute import compute_counters

    original = metric_utils.compute_data_metrics
    monkeypatch.setattr(metric_utils, "compute_data_metrics", original)  # restored after the test
    for name in verl_internals.DATA_METRICS_CALLERS:
        monkeypatch.setattr(importlib.import_module(name), "compute_data_metrics", original)
    verl_internals.install_compute_counters()
    verl_internals.install_compute_counters()  # once only: a second install does not count twice
    counted = importlib.import_module("verl.trainer.ppo.v1.trainer_base").compute_data_metrics
    assert counted is metric_utils.compute_data_metrics and counted is not original

    batch = _verl_batch([[1, 1, 1, 1], [0, 1, 0, 0], [0, 0, 0, 0]], response_lengths=[1, 2, 3])
    first = counted(batch=batch, use_critic=False)
    assert {k: v for k, v in first.items() if not k.startswith("dataflex/")} == original(batch, use_critic=False)
    assert first["dataflex/compute/rollouts_generated"] == 12 and first["dataflex/compute/rollouts_trained"] == 12
    assert first["dataflex/compute/rollouts_wasted"] == 8  # the all-solved and the never-solved group
    expected = compute_counters(batch.batch["response_mask"], batch.batch["advantages"])
    assert {k: first[k] for k in expected} == expected
    second = counted(batch, use_critic=False)
    assert second["dataflex/compute/rollouts_generated_total"] == 24
    assert second["dataflex/compute/tokens_generated_total"] == 2 * batch.batch["response_mask"].sum()


def test_a_dataflex_run_cannot_ask_the_harness_for_counters_it_would_overwrite(tmp_path):
    spec = runner.RunSpec(dataflex={"mechanism": "reweight"}, compute_counters=True)
    with pytest.raises(ValueError, match="compute_counters is for runs without DataFlex"):
        runner.run_env(tmp_path / "m.jsonl", spec=spec)
    env = runner.run_env(tmp_path / "m.jsonl", spec=runner.RunSpec(compute_counters=True))
    assert env[verl_internals.COMPUTE_COUNTERS_ENV] == "1"
